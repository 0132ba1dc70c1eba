import Foundation
import PeerCA
import TokenKit

/// Verifies many tokens and prints the resident set size as it goes: it should stay flat.
enum Soak {
    static func rssKilobytes() -> Int {
        guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return -1 }
        let fields = statm.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return -1 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE))) / 1024
    }

    static func run(count: Int) throws {
        for (name, algorithm, cache, n) in [
            ("HS256", JWTAlgorithm.hs256, false, count), ("HS256+cache", .hs256, true, count), ("RS256", .rs256, false, max(count / 10, 1)),
        ] {
            let workload = try Workload(algorithm)
            let verifier = try workload.verifier(engine: .native, cache: cache ? VerifiedTokenCache(capacity: 500) : nil)
            var failures = 0
            let step = max(n / 10, 1)
            print("soak \(name): \(n) verifications, RSS before \(rssKilobytes()) KiB")
            for i in 0..<n {
                if (try? verifier.verify(workload.tokens[i % workload.tokens.count])) == nil { failures += 1 }
                if (i + 1) % step == 0 { print("  \(name) verified \(i + 1) rss_kib \(rssKilobytes())") }
            }
            if failures > 0 { throw BenchError("\(name): \(failures) verifications failed") }
        }
    }
}

/// Issues many certificates into a durable SQLite ledger and prints RSS and the issuance rate as
/// it goes: memory should stay flat, and the rate shows what the crypto and fsync allow.
enum IssuanceSoak {
    static func run(count: Int) async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tokenbench-issue-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let material = try CertificateAuthority.create(name: "Soak", withIntermediate: true)
        let policy = try IssuancePolicy(appID: "soak", provider: "bench")
        let ca = PeerCertificateAuthority(authority: material.authority, policy: policy, ledger: try SQLiteLedger(path: dir.appendingPathComponent("ledger.sqlite").path))
        let idp = try JWTKey.generate(.ec(.p256))
        let verifier = try JWTVerifier(key: idp.publicKey)
        let now = Int(Date().timeIntervalSince1970)
        let token = try verifier.verify(try JWTSigner(key: idp).sign(claims: ["iss": .string("https://idp/"), "sub": .string("device"), "exp": .integer(now + 86_400)]))
        let csr = try ValidatedCSR(Array(try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate()).utf8))
        let step = max(count / 10, 1)
        print("soak issuance: \(count) certificates (P-256 CA, SQLite ledger with synchronous=FULL), RSS before \(Soak.rssKilobytes()) KiB")
        var started = ContinuousClock.now
        for i in 0..<count {
            _ = try await ca.issue(token: token, csr: csr)
            if (i + 1) % step == 0 {
                let elapsed = ContinuousClock.now - started
                let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
                print("  issued \(i + 1) rss_kib \(Soak.rssKilobytes()) certificates_per_s \(Int(Double(step) / seconds))")
                started = ContinuousClock.now
            }
        }
        let recorded = try await ca.ledger.recent(limit: count + 1).count
        guard recorded == count else { throw BenchError("the ledger holds \(recorded) certificates, not \(count)") }
    }
}
