import Foundation
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
