import Foundation
import NIOHTTP1
import PeerCA
import TestSupport
import Testing
import TokenKit
@testable import TokenServer

/// Two service instances sharing one real PostgreSQL server (started on loopback by
/// scripts/pgtest.sh, stopped after) and one CA directory.
@Suite("Two instances, one PostgreSQL ledger", .serialized)
struct PostgresTests {
    @Test func serialsReuseAndRevocationHoldAcrossInstances() async throws {
        try await withTestPostgres { url in try await twoInstances(url) }
    }

    func twoInstances(_ url: String) async throws {
        let dir = try temporaryDirectory()
        let caDirectory = dir.appendingPathComponent("ca").path
        let shared: @Sendable (inout ServerConfiguration) -> Void = { configuration in
            configuration.store = url
            configuration.ca?.directory = caDirectory
            configuration.ca?.tokenReuse = .oncePerTokenID
        }
        let csr = try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate())
        try await LiveServer.with(configure: shared) { first in
            try await LiveServer.with(configure: { configuration in
                shared(&configuration)
                // The second instance's dev provider must accept the first one's tokens.
                configuration.providers["dev"]?.secretFile = ServerConfiguration.devSecretPath(state: first.state.path)
            }) { second in
                // 2 × 40 concurrent issuances through both instances: every serial distinct, all recorded.
                let serials = try await withThrowingTaskGroup(of: String?.self) { group in
                    for i in 0..<80 {
                        let server = i % 2 == 0 ? first : second
                        group.addTask {
                            let (status, reply) = try await server.json(
                                "/v1/certificates", ["provider": .string("dev"), "token": .string(try first.token()), "csr": .string(csr)])
                            return status == 200 ? reply["serial"]?.stringValue : nil
                        }
                    }
                    var serials: [String] = []
                    for try await serial in group { if let serial { serials.append(serial) } }
                    return serials
                }
                #expect(serials.count == 80)
                #expect(Set(serials).count == 80)
                #expect(try await second.service.ca.ledger.recent(limit: 1000).count == 80)

                // Token reuse "once" holds across instances.
                let token = try first.token()
                let once = try await first.json("/v1/certificates", ["provider": .string("dev"), "token": .string(token), "csr": .string(csr)])
                #expect(once.status == 200)
                let again = try await second.json("/v1/certificates", ["provider": .string("dev"), "token": .string(token), "csr": .string(csr)])
                #expect(again.status == 403)
                #expect(again.json["error"].errorCode == "token_reused")

                // A revocation made through the first instance is in the second one's CRL.
                let serial = try #require(serials.first)
                _ = try await first.service.ca.revoke(serial: serial, reason: .keyCompromise)
                let crl = try await second.request(.GET, "/v1/crl")
                let list = try RevocationList(crl.body, issuer: second.service.ca.authority.issuer)
                #expect(list.revoked[serial] != nil)
                #expect(list.revoked.count == 1)
            }
        }
    }
}
