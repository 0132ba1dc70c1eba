import Foundation
import NIOHTTP1
import PeerCA
import TestSupport
import Testing
import TokenKit
@testable import TokenServer

/// The service with its SQLite ledger on a disk that fills up (a tmpfs of its own): a certificate
/// is never answered 200 without being recorded; while the disk is full, issuance is refused with
/// `503 ledger_unavailable` and `Retry-After`; once room is made it works again, without a restart.
/// (Under load, with injected I/O errors too, and checked after a restart: scripts/faults.sh.)
@Suite("The service on a full disk")
struct DiskFaultTests {
    @Test(.enabled(if: getuid() == 0, "mounting a tmpfs needs root"), .timeLimit(.minutes(5)))
    func aFullDiskIsA503AndTheServiceRecovers() async throws {
        let skipped = try await Tmpfs.with(mebibytes: 16) { disk in
            let ledgerPath = disk.path.appendingPathComponent("ledger.sqlite").path
            try await LiveServer.with(configure: { $0.store = "sqlite:" + ledgerPath }) { server in
                let csr = try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate())
                func issue() async throws -> (status: Int, body: String, retryAfter: String?, serial: String?, der: String?) {
                    let body = JSONValue.object(["provider": .string("dev"), "token": .string(try server.token()), "csr": .string(csr)])
                    let (status, reply, headers) = try await server.request(.POST, "/v1/certificates", body: Array(body.compactText.utf8))
                    let object = (try? JSONValue.parse(reply))?.objectValue
                    return (status, String(decoding: reply, as: UTF8.self), headers.first(name: "retry-after"),
                            object?["serial"]?.stringValue, object?["certificate"]?.stringValue)
                }
                var answered: [String: String] = [:]  // serial → the chain answered
                let first = try await issue()
                #expect(first.status == 200, "\(first.body)")
                if let serial = first.serial { answered[serial] = first.der }
                // The disk full: every issuance is refused, as a 503 to retry, none answered 200.
                disk.fill("filler")
                var refusals = 0
                for _ in 0..<20 {
                    let answer = try await issue()
                    if answer.status == 200, let serial = answer.serial {
                        answered[serial] = answer.der  // room was left for it (a page free): it is recorded
                        continue
                    }
                    refusals += 1
                    #expect(answer.status == 503, "\(answer.status) \(answer.body)")
                    #expect(answer.body.contains("\"ledger_unavailable\""), "\(answer.body)")
                    #expect(answer.retryAfter == "1")
                }
                #expect(refusals >= 15, "the full disk refused \(refusals) of 20")
                // Room again: issuance works, same process.
                try disk.remove("filler")
                let again = try await issue()
                #expect(again.status == 200, "\(again.body)")
                if let serial = again.serial { answered[serial] = again.der }
                // Every certificate answered is in the ledger, as answered.
                for (serial, chain) in answered {
                    let entry = try await server.service.ca.ledger.entry(serial: serial)
                    let leaf = try #require(entry, "\(serial) was answered 200 and is not in the ledger")
                    #expect(chain.hasPrefix(leaf.pemForTest), "\(serial) differs from what was answered")
                }
            }
        }
        if let skipped { Issue.record("not run: \(skipped)") }
    }
}

extension LedgerEntry {
    /// The recorded certificate as PEM, as the reply's chain begins.
    fileprivate var pemForTest: String { PEM.encode(label: "CERTIFICATE", der: der) }
}
