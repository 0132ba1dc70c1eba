import Foundation
import TokenKit

struct ScalingResult {
    let algorithm: JWTAlgorithm
    let tasks: Int
    let single: Double
    let parallel: Double
    var ratio: Double { parallel / single }
    var line: String {
        String(format: "  %@: 1 task %.0f tokens/s, %d tasks %.0f tokens/s, scaling %.2f×", algorithm.rawValue, single, tasks, parallel, ratio)
    }
}

enum Scaling {
    /// Throughput of `tasks` concurrent tasks, each looping for `seconds`, against one task.
    ///
    /// Each task verifies its own copies of the token strings, as a server's requests each bring
    /// their own bytes: tasks sharing one array of strings would bounce the strings' reference
    /// counts between cores and measure the benchmark instead of the verifier.
    static func measure(algorithm: JWTAlgorithm, tasks: Int, seconds: Double, tokens: [String], _ verify: @escaping @Sendable (String) -> Bool) async -> ScalingResult {
        let copies = (0..<tasks).map { _ in tokens.map { String(decoding: Array($0.utf8), as: UTF8.self) } }
        let body: @Sendable (Int, Int) -> Bool = { task, i in verify(copies[task][i % tokens.count]) }
        let single = await run(tasks: 1, seconds: seconds, body)
        let parallel = await run(tasks: tasks, seconds: seconds, body)
        return ScalingResult(algorithm: algorithm, tasks: tasks, single: single, parallel: parallel)
    }

    static func run(tasks: Int, seconds: Double, _ body: @escaping @Sendable (Int, Int) -> Bool) async -> Double {
        let start = nowNanoseconds()
        let deadline = start + UInt64(seconds * 1e9)
        let total = await withTaskGroup(of: Int.self) { group in
            for t in 0..<tasks {
                group.addTask {
                    var done = 0
                    var i = t * 7919
                    while nowNanoseconds() < deadline {
                        for _ in 0..<100 {
                            if body(t, i) { done += 1 }
                            i += 1
                        }
                    }
                    return done
                }
            }
            var sum = 0
            for await n in group { sum += n }
            return sum
        }
        return Double(total) / (Double(nowNanoseconds() - start) / 1e9)
    }
}
