import COpenSSL
import Foundation
@_spi(Testing) import PeerCA
import Synchronization
import SwiftASN1
import TokenKit
import X509

/// `tokenbench --issuance-stages`: the cost of each step of one issuance, one thread, no ledger
/// (its cost is shared by a batch and shows in the issuance rows): where the time the limit row
/// does not spend goes.
enum IssuanceStages {
    static func run(seconds: Double, reps: Int, selected: (String) -> Bool) async throws {
        let workload = try IssuanceWorkload()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tokenbench-stages-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let ca = PeerCertificateAuthority(
            authority: workload.material.authority, policy: workload.policy,
            ledger: try SQLiteLedger(path: directory.appendingPathComponent("ledger.sqlite").path))
        let n = IssuanceWorkload.count
        let tokens = workload.tokens
        let verifier = workload.verifier
        let pems = workload.csrs
        let ders = try pems.map { try IssuanceWorkload.der(ofPEM: $0) }
        let texts = pems.map { String(decoding: $0, as: UTF8.self) }
        let requests = try ders.map { try CertificateSigningRequest(derEncoded: $0) }
        let validated = try pems.map { try ValidatedCSR($0) }
        let verified = try tokens.map { try verifier.verify($0) }
        let now = Date()
        let identities = try verified.map { try workload.policy.identity(for: $0, now: now) }
        let notAfter = Date(timeIntervalSince1970: (now.timeIntervalSince1970 + 3600).rounded(.down))
        let notBefore = Date(timeIntervalSince1970: (now.timeIntervalSince1970 - 300).rounded(.down))
        let leaves = try (0..<n).map { i in
            try ca.makeLeaf(serial: SerialNumbers.random(), identity: identities[i], spiffeID: identities[i].spiffeID, csr: validated[i], notBefore: notBefore, notAfter: notAfter)
        }
        let intermediates = ca.authority.intermediates
        let leafDERs = leaves
        let intermediatesPEM = intermediates.map(\.pemString).joined()
        // Certificates as the CA hands them out (through the ledger, concurrently: one group commit
        // for many), for the reply stages.
        let issued = try await withThrowingTaskGroup(of: (Int, IssuedCertificate).self) { group in
            for i in 0..<n { group.addTask { (i, try await ca.issue(identity: identities[i], csr: validated[i])) } }
            var all = [IssuedCertificate?](repeating: nil, count: n)
            for try await (i, certificate) in group { all[i] = certificate }
            return all.compactMap { $0 }
        }
        let stages: [(String, (Int) -> Bool)] = [
            ("token.verify (HS256 + claims)", { i in (try? verifier.verify(tokens[i])) != nil }),
            ("identity (policy)", { i in (try? workload.policy.identity(for: verified[i], now: now)) != nil }),
            ("csr.pem (PEMDocument)", { i in (try? PEMDocument.parseMultiple(pemString: texts[i]))?.count == 1 }),
            ("csr.pem (TokenKit PEM)", { i in (try? PEM.parse(texts[i]))?.count == 1 }),
            ("csr.parse (DER)", { i in (try? CertificateSigningRequest(derEncoded: ders[i])) != nil }),
            ("csr.signature (P-256 verify)", { i in requests[i].publicKey.isValidSignature(requests[i].signature, for: requests[i]) }),
            ("csr.key-kind", { i in PublicKeyKind(requests[i].publicKey) == .p256 }),
            ("csr.key-encode (SPKI)", { i in
                var s = DER.Serializer()
                return (try? s.serialize(requests[i].publicKey)) != nil && s.serializedBytes.count > 60
            }),
            ("csr.validate (all, from PEM)", { i in (try? ValidatedCSR(pems[i])) != nil }),
            ("csr.validate (generic parser, from PEM)", { i in (try? ValidatedCSR(pems[i], fastPath: false)) != nil }),
            ("serial", { _ in SerialNumbers.random().bytes.count > 0 }),
            ("leaf.make (DER + sign)", { i in
                (try? ca.makeLeaf(serial: SerialNumbers.random(), identity: identities[i], spiffeID: identities[i].spiffeID, csr: validated[i], notBefore: notBefore, notAfter: notAfter)) != nil
            }),
            ("leaf.parse (Certificate(derEncoded:))", { i in (try? Certificate(derEncoded: leafDERs[i])) != nil }),
            ("reply.chainPEM", { i in (PEM.encode(label: "CERTIFICATE", der: leaves[i]) + intermediatesPEM).utf8.count > 100 }),
            // The certificate reply as POST /v1/certificates writes it, and (for comparison) the same
            // text through a JSONValue, as the service built it until the twentieth session.
            ("reply.json (IssuedCertificate.replyJSON)", { i in issued[i].replyJSON().count > 1000 }),
            ("reply.json (as a JSONValue, compactBytes)", { i in
                let reply: JSONValue = .object([
                    "certificate": .string(issued[i].chainPEM), "serial": .string(issued[i].serial),
                    "notAfter": .string(ISO8601Text.string(issued[i].notAfter)), "renewAfter": .string(ISO8601Text.string(issued[i].renewAfter())),
                    "spiffeID": .string(issued[i].identity.spiffeID), "identity": issued[i].identity.jsonValue,
                ])
                return reply.compactBytes.count > 1000
            }),
        ]
        printNow("tokenbench --issuance-stages: one thread, \(n) tokens and P-256 CSRs; µs per call (median pass)")
        var total = 0.0
        for (name, body) in stages where selected(name) {
            for i in 0..<n where !body(i) { throw BenchError("stage \(name) failed for input \(i)") }
            let m = measure(count: n, seconds: seconds, reps: reps, body)
            printNow(name.padding(toLength: 40, withPad: " ", startingAt: 0) + String(format: "%9.2f", m.nanosecondsPerToken / 1000))
            total += m.nanosecondsPerToken
        }
        // A long JSON reply: POST /v1/logout's for an account with 20,000 certificates (its
        // revoked serials, as TokenService writes them), written once per call.
        let listingName = "json.logout-reply (20,000 serials)"
        if selected(listingName) {
            let reply: JSONValue = .object([
                "account": .string(identities[0].accountUID),
                "revoked": .array((0..<20_000).map { _ in .string(SerialNumbers.hex(SerialNumbers.random())) }),
            ])
            let m = measure(count: 1, seconds: seconds, reps: reps) { _ in reply.compactBytes.count > 400_000 }
            printNow(listingName.padding(toLength: 40, withPad: " ", startingAt: 0) + String(format: "%9.2f", m.nanosecondsPerToken / 1000))
        }
        // The ledger: 64 writers recording the certificates above (fresh serials) through the
        // group commit, durable; CPU of the whole process per record (writer thread, SQLite,
        // the kernel's write and flush) and the rate.
        let ledgerName = "ledger.record (SQLite, 64 in flight)"
        guard selected(ledgerName) else { return }
        let base = try ca.makeLeaf(serial: SerialNumbers.random(), identity: identities[0], spiffeID: identities[0].spiffeID, csr: validated[0], notBefore: notBefore, notAfter: notAfter)
        let der = base
        let ledger = ca.ledger
        let window = 64
        let counter = Counter()
        let cpu0 = IssuanceBench.cpuSeconds(), wall0 = nowNanoseconds()
        let deadline = wall0 + UInt64(seconds * Double(reps) * 1e9)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for w in 0..<window {
                group.addTask {
                    var i = w
                    while nowNanoseconds() < deadline {
                        let identity = identities[i % n]
                        let entry = LedgerEntry(
                            serial: SerialNumbers.hex(SerialNumbers.random()), subject: identity.spiffeID, commonName: identity.accountUID,
                            tokenIssuer: identity.issuer, tokenSubject: identity.providerUID, tokenID: identity.tokenID,
                            keyFingerprint: validated[i % n].keyFingerprint, notBefore: notBefore, notAfter: notAfter, issuedAt: now, der: der,
                            provider: identity.provider, sessionStart: now, renewalOf: nil)
                        try await ledger.record(entry, claiming: nil)
                        counter.add()
                        i += window
                    }
                }
            }
            try await group.waitForAll()
        }
        let cpu = IssuanceBench.cpuSeconds() - cpu0, wall = Double(nowNanoseconds() - wall0) / 1e9
        let count = counter.value
        printNow(ledgerName.padding(toLength: 40, withPad: " ", startingAt: 0)
            + String(format: "%9.2f  CPU µs per record (all threads); %.0f records/s", cpu / Double(count) * 1e6, Double(count) / wall))
    }
}

private final class Counter: Sendable {
    private let count = Mutex(0)
    func add() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}
