import CAllocCounter
import Foundation
import GRDB
import Logging
import PeerCA
import PeerCAPostgres
import PostgresNIO
import Synchronization

/// `tokenbench --ledger-growth 0,1M,10M [--ledger-store …]`: issuance as the ledger grows. For
/// each size the ledger is filled to that many rows with synthetic certificates (fast: bulk SQL in
/// big transactions, durability off for the fill only), then certificates are issued through the
/// normal ledger — durable, `window` in flight, both cores — by a child tokenbench that opens the
/// ledger as filled (`--ledger-growth-child`), and the rate, p50/p99, the child's RSS and the
/// ledger's size are printed.
///
/// The synthetic rows look like real ones to the indexes: 16-byte hex serials as the CA makes them
/// (`40`, the issue time in milliseconds, 72 random bits: the primary key grows with time), two million distinct accounts (subject and common name, scattered), random fingerprints
/// and token IDs, and a random DER blob as long as a real leaf.
enum LedgerGrowth {
    static func parseSizes(_ text: String) throws -> [Int] {
        try text.split(separator: ",").map { part in
            let t = part.trimmingCharacters(in: .whitespaces).lowercased()
            let (digits, scale): (Substring, Double) =
                t.hasSuffix("m") ? (t.dropLast(), 1e6) : t.hasSuffix("k") ? (t.dropLast(), 1e3) : (Substring(t), 1)
            guard let value = Double(digits), value >= 0 else { throw BenchError("--ledger-growth: \"\(part)\" is not a row count") }
            return Int(value * scale)
        }.sorted()
    }

    /// Distinct accounts the synthetic rows are spread over.
    static let accounts = 2_000_000

    static func run(sizes: [Int], store: String, seconds: Double, reps: Int, window: Int, pairs: Int = 0) async throws {
        var logger = Logger(label: "tokenbench")
        logger.logLevel = .warning
        var temporary: URL?
        let location: LedgerLocation
        if store == "sqlite" {
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tokenbench-growth-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            temporary = dir
            location = .sqlite(path: dir.appendingPathComponent("ledger.sqlite").path)
        } else {
            location = try LedgerLocation(store)
        }
        defer { if let temporary { try? FileManager.default.removeItem(at: temporary) } }
        let workload = try IssuanceWorkload()
        try await LedgerStore.with(location, logger: logger) { ledger in
            let ca = PeerCertificateAuthority(authority: workload.material.authority, policy: workload.policy, ledger: ledger)
            try await workload.check(with: ca)
            let sample = try await workload.issue(0, with: ca)
            guard sample.identity.spiffeID.hasSuffix("device-0") else { throw BenchError("unexpected SPIFFE ID \(sample.identity.spiffeID)") }
            let shape = RowShape(
                subjectPrefix: String(sample.identity.spiffeID.dropLast("device-0".count)), issuer: IssuanceWorkload.issuer,
                derBytes: sample.derBytes.count)
            let filler = try makeFiller(location, shape: shape, logger: logger)
            try await filler.withOpen {
                printNow("tokenbench --ledger-growth, \(filler.name): \(seconds) s × \(reps) repetitions per size, \(window) issuances in flight, "
                    + "\(ProcessInfo.processInfo.activeProcessorCount) cores; a synthetic row as a real one (\(shape.derBytes)-byte DER); load average \(IssuanceBench.loadAverage())")
                printNow("  rows        certs/s    p50 ms    p99 ms     RSS KiB   ledger MiB   CPU µs  KiB wr.   fill   (RSS, CPU and writes: the measuring process's, per certificate)")
                var first: Double?
                var curve: [(Int, Double)] = []
                for size in sizes {
                    var rows = try await filler.count()
                    var fillNote = "-"
                    if size > rows {
                        let needed = Int64(size - rows) * 1_300
                        if let free = filler.freeBytes(), needed > free - 2_000_000_000 {
                            printNow(String(format: "  stopping before %d rows: the fill needs about %.1f GB, %.1f GB are free", size, Double(needed) / 1e9, Double(free) / 1e9))
                            break
                        }
                        let start = nowNanoseconds()
                        try await filler.fill(size - rows, offset: rows)
                        let elapsed = Double(nowNanoseconds() - start) / 1e9
                        fillNote = String(format: "%d rows in %.0f s", size - rows, elapsed)
                        rows = try await filler.count()
                    }
                    // Measured in a new tokenbench that opens the ledger as it now is, as a CA
                    // restarted on a ledger of this size would: in the process that has just
                    // bulk-filled 9 M rows (through a 4 GB page cache, freed since), issuance on a
                    // 10 M-row ledger cost ≈ 140 µs of CPU per certificate against ≈ 128 in a new
                    // process on the same file, minutes apart (README, issuance, sixth session).
                    let result = try child(store: location.url, seconds: seconds, reps: reps, window: window)
                    first = first ?? result.rate
                    curve.append((rows, result.rate))
                    printNow(String(
                        format: "  %-10d %9.0f %9.3f %9.3f %11d %12.0f %8.0f %9.1f   %@", rows, result.rate, result.p50, result.p99, result.rssKilobytes,
                        Double(result.ledgerBytes) / 1_048_576, result.cpuMicroseconds, result.writtenKilobytes, fillNote))
                }
                if let first, curve.count > 1 {
                    printNow("  rate / rate at \(curve[0].0) rows: " + curve.map { String(format: "%d rows %.2f", $0.0, $0.1 / first) }.joined(separator: ", "))
                }
                if pairs > 0, let largest = curve.last, largest.0 > 0 {
                    if case .sqlite = location {
                        try alternate(pairs: pairs, filled: location.url, rows: largest.0, seconds: seconds, reps: reps, window: window)
                    } else {
                        printNow("  --growth-pairs: only for SQLite ledgers")
                    }
                }
            }
        }
    }

    /// `pairs` pairs of children: one on a new, empty ledger (in a temporary directory, removed
    /// after), one on the filled ledger at `filled`; the order swapped every pair, so neither side
    /// always runs first. Prints each pair and the median of the ratios (filled / empty).
    static func alternate(pairs: Int, filled: String, rows: Int, seconds: Double, reps: Int, window: Int) throws {
        printNow("  alternated: a new empty ledger and the \(rows)-row one, \(pairs) pairs, each side in its own child")
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("tokenbench-pairs-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        var ratios: [Double] = []
        for pair in 0..<pairs {
            let empty = scratch.appendingPathComponent("empty-\(pair)")
            try FileManager.default.createDirectory(at: empty, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: empty) }
            let emptyStore = "sqlite:" + empty.appendingPathComponent("ledger.sqlite").path
            let emptyFirst = pair % 2 == 0
            let first = try child(store: emptyFirst ? emptyStore : filled, seconds: seconds, reps: reps, window: window)
            let second = try child(store: emptyFirst ? filled : emptyStore, seconds: seconds, reps: reps, window: window)
            let (emptyResult, filledResult) = emptyFirst ? (first, second) : (second, first)
            let ratio = filledResult.rate / emptyResult.rate
            ratios.append(ratio)
            printNow(String(
                format: "  pair %d (%@ first): empty %.0f certs/s (p99 %.3f ms, CPU %.0f µs), %d rows %.0f certs/s (p99 %.3f ms, CPU %.0f µs): %.2f",
                pair + 1, emptyFirst ? "empty" : "filled", emptyResult.rate, emptyResult.p99, emptyResult.cpuMicroseconds, rows, filledResult.rate,
                filledResult.p99, filledResult.cpuMicroseconds, ratio))
        }
        printNow(String(
            format: "  alternated: %d rows / empty, median of %d pairs %.2f (lowest %.2f, highest %.2f)", rows, ratios.count, median(ratios),
            ratios.min() ?? 0, ratios.max() ?? 0))
    }

    /// The filler of the store at `location`.
    static func makeFiller(_ location: LedgerLocation, shape: RowShape, logger: Logger) throws -> any LedgerFiller {
        switch location {
        case .sqlite(let path): SQLiteFiller(path: path, shape: shape)
        case .postgres(let url): try PostgresFiller(url: url, shape: shape, logger: logger)
        }
    }

    /// One size's figures, as the child that measured them printed them.
    struct Measurement {
        let rate, p50, p99: Double
        let rssKilobytes: Int
        let ledgerBytes: Int64
        let cpuMicroseconds, writtenKilobytes: Double
    }

    /// Runs `tokenbench --ledger-growth-child` on `store` (its ledger as filled) and reads its
    /// RESULT line.
    static func child(store: String, seconds: Double, reps: Int, window: Int) throws -> Measurement {
        let fields = try IssuanceBench.childResult(
            ["--ledger-growth-child", "--ledger-store", store, "--seconds", "\(seconds)", "--reps", "\(reps)", "--window", "\(window)"],
            what: "--ledger-growth")
        guard let rate = Double(fields["rate"] ?? ""), let p50 = Double(fields["p50_ms"] ?? ""), let p99 = Double(fields["p99_ms"] ?? ""),
            let rss = Int(fields["rss_kib"] ?? ""), let bytes = Int64(fields["ledger_bytes"] ?? ""), let cpu = Double(fields["cpu_us"] ?? ""),
            let written = Double(fields["written_kib"] ?? "")
        else { throw BenchError("--ledger-growth: unreadable result \(fields)") }
        return Measurement(rate: rate, p50: p50, p99: p99, rssKilobytes: rss, ledgerBytes: bytes, cpuMicroseconds: cpu, writtenKilobytes: written)
    }

    /// The child side: issues into the ledger at `store` as it is (a full repetition's warm-up
    /// first), and prints one `RESULT key=value …` line.
    static func runChild(store: String, seconds: Double, reps: Int, window: Int) async throws {
        var logger = Logger(label: "tokenbench")
        // Not PostgresNIO's "run() hasn't been called yet" warning when the first query races the client's start.
        logger.logLevel = .error
        let location = try LedgerLocation(store)
        let workload = try IssuanceWorkload()
        try await LedgerStore.with(location, logger: logger) { ledger in
            let ca = PeerCertificateAuthority(authority: workload.material.authority, policy: workload.policy, ledger: ledger)
            // Only for the ledger's size: the child never fills, so no row shape is needed.
            let filler = try makeFiller(location, shape: RowShape(subjectPrefix: "", issuer: "", derBytes: 0), logger: logger)
            try await filler.withOpen {
                let cpuBefore = IssuanceBench.cpuSeconds(), writtenBefore = IssuanceBench.bytesWritten()
                let result = try await IssuanceDriver.measure(name: "growth", window: window, seconds: seconds, reps: reps, warmUp: seconds) { i in
                    _ = try await workload.issue(i, with: ca)
                }
                // This process's CPU time and writes per certificate (PostgreSQL's are the server's: not counted).
                let issued = Double(max(result.issued, 1))
                printNow(String(
                    format: "RESULT rate=%.1f p50_ms=%.3f p99_ms=%.3f rss_kib=%d ledger_bytes=%lld cpu_us=%.1f written_kib=%.2f", result.rate, result.p50,
                    result.p99, Soak.rssKilobytes(), try await filler.bytes(), 1e6 * (IssuanceBench.cpuSeconds() - cpuBefore) / issued,
                    Double(IssuanceBench.bytesWritten() - writtenBefore) / 1024 / issued))
            }
        }
    }
}

/// What a synthetic row looks like.
struct RowShape: Sendable {
    let subjectPrefix: String
    let issuer: String
    let derBytes: Int
}

protocol LedgerFiller: Sendable {
    var name: String { get }
    /// Runs `body` with whatever the filler needs running (PostgreSQL's connection pool).
    func withOpen(_ body: () async throws -> Void) async throws
    func count() async throws -> Int
    /// Adds `n` synthetic rows; `offset` varies them from earlier fills.
    func fill(_ n: Int, offset: Int) async throws
    /// The ledger's size on disk.
    func bytes() async throws -> Int64
    /// Free space where the ledger lives, when known.
    func freeBytes() -> Int64?
}

struct SQLiteFiller: LedgerFiller {
    let path: String
    let shape: RowShape
    var name: String { "SQLite (\(path))" }

    func withOpen(_ body: () async throws -> Void) async throws { try await body() }

    func count() async throws -> Int { try IssuanceBench.countRows(sqlitePath: path) }

    func fill(_ n: Int, offset: Int) async throws {
        // A connection of its own with durability off and a big page cache, for the fill only:
        // closed before the timing, so neither its setting nor its memory stays.
        var configuration = Configuration()
        configuration.busyMode = .timeout(60)
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = OFF; PRAGMA cache_size = -4000000; PRAGMA temp_store = MEMORY")
        }
        let queue = try DatabaseQueue(path: path, configuration: configuration)
        let batch = 1_000_000
        var done = 0
        let now = Date().timeIntervalSince1970
        let start = nowNanoseconds()
        while done < n {
            let m = min(batch, n - done)
            let first = offset + done + 1, last = offset + done + m
            try await queue.write { db in
                try db.execute(
                    sql: """
                        WITH RECURSIVE seq(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM seq WHERE i < ?)
                        INSERT INTO certificates (serial, subject, common_name, token_issuer, token_subject, token_id, key_fingerprint,
                            not_before, not_after, issued_at, der, provider, session_start, renewal_of)
                        SELECT '40' || printf('%012x', CAST(t * 1000 AS INTEGER)) || lower(hex(randomblob(9))), ? || 'device-' || a, 'device-' || a, ?, 'device-' || a,
                            lower(hex(randomblob(16))), lower(hex(randomblob(32))), t - 300, t + 86400, t, randomblob(?), 'bench', t - 3600, NULL
                        FROM (SELECT (i * 2654435761) % ? AS a, ? - (i * 7919) % 31536000 AS t FROM seq)
                        """,
                    arguments: [first, last, shape.subjectPrefix, shape.issuer, shape.derBytes, LedgerGrowth.accounts, now])
            }
            done += m
            if done % 1_000_000 == 0 || done == n {
                let elapsed = Double(nowNanoseconds() - start) / 1e9
                printNow(String(format: "    filled %d of %d rows (%.0f s, %.0f rows/s)", done, n, elapsed, Double(done) / elapsed))
            }
        }
        // Everything on disk before the timing (a checkpoint with synchronous = FULL syncs the
        // file), so the timed fsyncs do not wait behind the fill's writeback.
        try await queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL; PRAGMA wal_checkpoint(TRUNCATE)") }
        try queue.close()
        // The fill connection's page cache went back to malloc; give it back to the system, so
        // the RSS printed is the ledger's and the benchmark's.
        tb_malloc_trim()
    }

    func bytes() async throws -> Int64 {
        [path, path + "-wal", path + "-shm"].reduce(0) { sum, file in
            sum + ((try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int64) ?? 0)
        }
    }

    func freeBytes() -> Int64? {
        let directory = (path as NSString).deletingLastPathComponent
        return (try? FileManager.default.attributesOfFileSystem(forPath: directory.isEmpty ? "." : directory)[.systemFreeSize] as? Int64) ?? nil
    }
}

final class PostgresFiller: LedgerFiller {
    let client: PostgresClient
    let shape: RowShape
    let logger: Logger
    let dataDirectory = Mutex<String?>(nil)
    var name: String { "PostgreSQL" }

    init(url: String, shape: RowShape, logger: Logger) throws {
        guard let components = URLComponents(string: url), let host = components.host, let user = components.user else {
            throw BenchError("not a postgres:// URL")
        }
        let database = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        let tls: PostgresClient.Configuration.TLS =
            components.queryItems?.last(where: { $0.name == "sslmode" })?.value == "disable" ? .disable : .prefer(.makeClientConfiguration())
        var quiet = logger
        quiet.logLevel = .error  // not the "run() hasn't been called yet" warning of the first query
        client = PostgresClient(
            configuration: PostgresClient.Configuration(
                host: host, port: components.port ?? 5432, username: user, password: components.password,
                database: database.isEmpty ? nil : database, tls: tls),
            backgroundLogger: quiet)
        self.shape = shape
        self.logger = quiet
    }

    func withOpen(_ body: () async throws -> Void) async throws {
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { await self.client.run() }
            defer { tasks.cancelAll() }
            // The server's data directory (for the free-space check); only a superuser may read it.
            if let rows = try? await client.query("SHOW data_directory", logger: logger) {
                for try await directory in rows.decode(String.self) { dataDirectory.withLock { $0 = directory } }
            }
            try await body()
        }
    }

    func count() async throws -> Int {
        for try await n in try await client.query("SELECT count(*) FROM certificates", logger: logger).decode(Int.self) { return n }
        return -1
    }

    func fill(_ n: Int, offset: Int) async throws {
        let batch = 500_000
        var done = 0
        let now = Date().timeIntervalSince1970
        let blocks = (shape.derBytes + 15) / 16
        let start = nowNanoseconds()
        try await client.withConnection { connection in
            // This session's commits need not wait for the disk: the fill only.
            try await connection.query("SET synchronous_commit = off", logger: logger)
            while done < n {
                let m = min(batch, n - done)
                let first = offset + done + 1, last = offset + done + m
                try await connection.query(
                    """
                    INSERT INTO certificates (serial, subject, common_name, token_issuer, token_subject, token_id, key_fingerprint,
                        not_before, not_after, issued_at, der, provider, session_start, renewal_of)
                    SELECT '40' || lpad(to_hex((t * 1000)::bigint), 12, '0') || substr(md5(random()::text || i::text), 1, 18), \(shape.subjectPrefix) || 'device-' || a, 'device-' || a, \(shape.issuer), 'device-' || a,
                        md5(random()::text), md5(random()::text) || md5(random()::text), t - 300, t + 86400, t,
                        substring(decode(repeat(md5(random()::text), \(blocks)::int), 'hex') from 1 for \(shape.derBytes)::int), 'bench', t - 3600, NULL
                    FROM (SELECT i, (i * 2654435761) % \(LedgerGrowth.accounts) AS a, \(now) - (i * 7919) % 31536000 AS t
                          FROM generate_series(\(first)::bigint, \(last)::bigint) AS i) AS s
                    """, logger: logger)
                done += m
                if done % 1_000_000 == 0 || done == n {
                    let elapsed = Double(nowNanoseconds() - start) / 1e9
                    printNow(String(format: "    filled %d of %d rows (%.0f s, %.0f rows/s)", done, n, elapsed, Double(done) / elapsed))
                }
            }
            // As a long-running ledger would be: vacuumed and analysed (autovacuum would do it
            // during the timing otherwise), and the fill's dirty pages written out.
            try await connection.query("VACUUM (ANALYZE) certificates", logger: logger)
            try await connection.query("CHECKPOINT", logger: logger)
        }
    }

    func bytes() async throws -> Int64 {
        for try await n in try await client.query("SELECT pg_database_size(current_database())", logger: logger).decode(Int64.self) { return n }
        return -1
    }

    func freeBytes() -> Int64? {
        guard let directory = dataDirectory.withLock({ $0 }) else { return nil }
        return (try? FileManager.default.attributesOfFileSystem(forPath: directory)[.systemFreeSize] as? Int64) ?? nil
    }
}
