import CoreFoundation
import Foundation

#if canImport(Glibc)
import Glibc
#endif

@inline(__always)
func nowNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// Keeps a value alive so the optimiser cannot drop the work that made it.
@inline(never)
func blackHole<T>(_ value: T) { withExtendedLifetime(value) {} }

struct Measurement {
    /// Median over repetitions of tokens / elapsed seconds, one thread.
    var tokensPerSecond: Double
    /// Median over whole passes of the batch of (pass time / batch size).
    var nanosecondsPerToken: Double
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return 0 }
    return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}

/// Loops over the batch (indices 0..<count) until `seconds` pass, `reps` times.
func measure(count: Int, seconds: Double, reps: Int, _ body: (Int) -> Bool) -> Measurement {
    var rates: [Double] = []
    var passes: [Double] = []
    var failures = 0
    for _ in 0..<reps {
        let start = nowNanoseconds()
        let deadline = start + UInt64(seconds * 1e9)
        var done = 0
        var now = start
        while now < deadline {
            let passStart = now
            for i in 0..<count where !body(i) { failures += 1 }
            now = nowNanoseconds()
            passes.append(Double(now - passStart) / Double(count))
            done += count
        }
        rates.append(Double(done) / (Double(now - start) / 1e9))
    }
    blackHole(failures)
    return Measurement(tokensPerSecond: median(rates), nanosecondsPerToken: median(passes))
}

/// `print`, then flush: progress lines show at once when the output is a pipe or a file.
func printNow(_ line: String) {
    print(line)
    fflush(nil)
}
