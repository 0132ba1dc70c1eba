import COpenSSL
import Foundation
import GRDB
import PeerCA
import Synchronization
import TokenKit

/// What one issuance run measured.
struct IssuanceResult {
    var name: String
    /// Median over repetitions of certificates / elapsed seconds.
    var rate: Double
    /// Per issuance, from the call to its return (with `window` in flight: includes waiting for
    /// the CPU, the ledger's writer and the fsync behind other issuances), milliseconds.
    var p50: Double
    var p99: Double
    var issued: Int
    var notes: String
    /// The rate over the limit row's: for a library row, over the mean of the limit measured just
    /// before and just after it (``limitAround``).
    var ratioToLimit: Double?
    /// A library row's limit measured just before and just after it (the machine's speed drifts
    /// by several percent from one minute to the next; the ratio is to their mean).
    var limitAround: (before: Double, after: Double)?
    /// For a row run in a child tokenbench: the fields of its `RESULT` line (`cpu_us`, `busy`, …).
    var fields: [String: String] = [:]
}

/// Keeps a window of issuances in flight and times each.
enum IssuanceDriver {
    /// `window` tasks, each issuing one certificate after another until `seconds` pass (so
    /// `window` issuances are always in flight); task `w` issues requests w, w + window, ….
    /// Returns how many were issued, the elapsed seconds (until the last one returned) and every
    /// latency in nanoseconds.
    static func run(
        window: Int, seconds: Double, offset: Int, _ issue: @escaping @Sendable (Int) async throws -> Void
    ) async throws -> (count: Int, elapsed: Double, latencies: [UInt64]) {
        let start = nowNanoseconds()
        let deadline = start + UInt64(seconds * 1e9)
        var latencies: [UInt64] = []
        try await withThrowingTaskGroup(of: [UInt64].self) { group in
            for w in 0..<window {
                group.addTask {
                    var mine: [UInt64] = []
                    mine.reserveCapacity(Int(seconds * 20_000) / max(window, 1) + 16)
                    var i = offset + w
                    while nowNanoseconds() < deadline {
                        let t0 = nowNanoseconds()
                        try await issue(i)
                        mine.append(nowNanoseconds() - t0)
                        i += window
                    }
                    return mine
                }
            }
            for try await mine in group { latencies += mine }
        }
        return (latencies.count, Double(nowNanoseconds() - start) / 1e9, latencies)
    }

    /// Runs `reps` timed repetitions after a warm-up (`warmUp` seconds, at most `seconds`): the median rate, p50/p99 over all
    /// repetitions' issuances, and how many were issued in all (warm-up included).
    static func measure(
        name: String, window: Int, seconds: Double, reps: Int, warmUp: Double = 0.5, _ issue: @escaping @Sendable (Int) async throws -> Void
    ) async throws -> IssuanceResult {
        var offset = 0
        let warm = try await run(window: window, seconds: min(warmUp, seconds), offset: offset, issue)
        offset += warm.count + window
        var rates: [Double] = []
        var all: [UInt64] = []
        for _ in 0..<max(reps, 1) {
            let r = try await run(window: window, seconds: seconds, offset: offset, issue)
            offset += r.count + window
            rates.append(Double(r.count) / r.elapsed)
            if reps > 1 { printNow(String(format: "  %@ repetition %d: %.1f certs/s", name, rates.count, rates.last ?? 0)) }
            all += r.latencies
        }
        let (p50, p99) = percentiles(all)
        return IssuanceResult(name: name, rate: median(rates), p50: p50, p99: p99, issued: warm.count + all.count, notes: "")
    }

    /// p50 and p99 of nanosecond latencies, in milliseconds.
    static func percentiles(_ values: [UInt64]) -> (Double, Double) {
        guard !values.isEmpty else { return (0, 0) }
        let sorted = values.sorted()
        func at(_ q: Double) -> Double { Double(sorted[min(sorted.count - 1, Int(q * Double(sorted.count)))]) / 1e6 }
        return (at(0.50), at(0.99))
    }
}

/// The width of the Swift concurrency pool as this process sees it: how many of 8 busy tasks run
/// at once.
enum PoolProbe {
    final class Counters: Sendable {
        let state = Mutex<(running: Int, peak: Int)>((0, 0))
    }

    static func width() async -> Int {
        let counters = Counters()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    counters.state.withLock { s in
                        s.running += 1
                        s.peak = max(s.peak, s.running)
                    }
                    let end = nowNanoseconds() + 40_000_000
                    while nowNanoseconds() < end {}  // busy: holds its thread
                    counters.state.withLock { $0.running -= 1 }
                }
            }
        }
        return counters.state.withLock { $0.peak }
    }

    /// CPUs this process may run on (its affinity mask, `Cpus_allowed` in /proc/self/status).
    static func affinityCPUs() -> Int {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Cpus_allowed:") })
        else { return -1 }
        return line.dropFirst("Cpus_allowed:".count).reduce(0) { count, c in count + (c.hexDigitValue ?? 0).nonzeroBitCount }
    }

    static func describe(_ width: Int) -> String {
        "affinity \(affinityCPUs()) CPU(s), activeProcessorCount \(ProcessInfo.processInfo.activeProcessorCount), "
            + "online \(sysconf(Int32(_SC_NPROCESSORS_ONLN))), concurrency pool width \(width)"
    }
}

/// `tokenbench --issuance`: the issuance rows. The limit row runs in this process (one thread);
/// each library row runs in a child tokenbench (`--issuance-child NAME`), the 1-core one under
/// `taskset -c 0`, so the whole process — Swift's concurrency pool, GRDB's writer and reader
/// threads, SQLite — has one CPU.
enum IssuanceBench {
    static let limitName = "openssl-raw.limit.issuance"
    static let oneCoreName = "peerca.issuance.1core"
    static let twoCoreName = "peerca.issuance.2core"

    static let header = "row".padding(toLength: 30, withPad: " ", startingAt: 0) + "   certs/s    p50 ms    p99 ms  ratio-to-limit  notes"

    static func line(_ r: IssuanceResult) -> String {
        let ratio = r.ratioToLimit.map { String(format: "%14.3f", $0) } ?? String(repeating: " ", count: 14)
        return r.name.padding(toLength: 30, withPad: " ", startingAt: 0) + String(format: "%10.0f %9.3f %9.3f", r.rate, r.p50, r.p99)
            + "  " + ratio + "  " + r.notes
    }

    static func run(seconds: Double, reps: Int, window: Int, selected: (String) -> Bool, json: String?) async throws {
        printNow("tokenbench --issuance: \(seconds) s × \(reps) repetitions per row; \(window) issuances in flight per library row; load average \(loadAverage())")
        printNow(header)
        var results: [IssuanceResult] = []
        var limit: IssuanceLimit?
        // Every measurement of the limit, in order: the row's, then one after each library row.
        var limitRates: [Double] = []
        if selected(limitName) {
            let (l, result) = try await limitRow(seconds: seconds, reps: reps)
            limit = l
            limitRates.append(result.rate)
            printNow(line(result))
            results.append(result)
        }
        var oneCoreRate: Double?
        for (name, pin) in [(oneCoreName, true), (twoCoreName, false)] where selected(name) {
            var result = try child(name: name, pinToOneCPU: pin, seconds: seconds, reps: reps, window: window)
            if let limit, let before = limitRates.last {
                // The machine is shared and its speed drifts: the limit again right after the row,
                // and the row's ratio to the mean of the limit just before and just after it.
                let after = measure(count: limit.count, seconds: seconds, reps: reps, limit.issue).tokensPerSecond
                limitRates.append(after)
                result.limitAround = (before, after)
                result.ratioToLimit = result.rate / ((before + after) / 2)
                result.notes += String(format: "; limit before / after this row %.0f / %.0f", before, after)
            }
            if pin { oneCoreRate = result.rate } else if let oneCoreRate { result.notes += String(format: "; %.2f× the 1-core row", result.rate / oneCoreRate) }
            printNow(line(result))
            results.append(result)
        }
        if limitRates.count > 1, let first = limitRates.first, let low = limitRates.min(), let high = limitRates.max() {
            printNow(
                "  the limit, measured \(limitRates.count) times in this run: " + limitRates.map { String(format: "%.0f", $0) }.joined(separator: ", ")
                    + String(format: " certs/s (lowest to highest %+.1f%% of the first); load average %@", 100 * (high - low) / first, loadAverage()))
        }
        if let json { try writeJSON(results, seconds: seconds, reps: reps, window: window, to: json) }
    }

    /// `tokenbench --issuance-pairs N`: the aims' two ratios as N pairs of short runs instead of
    /// one long row each, every run in its own child tokenbench: the 2-core row, the limit on both
    /// CPUs at once (two limit children, under `taskset -c 0` and `taskset -c 1`), the limit (one
    /// thread, under `taskset -c 0`), the 1-core row (under `taskset -c 0`, the same CPU); before
    /// the first pair, the limit and the 1-core row once. Each 1-core run's ratio is to the mean of
    /// the limit runs just before and after it, each 2-core run's to the mean of the 1-core runs
    /// just before and after it, and the two-CPU limit's (its two rates summed) to the mean of the
    /// one-CPU limit runs around it; the medians of those ratios are printed with their range: this
    /// VM's speed moves by 10–20% within a minute, and a ratio of neighbours carries less of that
    /// drift than one row against another measured a minute apart. The two-CPU limit shows how far
    /// the crypto alone gains from the second CPU here (the 2-core aim asks the whole issuance for
    /// 1.8×); the rows' CPU time per certificate and busy share show whether a ratio moved with
    /// the cost of a certificate or with the time the CPUs waited.
    static func runPairs(_ pairs: Int, seconds: Double, window: Int) async throws {
        guard pairs > 0 else { throw BenchError("--issuance-pairs needs at least one pair") }
        printNow("tokenbench --issuance-pairs \(pairs): \(seconds) s per run, each in its own child; \(window) issuances in flight; load average \(loadAverage())")
        printNow("pair   limit (CPU 0)   1 core (CPU 0)  µs, busy   ratio   2 cores  µs, busy   × 1 core   limit, 2 CPUs   × limit")
        func row(_ name: String, pinned: Bool) throws -> IssuanceResult {
            try child(name: name, pinToOneCPU: pinned, seconds: seconds, reps: 1, window: window)
        }
        var limits = [try limitChild(seconds: seconds)]
        var ones = [try row(oneCoreName, pinned: true)]
        var oneRatios: [Double] = [], twoRatios: [Double] = [], bothRatios: [Double] = []
        for pair in 1...pairs {
            let two = try row(twoCoreName, pinned: false)
            let both = try limitOnBothCPUs(seconds: seconds)
            limits.append(try limitChild(seconds: seconds))
            ones.append(try row(oneCoreName, pinned: true))
            // The 1-core run of this pair, between the limit runs around it; the 2-core run, between
            // the 1-core runs around it; the two-CPU limit, between the one-CPU limit runs around it.
            let one = ones[pair - 1]
            let limitAround = (limits[pair - 1] + limits[pair]) / 2
            oneRatios.append(one.rate / limitAround)
            twoRatios.append(two.rate / ((one.rate + ones[pair].rate) / 2))
            bothRatios.append(both / limitAround)
            printNow(String(format: "%4d   %13.0f   %14.0f  %@   %5.3f   %7.0f  %@   %8.2f   %13.0f   %7.2f",
                pair, limits[pair - 1], one.rate, costAndBusy(one), oneRatios[pair - 1], two.rate, costAndBusy(two), twoRatios[pair - 1], both, bothRatios[pair - 1]))
        }
        printNow(String(format: "   (the last limit and 1-core runs, after the last pair: %.0f, %.0f)", limits[pairs], ones[pairs].rate))
        func summary(_ values: [Double]) -> String {
            String(format: "median %.3f (%.3f–%.3f)", median(values), values.min() ?? 0, values.max() ?? 0)
        }
        printNow("1 core / the limit: \(summary(oneRatios)); 2 cores / 1 core: \(summary(twoRatios)); \(pairs) pairs; load average \(loadAverage())")
        printNow("the limit on both CPUs at once / on one: \(summary(bothRatios))")
    }

    /// A row's CPU time per certificate and busy share, as its child printed them (`cpu_us`,
    /// `busy`), in 9 columns.
    private static func costAndBusy(_ result: IssuanceResult) -> String {
        let cpu = result.fields["cpu_us"] ?? "?", busy = result.fields["busy"] ?? "?"
        return "\(cpu), \(busy)%".padding(toLength: 9, withPad: " ", startingAt: 0)
    }

    /// The limit in a child tokenbench under `taskset -c 0` (``runChild(name:seconds:reps:window:)``
    /// with the limit's name): its rate.
    static func limitChild(seconds: Double) throws -> Double {
        try limitRate(finishChild(startChild(limitArguments(seconds: seconds), cpu: 0), what: limitName))
    }

    /// The limit on both CPUs at once: two limit children started together, under `taskset -c 0`
    /// and `taskset -c 1`; the sum of their rates.
    static func limitOnBothCPUs(seconds: Double) throws -> Double {
        let first = try startChild(limitArguments(seconds: seconds), cpu: 0)
        let second = try startChild(limitArguments(seconds: seconds), cpu: 1)
        return try limitRate(finishChild(first, what: limitName)) + limitRate(finishChild(second, what: limitName))
    }

    private static func limitArguments(seconds: Double) -> [String] {
        ["--issuance-child", limitName, "--seconds", "\(seconds)", "--reps", "1"]
    }

    private static func limitRate(_ fields: [String: String]) throws -> Double {
        guard let rate = Double(fields["rate"] ?? "") else { throw BenchError("\(limitName): unreadable result \(fields)") }
        return rate
    }

    /// The OpenSSL limit: one thread, 1000 CSRs in turn.
    static func limitRow(seconds: Double, reps: Int) async throws -> (IssuanceLimit, IssuanceResult) {
        let workload = try IssuanceWorkload()
        // A real leaf from the library, for its TBS (what the limit signs the digest of).
        let leaf = try await withTemporaryLedger { ca, _, _ in try await workload.issue(0, with: ca(workload)).derBytes }
        let limit = try IssuanceLimit(csrs: workload.csrs, caKeyPEM: try workload.material.issuerKeyPEM(), leafDER: leaf)
        try limit.check(issuerCertificateDER: workload.material.authority.issuer.derBytes)
        let m = measure(count: limit.count, seconds: seconds, reps: reps, limit.issue)
        // Per-certificate latencies from one more pass over the 1000 CSRs.
        var latencies: [UInt64] = []
        for i in 0..<limit.count {
            let t0 = nowNanoseconds()
            blackHole(limit.issue(i))
            latencies.append(nowNanoseconds() - t0)
        }
        let (p50, p99) = IssuanceDriver.percentiles(latencies)
        let result = IssuanceResult(
            name: limitName, rate: m.tokensPerSecond, p50: p50, p99: p99, issued: 0,
            notes: "1 thread: SHA-256 + P-256 verify of the CSR, P-256 sign of a TBS digest (OpenSSL \(OpenSSLVersion.text))",
            ratioToLimit: 1)
        return (limit, result)
    }

    /// Runs a library row in a child tokenbench and reads its RESULT line.
    static func child(name: String, pinToOneCPU: Bool, seconds: Double, reps: Int, window: Int) throws -> IssuanceResult {
        let fields = try childResult(
            ["--issuance-child", name, "--seconds", "\(seconds)", "--reps", "\(reps)", "--window", "\(window)"],
            pinToOneCPU: pinToOneCPU, what: name)
        guard let rate = Double(fields["rate"] ?? ""), let p50 = Double(fields["p50_ms"] ?? ""), let p99 = Double(fields["p99_ms"] ?? ""),
            let issued = Int(fields["issued"] ?? "")
        else { throw BenchError("\(name): unreadable result \(fields)") }
        let f = { (key: String) in fields[key] ?? "?" }
        let how = pinToOneCPU ? "taskset -c 0" : "no pinning"
        var result = IssuanceResult(
            name: name, rate: rate, p50: p50, p99: p99, issued: issued,
            notes: "\(how): affinity \(f("affinity")) CPU(s) (activeProcessorCount \(f("apc"))), pool width \(f("pool")); "
                + "CPU \(f("cpu_us")) µs/cert, \(f("busy"))% busy; \(f("written_kib")) KiB written/cert, \(f("per_commit")) certs/commit; \(issued) certs, all in the ledger; RSS \(f("rss_kib")) KiB")
        result.fields = fields
        return result
    }

    /// Runs this tokenbench again with `arguments` (under `taskset -c 0` when `pinToOneCPU`) and
    /// returns the fields of the last `RESULT key=value …` line it printed; `what` names it in errors.
    static func childResult(_ arguments: [String], pinToOneCPU: Bool = false, what: String) throws -> [String: String] {
        try finishChild(startChild(arguments, cpu: pinToOneCPU ? 0 : nil), what: what)
    }

    /// Starts this tokenbench again with `arguments`, under `taskset -c CPU` when `cpu` is given;
    /// ``finishChild(_:what:)`` reads its result.
    static func startChild(_ arguments: [String], cpu: Int?) throws -> (process: Process, output: Pipe) {
        let me = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let process = Process()
        if let cpu {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/taskset")
            process.arguments = ["-c", "\(cpu)", me] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: me)
            process.arguments = arguments
        }
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        return (process, pipe)
    }

    /// Waits for a child ``startChild(_:cpu:)`` started and returns the fields of the last
    /// `RESULT key=value …` line it printed; `what` names it in errors.
    static func finishChild(_ child: (process: Process, output: Pipe), what: String) throws -> [String: String] {
        let (process, pipe) = child
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        // Polled: Foundation's waitUntilExit can miss a child's exit on Linux (see the tests' waitForExit).
        while process.isRunning { usleep(10_000) }
        guard process.terminationStatus == 0, let resultLine = output.split(separator: "\n").last(where: { $0.hasPrefix("RESULT ") }) else {
            throw BenchError("\(what): the child run failed (status \(process.terminationStatus)):\n\(output)")
        }
        var fields: [String: String] = [:]
        for pair in resultLine.dropFirst("RESULT ".count).split(separator: " ") {
            let kv = pair.split(separator: "=", maxSplits: 1)
            if kv.count == 2 { fields[String(kv[0])] = String(kv[1]) }
        }
        return fields
    }

    /// The child side: one library row, or the limit row (``limitName``), printed as
    /// `RESULT key=value …`.
    static func runChild(name: String, seconds: Double, reps: Int, window: Int) async throws {
        if name == limitName {
            let (_, result) = try await limitRow(seconds: seconds, reps: reps)
            printNow(String(format: "RESULT name=%@ rate=%.1f p50_ms=%.3f p99_ms=%.3f affinity=%d", name, result.rate, result.p50, result.p99, PoolProbe.affinityCPUs()))
            return
        }
        let width = await PoolProbe.width()
        printNow("\(name): \(PoolProbe.describe(width))")
        let workload = try IssuanceWorkload()
        let (result, rows) = try await withTemporaryLedger { ca, path, ledger in
            let authority = ca(workload)
            try await workload.check(with: authority)
            let cpuBefore = cpuSeconds(), wallBefore = nowNanoseconds(), writtenBefore = bytesWritten()
            let commitsBefore = ledger.commitStatistics
            var result = try await IssuanceDriver.measure(name: name, window: window, seconds: seconds, reps: reps) { i in
                _ = try await workload.issue(i, with: authority)
            }
            // How busy the CPUs were: CPU time of the whole process (user + system) per
            // certificate, and as a share of the CPUs it may use.
            let cpu = cpuSeconds() - cpuBefore, wall = Double(nowNanoseconds() - wallBefore) / 1e9
            let written = Double(bytesWritten() - writtenBefore) / 1024 / Double(max(result.issued, 1))
            let commits = ledger.commitStatistics
            let perCommit = Double(commits.requests - commitsBefore.requests) / Double(max(commits.batches - commitsBefore.batches, 1))
            result.notes = String(
                format: "cpu_us=%.0f busy=%.0f written_kib=%.1f per_commit=%.1f",
                1e6 * cpu / Double(max(result.issued, 1)), 100 * cpu / wall / Double(max(PoolProbe.affinityCPUs(), 1)), written, perCommit)
            return (result, try countRows(sqlitePath: path))
        }
        // The check's certificate, then every one the driver issued.
        guard rows == result.issued + 1 else { throw BenchError("\(name): the ledger holds \(rows) certificates, \(result.issued + 1) were issued") }
        printNow(String(
            format: "RESULT name=%@ rate=%.1f p50_ms=%.3f p99_ms=%.3f issued=%d rows=%d affinity=%d apc=%d pool=%d rss_kib=%d %@",
            name, result.rate, result.p50, result.p99, result.issued, rows, PoolProbe.affinityCPUs(), ProcessInfo.processInfo.activeProcessorCount,
            width, Soak.rssKilobytes(), result.notes))
    }

    /// A durable SQLite ledger (synchronous=FULL, as shipped) in a new temporary directory,
    /// removed afterwards; `body` gets a maker of CAs on it and the file's path.
    static func withTemporaryLedger<T>(
        _ body: (_ ca: (IssuanceWorkload) -> PeerCertificateAuthority, _ path: String, _ ledger: SQLiteLedger) async throws -> T
    ) async throws -> T {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tokenbench-issuance-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("ledger.sqlite").path
        let ledger = try SQLiteLedger(path: path)
        return try await body(
            { PeerCertificateAuthority(authority: $0.material.authority, policy: $0.policy, ledger: ledger) },
            path, ledger)
    }

    /// Rows in an SQLite ledger's certificates table, read through a connection of our own.
    static func countRows(sqlitePath: String) throws -> Int {
        let queue = try DatabaseQueue(path: sqlitePath)
        return try queue.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM certificates") ?? -1 }
    }

    /// User + system CPU time of the whole process so far, seconds.
    static func cpuSeconds() -> Double {
        var usage = rusage()
        guard getrusage(RUSAGE_SELF.rawValue, &usage) == 0 else { return 0 }
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }

    /// Bytes this process has caused to be written to storage so far (/proc/self/io write_bytes).
    static func bytesWritten() -> Int64 {
        guard let io = try? String(contentsOfFile: "/proc/self/io", encoding: .utf8),
            let line = io.split(separator: "\n").first(where: { $0.hasPrefix("write_bytes:") })
        else { return 0 }
        return Int64(line.dropFirst("write_bytes:".count).trimmingCharacters(in: .whitespaces)) ?? 0
    }

    static func loadAverage() -> String {
        let text = (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8)) ?? ""
        return text.split(separator: " ").prefix(3).joined(separator: " ")
    }

    static func writeJSON(_ results: [IssuanceResult], seconds: Double, reps: Int, window: Int, to path: String) throws {
        let rows: [JSONValue] = results.map { r in
            var o: [String: JSONValue] = [
                "name": .string(r.name), "certificates_per_s": .number(String(format: "%.0f", r.rate)),
                "p50_ms": .number(String(format: "%.3f", r.p50)), "p99_ms": .number(String(format: "%.3f", r.p99)), "notes": .string(r.notes),
            ]
            if let ratio = r.ratioToLimit { o["ratio_to_limit"] = .number(String(format: "%.4f", ratio)) }
            if let around = r.limitAround {
                o["limit_before"] = .number(String(format: "%.0f", around.before))
                o["limit_after"] = .number(String(format: "%.0f", around.after))
            }
            return .object(o)
        }
        let document: JSONValue = .object([
            "seconds": .number(String(seconds)), "reps": .integer(reps), "window": .integer(window), "load_average": .string(loadAverage()),
            "issuance": .array(rows),
        ])
        try Data((document.prettyText + "\n").utf8).write(to: URL(fileURLWithPath: path))
    }
}

enum OpenSSLVersion {
    static var text: String {
        guard let p = OpenSSL_version(0) else { return "?" }
        return String(cString: p).split(separator: " ").dropFirst().first.map(String.init) ?? "?"
    }
}
