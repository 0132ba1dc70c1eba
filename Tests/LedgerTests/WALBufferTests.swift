import Foundation
import GRDB
import PeerCA
import TestSupport
import Testing

/// The "tokentool-walbuffer" VFS (CSQLiteWAL) the SQLite ledger opens its file through: each
/// commit's WAL frames reach the file in a few large writes, and never later than SQLite needs them
/// there (a sync, a read, a barrier before a commit is published to other connections).
@Suite("SQLite WAL buffer")
struct WALBufferTests {
    /// Entries with a DER of `size` bytes (the ledger stores what it is given).
    private func bigEntry(_ serial: String, size: Int) -> LedgerEntry {
        let base = entry(serial, subject: "spiffe://app/idp/\(serial)", commonName: "user-\(serial)")
        return LedgerEntry(
            serial: base.serial, subject: base.subject, commonName: base.commonName, tokenIssuer: base.tokenIssuer,
            tokenSubject: base.tokenSubject, tokenID: base.tokenID, keyFingerprint: base.keyFingerprint, notBefore: base.notBefore,
            notAfter: base.notAfter, issuedAt: base.issuedAt, der: (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ serial.count) })
    }

    /// The ledger's WAL goes through the buffer, in far fewer writes than frames (SQLite alone
    /// makes two per frame), and a connection of SQLite's own VFS then reads every row back intact.
    @Test func theLedgerWritesItsWALInFewCallsAndPlainConnectionsReadIt() async throws {
        let path = try temporaryDirectory().appendingPathComponent("ledger.sqlite").path
        #expect(SQLiteLedger.connectionPath(path).hasSuffix("?vfs=tokentool-walbuffer"))
        let ledger = try SQLiteLedger(path: path)
        let before = try #require(ledger.writerWALBufferCounters())
        let entries = (0..<64).map { bigEntry(String(format: "5%03x", $0), size: 3000) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for entry in entries { group.addTask { try await ledger.record(entry, claiming: nil) } }
            try await group.waitForAll()
        }
        let after = try #require(ledger.writerWALBufferCounters())
        let bytes = after.bytes - before.bytes
        let writes = after.writes - before.writes
        // This ledger's writer: at least the 64 DERs went through its buffer…
        #expect(bytes >= 64 * 3000)
        // …in writes averaging at least two 4,120-byte frames each (SQLite alone: two writes a frame).
        #expect(writes >= 1)
        #expect(writes * 2 * 4120 <= bytes)
        // The process-wide counts include them.
        #expect(SQLiteLedger.walBufferCounters.bytes >= after.bytes)

        let plain = try DatabaseQueue(path: path)
        let (integrity, ders) = try await plain.read { db in
            (try String.fetchOne(db, sql: "PRAGMA integrity_check"),
             try entries.map { try Data.fetchOne(db, sql: "SELECT der FROM certificates WHERE serial = ?", arguments: [$0.serial]) })
        }
        #expect(integrity == "ok")
        #expect(ders.map { $0.map(Array.init) } == entries.map(\.der))
    }

    /// Without a sync at commit (`synchronous = NORMAL`, GRDB's default for a pool's writer), the
    /// frames must still be in the file before the commit is published: the buffer is written at the
    /// barrier SQLite calls between the two copies of the wal-index header. A plain connection
    /// reads each commit as soon as it is made.
    @Test func commitsWithoutASyncArePublishedOnlyWithTheirFrames() async throws {
        let path = try temporaryDirectory().appendingPathComponent("normal.sqlite").path
        let buffered = try DatabasePool(path: SQLiteLedger.connectionPath(path))
        let synchronous = try await buffered.write { db in
            try db.execute(sql: "CREATE TABLE rows (id INTEGER PRIMARY KEY, payload BLOB NOT NULL)")
            return try Int.fetchOne(db, sql: "PRAGMA synchronous")
        }
        #expect(synchronous == 1)
        let plain = try DatabaseQueue(path: path)
        let before = SQLiteLedger.walBufferCounters
        for round in 1...40 {
            let payload = Data((0..<(2000 + round * 97)).map { UInt8(truncatingIfNeeded: $0 &+ round) })
            try await buffered.write { db in
                for _ in 0..<5 { try db.execute(sql: "INSERT INTO rows (payload) VALUES (?)", arguments: [payload]) }
            }
            let (count, last) = try await plain.read { db in
                (try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM rows") ?? -1,
                 try Data.fetchOne(db, sql: "SELECT payload FROM rows ORDER BY id DESC LIMIT 1"))
            }
            #expect(count == round * 5)
            #expect(last == payload)
        }
        #expect(SQLiteLedger.walBufferCounters.bytes - before.bytes >= 40 * 5 * 2000)
        #expect(try await plain.read { db in try String.fetchOne(db, sql: "PRAGMA integrity_check") } == "ok")
    }

    /// Records 40 rounds of 64 certificates (64 accounts), each round's 64 at once: 2,560 in all.
    private func recordInRounds(_ ledger: SQLiteLedger) async throws {
        for round in 0..<40 {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in 0..<64 {
                    let serial = String(format: "7%02x%03x", round, i)
                    group.addTask { try await ledger.record(entry(serial, subject: "spiffe://app/idp/u\(i)", commonName: "u\(i)"), claiming: nil) }
                }
                try await group.waitForAll()
            }
        }
    }

    /// By default the background checkpoint waits for 8,192 certificates: 2,560 start none. (A
    /// checkpoint is counted as started when a batch's count crosses the interval, before that
    /// batch is answered, so nothing here waits for one to run.)
    @Test func theDefaultCheckpointIntervalIsLongerThanTwoThousandCertificates() async throws {
        let path = try temporaryDirectory().appendingPathComponent("ledger.sqlite").path
        let ledger = try SQLiteLedger(path: path)
        try await recordInRounds(ledger)
        #expect(ledger.commitStatistics.requests == 40 * 64)
        #expect(ledger.checkpointStatistics.started == 0)
        #expect(ledger.checkpointStatistics.checkpoints == 0)
    }

    /// Checkpoints run beside the writer: after 2,048 certificates (the interval lowered from
    /// 8,192 for the test) a second connection copies the committed frames into the database
    /// file, long before the writer's own checkpoint (at 40,000 frames, which these ≈ 2,500 small
    /// rows do not reach) would have.
    @Test func committedFramesReachTheDatabaseFileWithoutTheWritersCheckpoint() async throws {
        let path = try temporaryDirectory().appendingPathComponent("ledger.sqlite").path
        let ledger = try SQLiteLedger(path: path, checkpointEvery: 2048)
        func fileSize() throws -> Int { (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? -1 }
        let initial = try fileSize()
        try await recordInRounds(ledger)
        // 2,560 certificates cross the interval once: one checkpoint started, before the answers.
        #expect(ledger.checkpointStatistics.started == 1)
        let deadline = ContinuousClock.now + .seconds(60)
        while ledger.checkpointStatistics.checkpoints == 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(ledger.checkpointStatistics.checkpoints >= 1)
        #expect(ledger.checkpointStatistics.failures == 0)
        #expect(ledger.checkpointStatistics.lastCopiedFrames > 0)
        #expect(try fileSize() > initial + 64 * 1024)
        #expect(try await ledger.recent(limit: 3000).count == 40 * 64)
    }

    /// A path with the characters a `file:` URI gives meaning to (`?`, `#`, `%`) still names the file.
    @Test func aPathWithURICharactersOpensTheFileItNames() async throws {
        let directory = try temporaryDirectory().appendingPathComponent("a?b#c%20d")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.appendingPathComponent("ledger.sqlite").path
        let ledger = try SQLiteLedger(path: path)
        try await ledger.record(entry("6001"), claiming: nil)
        #expect(FileManager.default.fileExists(atPath: path))
        #expect(try await SQLiteLedger(path: path).entry(serial: "6001")?.serial == "6001")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).allSatisfy { $0.hasPrefix("ledger.sqlite") })
    }
}
