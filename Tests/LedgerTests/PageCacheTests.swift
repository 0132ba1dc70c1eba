import Foundation
import GRDB
import PeerCA
import TestSupport
import Testing

/// The layer over SQLite's page cache (CSQLiteWAL's pagecache.c): a commit's truncation of the cache
/// to the database's size is skipped when no page can lie past it, and reaches SQLite's cache
/// whenever one can.
@Suite("SQLite page cache layer", .enabled(if: ProcessInfo.processInfo.environment["TOKENTOOL_SQLITE_PAGECACHE"] != "0"))
struct PageCacheTests {
    /// Installed when the test program loaded, and the ledger's commits skip their truncation.
    @Test func theLedgersCommitsSkipTheCacheTruncation() async throws {
        #expect(SQLiteLedger.pageCacheCounters.state == .installed)
        let ledger = try SQLiteLedger(path: try temporaryDirectory().appendingPathComponent("ledger.sqlite").path)
        let before = SQLiteLedger.pageCacheCounters
        // One at a time: twenty transactions.
        for index in 0..<20 { try await ledger.record(entry(String(format: "6%03x", index)), claiming: nil) }
        let after = SQLiteLedger.pageCacheCounters
        #expect(after.skipped >= before.skipped + 20)
    }

    /// The layer's own check, over SQLite's real page cache: pages moved through the temporary key
    /// and back, a page left there, pages past the limit, a reset.
    @Test func truncationsWithPagesPastTheLimitDropThem() {
        #expect(SQLiteLedger.pageCacheSelfTest() == 0)
    }

    /// A database that shrinks (auto_vacuum = FULL gives pages back at each commit) and grows again,
    /// with a large cache and a second connection reading it: every row as written, the file intact.
    @Test func aDatabaseThatShrinksAndGrowsStaysIntact() throws {
        let path = try temporaryDirectory().appendingPathComponent("shrink.sqlite").path
        let queue = try DatabaseQueue(path: path)
        try queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA auto_vacuum = FULL")
            try db.execute(sql: "PRAGMA cache_size = -16384")
            try db.execute(sql: "CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB NOT NULL)")
        }
        for round in 0..<3 {
            try queue.write { db in
                for id in 0..<1500 { try db.execute(sql: "INSERT INTO t (id, v) VALUES (?, ?)", arguments: [id, rowContent(id, round)]) }
            }
            let grown = try queue.read { db in try Int.fetchOne(db, sql: "PRAGMA page_count") ?? 0 }
            // Every other row, then the upper half: the file shrinks at each commit.
            try queue.write { db in try db.execute(sql: "DELETE FROM t WHERE id % 2 = 1") }
            try queue.write { db in try db.execute(sql: "DELETE FROM t WHERE id >= 750") }
            let shrunk = try queue.read { db in try Int.fetchOne(db, sql: "PRAGMA page_count") ?? 0 }
            #expect(shrunk < grown * 3 / 4, "round \(round): \(grown) → \(shrunk) pages")
            // A rolled-back growth, then the rows back with this round's content.
            try? queue.write { db in
                for id in 2000..<2600 { try db.execute(sql: "INSERT INTO t (id, v) VALUES (?, ?)", arguments: [id, rowContent(id, round)]) }
                throw DatabaseError(resultCode: .SQLITE_ABORT, message: "rolled back on purpose")
            }
            try queue.write { db in
                try db.execute(sql: "DELETE FROM t")
            }
        }
        try queue.write { db in
            for id in 0..<1500 { try db.execute(sql: "INSERT INTO t (id, v) VALUES (?, ?)", arguments: [id, rowContent(id, 9)]) }
        }
        let other = try DatabaseQueue(path: path)
        for connection in [queue, other] {
            let (integrity, rows) = try connection.read { db in
                (try String.fetchOne(db, sql: "PRAGMA integrity_check"), try Row.fetchAll(db, sql: "SELECT id, v FROM t ORDER BY id"))
            }
            #expect(integrity == "ok")
            #expect(rows.count == 1500)
            #expect(rows.allSatisfy { row in row["v"] as Data == self.rowContent(row["id"], 9) })
        }
    }

    /// Row `id`'s 1,500 bytes in round `round`.
    private func rowContent(_ id: Int, _ round: Int) -> Data {
        Data((0..<1500).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ id &* 13 &+ round) })
    }
}
