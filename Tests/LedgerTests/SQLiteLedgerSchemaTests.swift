import Foundation
import GRDB
import PeerCA
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

    /// An account's certificates are a chain (`accounts` → latest → `account_previous` → …), and
    /// the account index is partial: it holds each account's first certificate (and those recorded
    /// before the chain, or by other code), keyed by expiry day first. A new certificate of a known
    /// account adds no entry to it. Lookups by account and the end of an account's sessions walk the
    /// chain by serial and seek (day, account) in the index — never a scan of the table — and find
    /// every certificate of the account whatever its day; ending the sessions revokes exactly those
    /// not yet expired.
    @Test func accountsAreFoundThroughTheirChainsAndThePartialIndex() async throws {
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
            #expect(try String.fetchOne(db, sql: "SELECT sql FROM sqlite_master WHERE name = 'certificates_expiry_account'")?.contains("(expiry_day, common_name) WHERE account_previous IS NULL") == true)
            #expect(try Int.fetchOne(db, sql: "SELECT partial FROM pragma_index_list('certificates') WHERE name = 'certificates_expiry_account'") == 1)
            // In the index: each account's first certificate only; the rest chain.
            #expect(try String.fetchAll(db, sql: "SELECT serial FROM certificates WHERE account_previous IS NULL ORDER BY serial") == ["4d00", "4e00"])
            #expect(try Optional<String>.fetchAll(db, sql: "SELECT account_previous FROM certificates WHERE common_name = 'a' ORDER BY serial") == [nil, "4d00", "4d01", "4d02", "4d03"])
            #expect(try Row.fetchAll(db, sql: "SELECT common_name, latest FROM accounts ORDER BY common_name").map { [$0[0] as String, $0[1] as String] } == [["a", "4d04"], ["b", "4e01"]])
            #expect(try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master WHERE name = 'certificates_common_name'") == 0)
            for plan in [
                try queryPlan(db, SQLiteLedger.accountLiveSerials, ["a", start]), try queryPlan(db, SQLiteLedger.bySubjectOrAccount, ["a", start]),
            ] {
                #expect(plan.contains { $0.contains("certificates_expiry_account (expiry_day=? AND common_name=?)") }, "plan: \(plan)")
                #expect(plan.contains { $0.contains("sqlite_autoindex_certificates_1 (serial=?)") }, "plan: \(plan)")
                #expect(!plan.contains { $0.hasPrefix("SCAN certificates") }, "plan: \(plan)")
            }
            let update = try queryPlan(db, SQLiteLedger.revokeAccountUpdate, ["a", start, 0, "4d02", #"["4d02"]"#])
            #expect(update.contains { $0.contains("sqlite_autoindex_certificates_1 (serial=?)") }, "plan: \(update)")
            #expect(!update.contains { $0.hasPrefix("SCAN certificates") || $0.contains("certificates_expiry_account") }, "plan: \(update)")
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

    /// Logout by account reads the account's live certificates beside the writer, then revokes,
    /// in the write transaction, those and what the account recorded after that read: its chain
    /// from the latest now back to the latest the read saw. Here the two steps run by hand with
    /// certificates recorded between them, for an account with a latest and for one without.
    @Test func logoutRevokesWhatTheAccountRecordedAfterItsRead() async throws {
        let path = try temporaryDirectory().appendingPathComponent("ledger.sqlite").path
        let ledger = try SQLiteLedger(path: path)
        let start = 1_800_000_000.0
        func record(_ serial: String, _ account: String, lifetime: Double = 3600) async throws {
            try await ledger.record(
                entry(serial, subject: "spiffe://app/idp/\(account)", commonName: account, issuedAt: start + Double(serial.suffix(2))!, lifetime: lifetime),
                claiming: nil)
        }
        try await record("6a01", "f", lifetime: 1)  // expired at `start + 60`
        try await record("6a02", "f")
        try await record("6a03", "f")
        let queue = try DatabaseQueue(path: path)
        let at = start + 60
        let (head, live) = try await queue.read { db in
            (
                try String.fetchOne(db, sql: "SELECT latest FROM accounts WHERE common_name = 'f'"),
                try String.fetchAll(db, sql: SQLiteLedger.accountLiveSerials, arguments: ["f", at])
            )
        }
        #expect(head == "6a03")
        #expect(Set(live) == ["6a02", "6a03"])
        let noHead = try await queue.read { db in try String.fetchOne(db, sql: "SELECT latest FROM accounts WHERE common_name = 'g'") }
        #expect(noHead == nil)
        // Between the two steps: two more for "f", the first two ever for "g", one of "f"'s revoked by serial.
        try await record("6a04", "f")
        try await record("6a05", "f")
        try await record("6a06", "g")
        try await record("6a07", "g")
        _ = try await ledger.revoke(serial: "6a02", reason: .superseded, at: Date(timeIntervalSince1970: at))
        let revoked = try await queue.write { db in
            (
                try Row.fetchAll(db, sql: SQLiteLedger.revokeAccountUpdate, arguments: ["f", at, 5, head, #"["6a02","6a03"]"#]).map { $0["serial"] as String },
                try Row.fetchAll(db, sql: SQLiteLedger.revokeAccountUpdate, arguments: ["g", at, 5, noHead, "[]"]).map { $0["serial"] as String }
            )
        }
        #expect(Set(revoked.0) == ["6a03", "6a04", "6a05"])
        #expect(Set(revoked.1) == ["6a06", "6a07"])
        #expect(try await ledger.entry(serial: "6a02")?.status == .revoked(at: Date(timeIntervalSince1970: at), reason: .superseded))
        #expect(try await ledger.entry(serial: "6a01")?.status == .valid)
    }

    /// The chain holds through what else writes `certificates`: a certificate refused for its
    /// reused token (inserted, then deleted in the same transaction) hands the account's latest
    /// back to its predecessor; a row inserted by other code (an older tokentool, a repair by
    /// hand), which names no predecessor, goes to the account index and leaves the chain's head
    /// where it was. Every certificate of the account stays findable, and its sessions' end
    /// revokes them all.
    @Test func theChainHoldsThroughARefusedTokenAndARowWrittenByHand() async throws {
        let path = try temporaryDirectory().appendingPathComponent("ledger.sqlite").path
        let ledger = try SQLiteLedger(path: path)
        let start = 1_800_000_000.0
        func record(_ serial: String, _ use: TokenUse?) async throws {
            try await ledger.record(entry(serial, subject: "spiffe://app/idp/c", commonName: "c", issuedAt: start + Double(serial.suffix(2))!), claiming: use)
        }
        try await record("5f01", TokenUse(issuer: "i", tokenID: "t1"))
        try await record("5f02", nil)
        await #expect(throws: PeerCAError.self) { try await record("5f03", TokenUse(issuer: "i", tokenID: "t1")) }
        let queue = try DatabaseQueue(path: path)
        #expect(try await queue.read { db in try String.fetchOne(db, sql: "SELECT latest FROM accounts WHERE common_name = 'c'") } == "5f02")
        try await record("5f04", nil)
        try await queue.write { db in
            try db.execute(sql: """
                INSERT INTO certificates (serial, subject, common_name, token_issuer, token_subject, token_id, key_fingerprint,
                    not_before, not_after, issued_at, der) VALUES ('5f05', 'spiffe://app/idp/c', 'c', 'i', 'c', NULL, 'ab', 1, 1800009999, 1800000005, x'30')
                """)
        }
        try await record("5f06", nil)
        try await queue.read { (db: Database) throws in
            #expect(try String.fetchAll(db, sql: "SELECT serial FROM certificates WHERE account_previous IS NULL ORDER BY serial") == ["5f01", "5f05"])
            #expect(try String.fetchOne(db, sql: "SELECT account_previous FROM certificates WHERE serial = '5f06'") == "5f04")
        }
        #expect(try await ledger.entries(subject: "c").map(\.serial) == ["5f06", "5f05", "5f04", "5f02", "5f01"])
        #expect(try await ledger.entries(subject: "spiffe://app/idp/c").map(\.serial) == ["5f06", "5f05", "5f04", "5f02", "5f01"])
        let revoked = try await ledger.revokeAccount("c", reason: .cessationOfOperation, at: Date(timeIntervalSince1970: start))
        #expect(revoked.map(\.serial) == ["5f06", "5f05", "5f04", "5f02", "5f01"])

        // One batch: a certificate of a new account refused for its reused token (its `accounts`
        // row, just made, goes with it) beside one that is recorded. The batch stands.
        let batch = [
            LedgerRecord(entry: entry("5f10", subject: "spiffe://app/idp/d", commonName: "d", issuedAt: start + 10), use: TokenUse(issuer: "i", tokenID: "t2")),
            LedgerRecord(entry: entry("5f11", subject: "spiffe://app/idp/e", commonName: "e", issuedAt: start + 11), use: TokenUse(issuer: "i", tokenID: "t1")),
        ]
        let results = await ledger.write(batch: batch)
        #expect(results.map { (try? $0.get()) != nil } == [true, false])
        if case .failure(let error) = results[1] { #expect(error.code == .tokenReused) }
        #expect(try await queue.read { db in try String.fetchAll(db, sql: "SELECT common_name FROM accounts ORDER BY common_name") } == ["c", "d"])
        #expect(try await ledger.entries(subject: "d").map(\.serial) == ["5f10"])
        #expect(try await ledger.entries(subject: "e").isEmpty)
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
            let started = ContinuousClock.now
            #expect {
                _ = try SQLiteLedger(path: path)
            } throws: { error in
                guard let error = error as? PeerCAError else { return false }
                return error.code == .ledger && error.message.contains("cannot open the ledger at \(path)")
            }
            #expect(ContinuousClock.now - started < .seconds(5), "\(path)")
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
