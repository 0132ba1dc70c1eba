import Foundation
import Logging
import PeerCA
import PeerCAPostgres
import PostgresNIO
import Synchronization
import TestSupport
import Testing

/// Revocation by account (logout everywhere), the ended-sessions list and the provider column:
/// part of the conformance suite, so each runs against SQLite and PostgreSQL.
extension LedgerConformanceTests {
    @Test(arguments: Backend.allCases)
    func revokeAccountRevokesExactlyTheAccountsLiveCertificates(_ backend: Backend) async throws {
        try await backend.withLedgers { ledgers in
            let ledger = ledgers[0]
            let earlier = Date(timeIntervalSince1970: 1_800_000_020)
            let at = Date(timeIntervalSince1970: 1_800_000_100)
            try await ledger.record(entry("0e01", issuedAt: 1_800_000_000), claiming: nil)
            try await ledger.record(entry("0e02", issuedAt: 1_800_000_010), claiming: nil)
            try await ledger.record(entry("0e03", issuedAt: 1_800_000_000, lifetime: 60), claiming: nil)  // expired at `at`
            try await ledger.record(entry("0e04", issuedAt: 1_800_000_005), claiming: nil)  // revoked before
            try await ledger.record(entry("0e05", subject: "spiffe://app/idp/user-2", commonName: "user-2"), claiming: nil)
            // Same SPIFFE ID, another CN; and a CN that only starts with the account's: the CN decides, exactly.
            try await ledger.record(entry("0e06", commonName: "someone-else"), claiming: nil)
            try await ledger.record(entry("0e07", subject: "spiffe://app/idp/user-10", commonName: "user-10"), claiming: nil)
            _ = try await ledger.revoke(serial: "0e04", reason: .keyCompromise, at: earlier)

            let revoked = try await ledger.revokeAccount("user-1", reason: .cessationOfOperation, at: at)
            #expect(revoked.map(\.serial) == ["0e02", "0e01"], "the live certificates of user-1, newest first")
            #expect(revoked.allSatisfy { $0.status == .revoked(at: at, reason: .cessationOfOperation) })
            #expect(try await ledger.entry(serial: "0e01") == revoked.last)
            #expect(try await ledger.entry(serial: "0e03")?.status == .valid, "an expired certificate is left alone")
            #expect(try await ledger.entry(serial: "0e04")?.status == .revoked(at: earlier, reason: .keyCompromise), "the first revocation stays")
            for other in ["0e05", "0e06", "0e07"] {
                #expect(try await ledger.entry(serial: other)?.status == .valid, "\(other)")
            }
            // The CRL's source lists them (and the one revoked before).
            let listed = try await ledger.revoked(notExpiredAt: at).map(\.serial)
            #expect(Set(listed) == ["0e01", "0e02", "0e04"])
            #expect(listed.count == 3)
            #expect(try await ledger.endedSessions(since: at) == ["user-1": at])

            // Again later: nothing left to revoke, the session end moves forward.
            let later = at.addingTimeInterval(50)
            #expect(try await ledger.revokeAccount("user-1", reason: .superseded, at: later).isEmpty)
            #expect(try await ledger.entry(serial: "0e01")?.status == .revoked(at: at, reason: .cessationOfOperation))
            // An account without certificates can log out too.
            #expect(try await ledger.revokeAccount("nobody", reason: .unspecified, at: later).isEmpty)
            #expect(try await ledger.endedSessions(since: at) == ["user-1": later, "nobody": later])
        }
    }

    @Test(arguments: Backend.allCases)
    func endedSessionsKeepTheLatestEndAndRespectSince(_ backend: Backend) async throws {
        try await backend.withLedgers { ledgers in
            let ledger = ledgers[0]
            func date(_ offset: Double) -> Date { Date(timeIntervalSince1970: 1_800_000_000 + offset) }
            #expect(try await ledger.endedSessions(since: .distantPast).isEmpty)
            _ = try await ledger.revokeAccount("u", reason: .unspecified, at: date(1000))
            _ = try await ledger.revokeAccount("u", reason: .unspecified, at: date(900))
            #expect(try await ledger.endedSessions(since: .distantPast) == ["u": date(1000)], "never moves backward")
            _ = try await ledger.revokeAccount("u", reason: .unspecified, at: date(2000))
            _ = try await ledger.revokeAccount("v", reason: .unspecified, at: date(1500))
            #expect(try await ledger.endedSessions(since: .distantPast) == ["u": date(2000), "v": date(1500)])
            #expect(try await ledger.endedSessions(since: date(1600)) == ["u": date(2000)])
            #expect(try await ledger.endedSessions(since: date(2000)) == ["u": date(2000)], "at `since` counts")
            #expect(try await ledger.endedSessions(since: date(2000.5)).isEmpty)
            // One account's end, as `tokentool ca issue` reads it.
            #expect(try await ledger.endedSession(account: "u") == date(2000))
            #expect(try await ledger.endedSession(account: "v") == date(1500))
            #expect(try await ledger.endedSession(account: "w") == nil)
            #expect(try await ledger.endedSession(account: "") == nil)
        }
    }

    /// Two handles (two pools, as two server instances): a logout through one is seen by the other
    /// at once; logouts of one account racing on both revoke each certificate exactly once.
    @Test(arguments: Backend.allCases)
    func twoHandlesSeeEachOthersLogoutAtOnce(_ backend: Backend) async throws {
        try await backend.withLedgers(2) { ledgers in
            let at = Date(timeIntervalSince1970: 1_800_000_100)
            try await ledgers[0].record(entry("0f01", commonName: "alice"), claiming: nil)
            let revoked = try await ledgers[1].revokeAccount("alice", reason: .affiliationChanged, at: at)
            #expect(revoked.map(\.serial) == ["0f01"])
            #expect(try await ledgers[0].entry(serial: "0f01")?.status == .revoked(at: at, reason: .affiliationChanged))
            #expect(try await ledgers[0].endedSessions(since: at) == ["alice": at])
            #expect(try await ledgers[0].revoked(notExpiredAt: at).map(\.serial) == ["0f01"])

            for i in 0..<12 {
                try await ledgers[i % 2].record(entry(String(format: "3%03x", i), commonName: "bob", issuedAt: 1_800_000_000 + Double(i)), claiming: nil)
            }
            let calls = try await withThrowingTaskGroup(of: (Date, [LedgerEntry]).self) { group in
                for i in 0..<8 {
                    let ledger = ledgers[i % 2]
                    let date = at.addingTimeInterval(Double(i))
                    group.addTask { (date, try await ledger.revokeAccount("bob", reason: .unspecified, at: date)) }
                }
                var calls: [(Date, [LedgerEntry])] = []
                for try await call in group { calls.append(call) }
                return calls
            }
            let serials = calls.flatMap { $0.1.map(\.serial) }
            #expect(serials.count == 12, "each certificate revoked by exactly one call: \(serials)")
            #expect(Set(serials).count == 12)
            for (date, entries) in calls {
                for returned in entries {
                    #expect(try await ledgers[0].entry(serial: returned.serial)?.status == .revoked(at: date, reason: .unspecified))
                }
            }
            #expect(try await ledgers[1].endedSessions(since: at)["bob"] == at.addingTimeInterval(7))
        }
    }

    @Test(arguments: Backend.allCases)
    func anEmptyAccountIsRefusedAndWritesNothing(_ backend: Backend) async throws {
        try await backend.withLedgers { ledgers in
            let ledger = ledgers[0]
            // The ledger stores what it is given, even an empty CN: it must still not be revoked.
            try await ledger.record(entry("0f11", commonName: ""), claiming: nil)
            let refused = await #expect(throws: PeerCAError.self) {
                _ = try await ledger.revokeAccount("", reason: .keyCompromise, at: Date(timeIntervalSince1970: 1_800_000_100))
            }
            #expect(refused?.code == .invalidRequest)
            #expect(try await ledger.entry(serial: "0f11")?.status == .valid)
            #expect(try await ledger.endedSessions(since: .distantPast).isEmpty)
            #expect(try await ledger.revoked(notExpiredAt: Date(timeIntervalSince1970: 0)).isEmpty)
        }
    }

    @Test(arguments: Backend.allCases)
    func theProviderRoundTrips(_ backend: Backend) async throws {
        try await backend.withLedgers { ledgers in
            let ledger = ledgers[0]
            let withProvider = entry("0f21", issuedAt: 1_800_000_010, provider: "auth0")
            let without = entry("0f22", issuedAt: 1_800_000_000)
            try await ledger.record(withProvider, claiming: TokenUse(issuer: "https://idp.example", tokenID: "p-1"))
            try await ledger.record(without, claiming: nil)
            #expect(try await ledger.entry(serial: "0f21") == withProvider)
            #expect(try await ledger.entry(serial: "0f21")?.provider == "auth0")
            #expect(try await ledger.entry(serial: "0f22")?.provider == nil)
            #expect(try await ledger.entries(subject: "user-1").map(\.provider) == ["auth0", nil])
            // (By issue time, `without` is older; SQLite lists in recording order: both, by serial.)
            let recent = try await ledger.recent(limit: 10)
            #expect(recent.first { $0.serial == "0f21" }?.provider == "auth0")
            #expect(recent.contains { $0.serial == "0f22" && $0.provider == nil })
            let revoked = try await ledger.revokeAccount("user-1", reason: .unspecified, at: Date(timeIntervalSince1970: 1_800_000_100))
            #expect(revoked.map(\.provider) == ["auth0", nil])
        }
    }
}

/// Ledgers made before revocation by account (no `provider` column, no `ended_sessions`) open
/// and are brought up to date, keeping every row.
@Suite("Ledger schema upgrades")
struct LedgerUpgradeTests {
    /// TestVectors/ledger/v1.sqlite was written by tokentool before the v2 migration existed (see
    /// the README there): three certificates, one of them revoked.
    @Test func aVersion1SQLiteLedgerMigrates() async throws {
        let dir = try temporaryDirectory()
        let path = dir.appendingPathComponent("ledger.sqlite").path
        try FileManager.default.copyItem(atPath: Fixtures.vectors.appendingPathComponent("ledger/v1.sqlite").path, toPath: path)
        let ledger = try SQLiteLedger(path: path)
        let entries = try await ledger.recent(limit: 10)
        #expect(Set(entries.map(\.serial)) == ["0dfe4d715ac2cc4c688ac0693bb63d83", "55de1f047336b4920e0d7c55e86d7061", "290828e41f3d9e9261e21d9f7381411d"])
        #expect(entries.allSatisfy { $0.provider == nil })
        let first = try #require(try await ledger.entry(serial: "0dfe4d715ac2cc4c688ac0693bb63d83"))
        #expect(first.status == .revoked(at: Date(timeIntervalSince1970: 1_795_449_732), reason: .superseded))
        #expect(first.commonName == "user-v1")
        #expect(try await ledger.endedSessions(since: .distantPast).isEmpty)
        // v4: the SPIFFE IDs the file held, found through the new table.
        let bySPIFFEID = try await ledger.entries(subject: first.subject)
        #expect(!bySPIFFEID.isEmpty)
        #expect(bySPIFFEID.allSatisfy { $0.subject == first.subject || $0.commonName == first.subject })
        #expect(Set(bySPIFFEID.map(\.serial)) == Set(entries.filter { $0.subject == first.subject }.map(\.serial)))

        // The new operations work on the migrated file.
        let at = first.notBefore.addingTimeInterval(60)
        let revoked = try await ledger.revokeAccount("user-v1", reason: .cessationOfOperation, at: at)
        #expect(revoked.map(\.serial) == ["55de1f047336b4920e0d7c55e86d7061"])
        #expect(try await ledger.entry(serial: "290828e41f3d9e9261e21d9f7381411d")?.status == .valid)
        try await ledger.record(entry("0a99", issuedAt: first.issuedAt.timeIntervalSince1970 + 1, provider: "p"), claiming: TokenUse(issuer: "i", tokenID: "j"))

        // Opened again (the migrations ran once): everything is there.
        let reopened = try SQLiteLedger(path: path)
        #expect(try await reopened.entry(serial: "0a99")?.provider == "p")
        #expect(try await reopened.endedSessions(since: at) == ["user-v1": at])
        #expect(Set(try await reopened.revoked(notExpiredAt: at).map(\.serial)) == [
            "0dfe4d715ac2cc4c688ac0693bb63d83", "55de1f047336b4920e0d7c55e86d7061",
        ])
    }

    /// A PostgreSQL ledger with the first schema (as `migrate()` made it before) gains the column
    /// and the table on the next `migrate()`, from two instances at once.
    @Test func aVersion1PostgresLedgerMigrates() async throws {
        try await Self.withVersion1Postgres { url, psql in
            let location = LedgerLocation.postgres(url: url)
            let logger = Logger(label: "ledger-tests")
            try await LedgerStore.with(location, logger: logger) { first in
                try await LedgerStore.with(location, logger: logger) { second in
                    let old = try #require(try await first.entry(serial: "0abc"))
                    #expect(old.provider == nil)
                    #expect(old.commonName == "old-user")
                    try await second.record(entry("0abd", commonName: "old-user", provider: "auth0"), claiming: nil)
                    let at = Date(timeIntervalSince1970: 1_800_000_100)
                    let revoked = try await first.revokeAccount("old-user", reason: .unspecified, at: at)
                    #expect(Set(revoked.map(\.serial)) == ["0abc", "0abd"])
                    #expect(try await second.endedSessions(since: at) == ["old-user": at])
                }
            }
            // The indexes the file had stay, and the migration added the partial CRL index (each
            // statement builds an index only when `to_regclass` finds it missing).
            let indexes = try await runDetached(
                psql, ["-d", url, "-At", "-c", "SELECT indexname || ' ' || indexdef FROM pg_indexes WHERE tablename = 'certificates' ORDER BY 1"])
            #expect(indexes.status == 0, "\(indexes.err)")
            let names = indexes.out.split(separator: "\n").map { $0.split(separator: " ").first.map(String.init) ?? "" }
            #expect(names == ["certificates_by_issue", "certificates_common_name", "certificates_pkey", "certificates_revoked", "certificates_subject"], "\(indexes.out)")
            #expect(indexes.out.contains("WHERE (revoked_at IS NOT NULL)"), "\(indexes.out)")
            // The latest certificates (`recent(limit:)`) read backwards from the issue-time index,
            // not by sorting the table (a table this small would be sorted: the planner is told
            // not to scan it, which it still would if no index could give the order).
            let latest = "EXPLAIN SELECT * FROM certificates " + PostgresLedger.latestIssued.replacingOccurrences(of: "$1", with: "20")
            let plan = try await runDetached(psql, ["-d", url, "-At", "-c", "SET enable_seqscan = off", "-c", latest])
            #expect(plan.status == 0 && plan.out.contains("Index Scan Backward using certificates_by_issue"), "\(plan.out) \(plan.err)")
            #expect(!plan.out.contains("Sort"), "\(plan.out)")
            // Ended sessions by date, for a server's reloads of what changed (SessionDenyList).
            let ended = try await runDetached(
                psql, ["-d", url, "-At", "-c", "SELECT indexdef FROM pg_indexes WHERE tablename = 'ended_sessions' AND indexname = 'ended_sessions_by_date'"])
            #expect(ended.status == 0 && ended.out.contains("(ended_at)"), "\(ended.out) \(ended.err)")
            // The token uses' foreign key, checked at commit now (a batch writes uses first).
            let key = try await runDetached(
                psql, ["-d", url, "-At", "-c", "SELECT condeferrable, condeferred FROM pg_constraint WHERE conrelid = 'token_uses'::regclass AND contype = 'f'"])
            #expect(key.status == 0 && key.out.trimmingCharacters(in: .whitespacesAndNewlines) == "t|t", "\(key.out) \(key.err)")
        }
    }

    /// A schema change on a ledger made before waits for its table's lock only `lockWait`: with a
    /// transaction holding the table (which every instance's statements would otherwise queue
    /// behind), the migration fails and says why; once it has ended, the next one completes.
    @Test func aSchemaChangeWaitsForItsTableOnlySoLong() async throws {
        try await Self.withVersion1Postgres { url, _ in
            try await Self.withLedgerAndClient(url) { ledger, client, logger in
                let (inTime, refused) = try await Self.migrationAttempt(
                    client, logger, holding: ["BEGIN", "LOCK TABLE certificates IN ACCESS SHARE MODE"], release: "COMMIT"
                ) { () throws(PeerCAError) in try await ledger.migrate(lockWait: .milliseconds(500)) }
                #expect(inTime, "refused at its limit, not after the holder")
                #expect(refused?.code == .ledger)
                #expect(refused?.message.contains("waited 0.5 seconds for its table") == true, "\(refused?.message ?? "migrated")")
                try await ledger.migrate(lockWait: .milliseconds(500))
                #expect(try await ledger.entry(serial: "0abc")?.commonName == "old-user")
                #expect(try await ledger.endedSessions(since: .distantPast).isEmpty)
            }
        }
    }

    /// Instances migrate one at a time, and one waits for another's migration only so long: with
    /// the migration lock held elsewhere (an instance whose server or connection hangs), it fails
    /// at its limit and says why, and migrates once the lock is free. It waited without end.
    @Test func aMigrationWaitsForAnotherOnlySoLong() async throws {
        try await withTestPostgres { url in
            try await Self.withLedgerAndClient(url) { ledger, client, logger in
                let (inTime, refused) = try await Self.migrationAttempt(
                    client, logger, holding: ["SELECT pg_advisory_lock(7402291)"], release: "SELECT pg_advisory_unlock(7402291)"
                ) { () throws(PeerCAError) in try await ledger.migrate(migrationWait: .milliseconds(500)) }
                #expect(inTime, "refused at its limit, not once the lock was let go")
                #expect(refused?.message.contains("another instance's migration went on for more than 0.5 seconds") == true, "\(String(describing: refused))")
                try await ledger.migrate(migrationWait: .milliseconds(500))
                try await ledger.record(entry("0a01"), claiming: nil)
                #expect(try await ledger.entry(serial: "0a01") != nil)
            }
        }
    }

    /// Runs `body` with a PostgreSQL ledger on `url` and a client of its own (for holding locks),
    /// both running.
    static func withLedgerAndClient(_ url: String, _ body: (PostgresLedger, PostgresClient, Logger) async throws -> Void) async throws {
        let logger = Logger(label: "ledger-tests")
        let client = try GroupCommitTests.client(url, logger: logger)
        let ledger = try PostgresLedger(url: url, logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { services in
            services.addTask { await client.run() }
            services.addTask { await ledger.run() }
            defer { services.cancelAll() }
            try await body(ledger, client, logger)
        }
    }

    /// `migrate` started while a connection of `client` holds a lock (`holding`, each statement's
    /// rows read to the end): whether it ended within 60 s, and its refusal, read once `release`
    /// has let the lock go. A migration still waiting then (no limit) would otherwise wait for the
    /// test forever. (60, not 10: under the whole suite's load, connecting alone has taken seconds.)
    static func migrationAttempt(
        _ client: PostgresClient, _ logger: Logger, holding: [String], release: String,
        _ migrate: @escaping @Sendable () async throws(PeerCAError) -> Void
    ) async throws -> (inTime: Bool, refusal: PeerCAError?) {
        try await client.withConnection { connection in
            for statement in holding {
                for try await _ in try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger) {}
            }
            let ended = Atomic<Bool>(false)
            let attempt = Task { () -> PeerCAError? in
                defer { ended.store(true, ordering: .releasing) }
                do throws(PeerCAError) {
                    try await migrate()
                    return nil
                } catch { return error }
            }
            let inTime = await eventually(within: .seconds(60)) { ended.load(ordering: .acquiring) }
            for try await _ in try await connection.query(PostgresQuery(unsafeSQL: release), logger: logger) {}
            return (inTime, await attempt.value)
        }
    }

    /// Runs `body` with a test PostgreSQL server's URL whose database has the first schema
    /// (``postgresVersion1``), and the `psql` that made it.
    static func withVersion1Postgres(_ body: (String, URL) async throws -> Void) async throws {
        let psql = try #require(
            (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql"))?.sorted().last
                .map { URL(fileURLWithPath: "/usr/lib/postgresql/\($0)/bin/psql") } ?? which("psql"),
            "psql is not installed")
        try await withTestPostgres { url in
            let created = try await runDetached(psql, ["-d", url, "-v", "ON_ERROR_STOP=1", "-q", "-c", postgresVersion1])
            #expect(created.status == 0, "\(created.err)")
            try await body(url, psql)
        }
    }

    /// The PostgreSQL schema before revocation by account, with one certificate.
    static let postgresVersion1 = """
        CREATE TABLE certificates (
            serial TEXT PRIMARY KEY, subject TEXT NOT NULL, common_name TEXT NOT NULL, token_issuer TEXT NOT NULL,
            token_subject TEXT NOT NULL, token_id TEXT, key_fingerprint TEXT NOT NULL, not_before DOUBLE PRECISION NOT NULL,
            not_after DOUBLE PRECISION NOT NULL, issued_at DOUBLE PRECISION NOT NULL, der BYTEA NOT NULL,
            revoked_at DOUBLE PRECISION, revocation_reason INTEGER);
        CREATE INDEX certificates_subject ON certificates(subject);
        CREATE INDEX certificates_common_name ON certificates(common_name);
        CREATE TABLE token_uses (
            issuer TEXT NOT NULL, token_id TEXT NOT NULL, serial TEXT NOT NULL REFERENCES certificates(serial),
            PRIMARY KEY (issuer, token_id));
        CREATE SEQUENCE crl_numbers;
        INSERT INTO certificates (serial, subject, common_name, token_issuer, token_subject, token_id, key_fingerprint,
            not_before, not_after, issued_at, der)
        VALUES ('0abc', 'spiffe://app/idp/old-user', 'old-user', 'https://idp.example', 'old-user', NULL, 'ab',
            1799999700, 1800003600, 1800000000, '\\x3082');
        """
}
