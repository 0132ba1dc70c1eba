import Foundation
import GRDB
@testable import PeerCA
import TestSupport
import Synchronization
import Testing

/// The SQLite ledger's indexes as the issuance path and the lookups use them.
@Suite("SQLite ledger schema")
struct SQLiteLedgerSchemaTests {
    /// A lookup by SPIFFE ID or account reads indexes only (no scan of the certificates); a
    /// certificate for a known (SPIFFE ID, account) pair adds no row to `certificate_subjects`, and
    /// there is no index of every certificate's SPIFFE ID (the cost it had per certificate is what
    /// the table avoids).
    @Test func lookupsUseIndexesAndKnownPairsAddNoRow() async throws {
        let path = try temporaryDirectory().appendingPathComponent("ledger.sqlite").path
        let ledger = try SQLiteLedger(path: path)
        for i in 0..<6 {
            try await ledger.record(entry(String(format: "2b%02x", i), subject: "spiffe://app/idp/u\(i % 2)", commonName: "u\(i % 2)", issuedAt: 1_800_000_000 + Double(i)), claiming: nil)
        }
        let queue = try DatabaseQueue(path: path)
        try await queue.read { db in
            let plan = try queryPlan(db, SQLiteLedger.bySubjectOrAccount, ["u0", 0.0])
            #expect(!plan.isEmpty)
            #expect(!plan.contains { $0.hasPrefix("SCAN certificates") }, "plan: \(plan)")
            #expect(plan.contains { $0.contains("certificates_expiry_account (expiry_day=? AND common_name=?)") }, "plan: \(plan)")
            #expect(try Int.fetchOne(db, sql: "SELECT count(*) FROM certificate_subjects") == 2)
            #expect(try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'certificates' AND sql LIKE '%(subject)%'") == 0)
        }
        #expect(try await ledger.entries(subject: "spiffe://app/idp/u1").map(\.serial) == ["2b05", "2b03", "2b01"])

        // A row written by other code (an older tokentool on the same file, a repair by hand)
        // is found by its SPIFFE ID too: the pair comes from the table's trigger.
        try await queue.write { db in
            try db.execute(sql: """
                INSERT INTO certificates (serial, subject, common_name, token_issuer, token_subject, token_id, key_fingerprint,
                    not_before, not_after, issued_at, der) VALUES ('2bff', 'spiffe://app/idp/by-hand', 'hand', 'i', 'hand', NULL, 'ab', 1, 2, 1800000100, x'30')
                """)
        }
        #expect(try await ledger.entries(subject: "spiffe://app/idp/by-hand").map(\.serial) == ["2bff"])
        #expect(try await ledger.entries(subject: "hand").map(\.serial) == ["2bff"])
    }

    /// CRLs (`revoked(notExpiredAt:)`) read the partial index of revoked certificates: no scan or
    /// sort of the table, which at 10 M rows is gigabytes. A new certificate adds no entry to it.
    @Test func revokedCertificatesAreReadFromTheirIndex() async throws {
        let path = try temporaryDirectory().appendingPathComponent("ledger.sqlite").path
        let ledger = try SQLiteLedger(path: path)
        for i in 0..<8 {
            try await ledger.record(entry(String(format: "3c%02x", i), issuedAt: 1_800_000_000 + Double(i)), claiming: nil)
        }
        _ = try await ledger.revoke(serial: "3c02", reason: .keyCompromise, at: Date(timeIntervalSince1970: 1_800_000_100))
        _ = try await ledger.revoke(serial: "3c05", reason: .superseded, at: Date(timeIntervalSince1970: 1_800_000_050))
        let queue = try DatabaseQueue(path: path)
        try await queue.read { db in
            let revoked = try queryPlan(db, "SELECT * FROM certificates " + SQLiteLedger.revokedNotExpired, [1_800_000_000.0])
            #expect(revoked.contains { $0.contains("certificates_revoked") }, "plan: \(revoked)")
            #expect(!revoked.contains { $0 == "SCAN certificates" || $0.contains("TEMP B-TREE") }, "plan: \(revoked)")
            // A partial index: only revoked certificates have an entry.
            #expect(try Int.fetchOne(db, sql: "SELECT partial FROM pragma_index_list('certificates') WHERE name = 'certificates_revoked'") == 1)
        }
        #expect(try await ledger.revoked(notExpiredAt: Date(timeIntervalSince1970: 1_800_000_000)).map(\.serial) == ["3c05", "3c02"])
        #expect(try await ledger.recent(limit: 3).map(\.serial) == ["3c07", "3c06", "3c05"])
    }

    /// The latest certificates (`recent(limit:)`, `tokentool ca list`) are the last rows of the
    /// table, read backwards by rowid: no sort of the table (4.6–9.6 s at 3 M rows, by issue
    /// time with no index on it). The order is the ledger's: a certificate recorded after
    /// another comes first even when the clock said an earlier time.
    @Test func theLatestCertificatesAreTheTablesLastRows() async throws {
        let path = try temporaryDirectory().appendingPathComponent("ledger.sqlite").path
        let ledger = try SQLiteLedger(path: path)
        for (i, issuedAt) in [1_800_000_000.0, 1_800_000_010, 1_800_000_020, 1_800_000_005].enumerated() {
            try await ledger.record(entry(String(format: "4d%02x", i), issuedAt: issuedAt), claiming: nil)
        }
        #expect(try await ledger.recent(limit: 2).map(\.serial) == ["4d03", "4d02"])
        #expect(try await ledger.recent(limit: 10).map(\.serial) == ["4d03", "4d02", "4d01", "4d00"])
        #expect(try await ledger.recent(limit: 0).isEmpty)
        let queue = try DatabaseQueue(path: path)
        try await queue.read { db in
            let plan = try queryPlan(db, "SELECT * FROM certificates " + SQLiteLedger.latestRecorded, [2])
            #expect(plan == ["SCAN certificates"], "plan: \(plan)")
        }
    }

    /// A retried one-use token is refused before its certificate is written: deleting the
    /// certificate afterwards, as before, made SQLite check the foreign key from
    /// `token_uses.serial` (enforced on the writer) by reading every token use — 102 ms at 2 M —
    /// inside the writer's transaction. Written and deleted, it also left its (SPIFFE ID,
    /// account) pair behind in `certificate_subjects`, which this checks.
    @Test func aReusedTokenIsRefusedBeforeItsCertificateIsWritten() async throws {
        let path = try temporaryDirectory().appendingPathComponent("ledger.sqlite").path
        let ledger = try SQLiteLedger(path: path)
        #expect(try ledger.writerPragma("foreign_keys") == 1)
        let use = TokenUse(issuer: "i", tokenID: "once")
        try await ledger.record(entry("5a01", subject: "spiffe://app/idp/first", commonName: "first"), claiming: use)
        let refused = await #expect(throws: PeerCAError.self) {
            try await ledger.record(entry("5a02", subject: "spiffe://app/idp/retry", commonName: "retry"), claiming: use)
        }
        #expect(refused?.code == .tokenReused)
        #expect(try await ledger.entry(serial: "5a02") == nil)
        #expect(try await ledger.entry(claiming: use)?.serial == "5a01")
        let queue = try DatabaseQueue(path: path)
        let pairs = try await queue.read { db in try String.fetchAll(db, sql: "SELECT common_name FROM certificate_subjects ORDER BY 1") }
        #expect(pairs == ["first"], "nothing of the refused certificate was written")
        // The refusal was its batch's last record: its probe must not hold the writer's snapshot
        // open past the commit. Another process writes the file; the writer still writes after it.
        try await SQLiteLedger(path: path).record(entry("5a03", commonName: "elsewhere"), claiming: nil)
        try await ledger.record(entry("5a04", commonName: "after"), claiming: TokenUse(issuer: "i", tokenID: "next"))
        #expect(try await ledger.entry(serial: "5a04") != nil)
    }

    /// A server reloads the ended sessions every second from a little before its previous reload
    /// (`SessionDenyList`): that read seeks the date index instead of scanning every account that
    /// ever logged out, and one account's end (what `tokentool ca issue` checks) is one seek.
    @Test func endedSessionsAreReadByDateAndByAccountFromIndexes() async throws {
        let path = try temporaryDirectory().appendingPathComponent("ledger.sqlite").path
        let ledger = try SQLiteLedger(path: path)
        for i in 0..<6 {
            _ = try await ledger.revokeAccount("account-\(i)", reason: .unspecified, at: Date(timeIntervalSince1970: 1_800_000_000 + Double(i) * 100))
        }
        let queue = try DatabaseQueue(path: path)
        try await queue.read { db in
            let since = try queryPlan(db, SQLiteLedger.endedSince, [1_800_000_250.0])
            #expect(since.contains { $0.contains("ended_sessions_by_date") }, "plan: \(since)")
            #expect(!since.contains { $0.hasPrefix("SCAN") }, "plan: \(since)")
        }
        #expect(try await ledger.endedSessions(since: Date(timeIntervalSince1970: 1_800_000_250)).keys.sorted() == ["account-3", "account-4", "account-5"])
        #expect(try await ledger.endedSession(account: "account-2") == Date(timeIntervalSince1970: 1_800_000_200))
        #expect(try await ledger.endedSession(account: "account-9") == nil)
    }

    /// The account index is keyed by expiry day first: a certificate's entry lands among those
    /// expiring the same day. Lookups by account and the end of an account's sessions seek
    /// (day, account) for each day that has certificates — never a scan of the table or of a
    /// day's entries — and find every certificate of the account whatever its day; ending the
    /// sessions revokes exactly those not yet expired.
    @Test func accountsAreFoundThroughTheExpiryDayIndex() async throws {
        let path = try temporaryDirectory().appendingPathComponent("ledger.sqlite").path
        let ledger = try SQLiteLedger(path: path)
        let day = 86_400.0, start = 1_800_000_000.0
        // Account "a" on four expiry days, five certificates: one day past at `now`, one with a
        // certificate expired and one not; "b" on two of those days.
        for (i, offset) in [-3.0, -0.25, 0.5, 2, 9].enumerated() {
            try await ledger.record(
                entry(String(format: "4d%02x", i), subject: "spiffe://app/idp/a", commonName: "a", issuedAt: start + offset * day - 3600),
                claiming: nil)
        }
        for (i, offset) in [0.5, 9].enumerated() {
            try await ledger.record(
                entry(String(format: "4e%02x", i), subject: "spiffe://app/idp/b", commonName: "b", issuedAt: start + offset * day - 3600),
                claiming: nil)
        }
        let queue = try DatabaseQueue(path: path)
        try await queue.read { db in
            #expect(try Int.fetchOne(db, sql: "SELECT count(DISTINCT expiry_day) FROM certificates") == 4)
            #expect(try String.fetchOne(db, sql: "SELECT sql FROM sqlite_master WHERE name = 'certificates_expiry_account'")?.contains("(expiry_day, common_name)") == true)
            #expect(try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master WHERE name = 'certificates_common_name'") == 0)
            let update = try queryPlan(db, SQLiteLedger.revokeAccountUpdate, ["a", start, 0])
            #expect(update.contains { $0.contains("certificates_expiry_account (expiry_day=? AND common_name=?)") }, "plan: \(update)")
            #expect(!update.contains { $0.hasPrefix("SCAN certificates") }, "plan: \(update)")
        }
        #expect(try await ledger.entries(subject: "a").map(\.serial) == ["4d04", "4d03", "4d02", "4d01", "4d00"])
        #expect(try await ledger.entries(subject: "spiffe://app/idp/b").map(\.serial) == ["4e01", "4e00"])
        let now = Date(timeIntervalSince1970: start)
        let revoked = try await ledger.revokeAccount("a", reason: .cessationOfOperation, at: now)
        #expect(revoked.map(\.serial) == ["4d04", "4d03", "4d02"])
        #expect(try await ledger.entry(serial: "4d01")?.status == .valid)
        #expect(try await ledger.entry(serial: "4e00")?.status == .valid)
        #expect(try await ledger.revokeAccount("a", reason: .cessationOfOperation, at: now).isEmpty)
    }

    /// Several ledgers opening one new file at once (two `tokentool` processes started together,
    /// say) all open it: the schema's migrations run once, whoever runs them, and no opener fails
    /// because another one applied a migration between its reading what was applied and its
    /// applying the rest.
    @Test func concurrentOpenersOfANewFileAllOpenIt() async throws {
        for round in 0..<8 {
            let path = try temporaryDirectory().appendingPathComponent("ledger.sqlite").path
            let outcomes = openAtOnce(path, openers: 6)
            #expect(outcomes.isEmpty, "round \(round): \(outcomes)")
            let ledger = try SQLiteLedger(path: path)
            try await ledger.record(entry("4d\(round)"), claiming: nil)
            #expect(try await ledger.entry(serial: "4d\(round)") != nil)
            let queue = try DatabaseQueue(path: path)
            let migrations = try await queue.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM grdb_migrations") }
            #expect(migrations == 7)
        }
    }

    /// What no other opener explains is refused at once, not retried for the 30 s that openers
    /// of one new file get: a file that is not an SQLite database, a directory that is missing.
    @Test func aFileThatIsNotALedgerIsRefusedAtOnce() throws {
        let directory = try temporaryDirectory()
        let notALedger = directory.appendingPathComponent("notes.txt")
        try Data(repeating: 0x41, count: 8192).write(to: notALedger)
        for path in [notALedger.path, directory.appendingPathComponent("missing/ledger.sqlite").path] {
            #expect {
                _ = try SQLiteLedger(path: path)
            } throws: { error in
                guard let error = error as? PeerCAError else { return false }
                return error.code == .ledger && error.message.contains("cannot open the ledger at \(path)")
            }
            // The attempts, counted, with 20 s to retry in (a retry every 10 ms would make
            // hundreds): a failure no other opener explains is thrown after at most one more.
            var attempts = 0
            #expect(throws: (any Error).self) {
                try SQLiteLedger.openingBesideOthers(path, configuration: Configuration(), until: .now + .seconds(20)) {
                    attempts += 1
                    let pool = try DatabasePool(path: path, configuration: Configuration())
                    try pool.read { db in _ = try Int.fetchOne(db, sql: "PRAGMA schema_version") }
                }
            }
            #expect((1...2).contains(attempts), "\(path): \(attempts) attempts")
        }
    }

    /// Opens `openers` ledgers on `path` at once, each on a thread of its own (each blocks in
    /// SQLite's busy wait as a process would; Swift's pool, two threads here, would serialise
    /// them), and returns the errors.
    private func openAtOnce(_ path: String, openers: Int) -> [String] {
        let failures = Mutex<[String]>([])
        let done = DispatchGroup()
        for _ in 0..<openers {
            done.enter()
            Thread {
                do {
                    _ = try SQLiteLedger(path: path)
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
                done.leave()
            }.start()
        }
        done.wait()
        return failures.withLock { $0 }
    }

    /// The steps SQLite plans for a whole statement.
    private func queryPlan(_ db: Database, _ sql: String, _ arguments: StatementArguments) throws -> [String] {
        try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + sql, arguments: arguments).map { $0["detail"] as String? ?? "" }
    }
}
