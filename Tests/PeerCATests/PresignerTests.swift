import Crypto
import Foundation
@testable import PeerCA
import TestSupport
import Testing
import TokenKit
import X509

@Suite("P-256 signatures from nonces computed beforehand")
struct PresignerTests {
    /// Every signature made from a presigned nonce verifies under the key (swift-crypto's
    /// BoringSSL), uses its own nonce (no two r alike), and fails for another message.
    @Test func presignedSignaturesVerifyAndNeverShareANonce() async throws {
        let key = P256.Signing.PrivateKey()
        let presigner = try #require(P256Presigner(privateKey: Array(key.rawRepresentation), capacity: 64))
        var rs = Set<[UInt8]>()
        var signed = 0
        for round in 0..<3 {
            #expect(await presigner.fill(atLeast: 64, timeout: 120), "round \(round): the presigner did not fill: \(presigner.statistics)")
            for i in 0..<64 {
                let message = Array("message \(round)-\(i)".utf8)
                let digest = SHA256.hash(data: message)
                // nil only when the refilling thread (woken at half) holds the lock at that moment.
                guard let raw = digest.withUnsafeBytes({ presigner.sign(digest: $0) }) else { continue }
                signed += 1
                #expect(raw.count == 64)
                let signature = try P256.Signing.ECDSASignature(rawRepresentation: raw)
                #expect(key.publicKey.isValidSignature(signature, for: digest))
                #expect(!key.publicKey.isValidSignature(signature, for: SHA256.hash(data: message + [0])))
                #expect(rs.insert(Array(raw.prefix(32))).inserted, "a nonce was used twice")
            }
        }
        // The store was full before each round, so no signature found it empty; each was made
        // from a pair unless the thread held the lock (counted as busy).
        let statistics = presigner.statistics
        #expect(statistics.used == signed)
        #expect(statistics.missed == 0)
        #expect(statistics.used + statistics.busy == 192)
        #expect(signed >= 96, "the first half of each round comes before the thread is woken")
        #expect(statistics.presigned >= statistics.used)
    }

    /// A signature that finds the store empty computes a batch itself (``P256Presigner/batchSize``
    /// pairs; the first signature of a new presigner always does, its thread having just been
    /// started), signs from one and stores the rest; every signature from such batches verifies,
    /// and no two share a nonce. Before, a signature finding no pair returned nil (signed whole).
    @Test func aSignatureFindingNoPairComputesABatch() throws {
        let key = P256.Signing.PrivateKey()
        let presigner = try #require(P256Presigner(privateKey: Array(key.rawRepresentation), capacity: 64))
        let first = SHA256.hash(data: Array("first".utf8))
        let raw = try #require(first.withUnsafeBytes { presigner.sign(digest: $0) })
        #expect(key.publicKey.isValidSignature(try P256.Signing.ECDSASignature(rawRepresentation: raw), for: first))
        var statistics = presigner.statistics
        #expect(statistics.refills == 1)
        #expect(statistics.used == 1)
        #expect(statistics.presigned >= P256Presigner.batchSize)
        var rs: Set<[UInt8]> = [Array(raw.prefix(32))]
        // Faster than the thread refills: later signatures find the store empty again and refill.
        for i in 0..<400 {
            let digest = SHA256.hash(data: Array("message \(i)".utf8))
            guard let raw = digest.withUnsafeBytes({ presigner.sign(digest: $0) }) else { continue }
            let signature = try P256.Signing.ECDSASignature(rawRepresentation: raw)
            #expect(key.publicKey.isValidSignature(signature, for: digest))
            #expect(!key.publicKey.isValidSignature(signature, for: first))
            #expect(rs.insert(Array(raw.prefix(32))).inserted, "a nonce was used twice")
        }
        statistics = presigner.statistics
        #expect(statistics.missed == 0)
        #expect(statistics.used + statistics.busy == 401)
        #expect(statistics.used == rs.count)
        #expect(statistics.refills >= 1)
        #expect(statistics.presigned >= statistics.used)
    }

    /// Pairs made in one process are never used in another (a child forked without exec has a
    /// copy of the store; both signing with one k would give the key away).
    @Test func aForkedChildNeverUsesItsParentsPairs() async throws {
        let presigner = try #require(P256Presigner(privateKey: Array(P256.Signing.PrivateKey().rawRepresentation), capacity: 8, owner: ProcessOwner(id: getpid() + 1, forkGeneration: ProcessOwner.currentForkGeneration)))
        #expect(await presigner.fill(atLeast: 8, timeout: 120))
        let digest = SHA256.hash(data: Array("message".utf8))
        #expect(digest.withUnsafeBytes { presigner.sign(digest: $0) } == nil)
        #expect(presigner.statistics.used == 0)
    }

    @Test func onlyAP256ScalarMakesAPresigner() {
        #expect(P256Presigner(privateKey: [UInt8](repeating: 0, count: 32)) == nil)
        #expect(P256Presigner(privateKey: [UInt8](repeating: 0xff, count: 32)) == nil)  // above the group order
        #expect(P256Presigner(privateKey: [UInt8](repeating: 1, count: 31)) == nil)
        #expect(P256Presigner(privateKey: Array(P256.Signing.PrivateKey().rawRepresentation)) != nil)
    }

    /// The thread starts with the first signature (or `fill`) and ends when the presigner goes.
    @Test func theThreadStopsWhenThePresignerIsReleased() async throws {
        var presigner = P256Presigner(privateKey: Array(P256.Signing.PrivateKey().rawRepresentation), capacity: 8)
        let running = try #require(presigner?.threadRunning)
        #expect(!running())
        #expect(await (try #require(presigner)).fill(atLeast: 8, timeout: 120))
        #expect(running())
        // It runs in Linux's SCHED_IDLE class (policy 5), or at nice 19 where that is refused.
        let scheduling = try threadScheduling(ofThread: try #require(presigner?.threadID))
        #expect(scheduling.policy == 5 || (scheduling.policy == 0 && scheduling.nice == 19), "\(scheduling)")
        presigner = nil
        let deadline = Date().addingTimeInterval(60)
        while running(), Date() < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(!running())
        _ = presigner
    }

    /// The CA's leaves are signed from presigned nonces once some are ready, and `openssl verify`
    /// accepts them; a CA without its presigner signs whole and still verifies.
    @Test func issuedLeavesAreSignedFromPresignedNoncesAndVerifyInOpenSSL() async throws {
        let openssl = try OpenSSL()
        let test = try TestCA()
        let presigner = try #require(test.material.authority.presigner)
        #expect(await presigner.fill(atLeast: P256Presigner.defaultCapacity, timeout: 120))
        let before = presigner.statistics.used
        let now = Date().timeIntervalSince1970.rounded(.down)
        let csr = Array(try DeviceCSR.make(key: .init(P256.Signing.PrivateKey())).utf8)
        let token = try Tokens.verified(Tokens.claims(sub: "user-7", now: now), now: now)
        let issued = try await test.ca.issue(token: token, csr: csr)
        #expect(presigner.statistics.used == before + 1)
        let whole = PeerCertificateAuthority(authority: test.material.authority.withoutPresigning, policy: test.ca.policy, ledger: test.ca.ledger)
        let token2 = try Tokens.verified(Tokens.claims(sub: "user-8", now: now), now: now)
        let issuedWhole = try await whole.issue(token: token2, csr: csr)
        #expect(presigner.statistics.used == before + 1)
        try openssl.write("root.pem", test.root.pemString)
        try openssl.write("intermediate.pem", test.material.authority.issuer.pemString)
        for (name, certificate) in [("presigned.pem", issued), ("whole.pem", issuedWhole)] {
            try openssl.write(name, try certificate.certificate.pemString)
            let verify = try openssl.run(["verify", "-CAfile", "root.pem", "-untrusted", "intermediate.pem", name])
            #expect(verify.status == 0, "\(verify.output)")
        }
    }
}
