public import Foundation
import GRDB
import GRDBSQLite
import Synchronization

/// The issuance ledger in one SQLite file (WAL, `synchronous = FULL`: a recorded certificate
/// survives a crash or power loss).
///
/// Concurrent ``record(_:claiming:)`` calls are written together (group commit): one transaction
/// and one flush for all the certificates that arrived while the previous flush ran, none of them
/// answered before the flush; a duplicate serial or token use fails only its own certificate.
///
/// The file is opened through GRDB on SQLite's own VFS and page cache: nothing of this package
/// replaces SQLite's I/O. The write-ahead log stays small — SQLite's own automatic checkpoint
/// every 1,000 pages, and the log cut back to 4 MiB after each — so a nearly full disk
/// is not filled by the ledger's own log, and a checkpoint can always run. A write or flush that
/// fails (a full disk, an I/O error) fails the certificates of that transaction with
/// ``PeerCAError/Code/ledger``, none of them recorded; the next transaction is tried afresh, so the
/// ledger works again as soon as the disk does, without being reopened.
///
/// Indexed: the serial (primary key), the account (CN) by expiry day (`(expiry_day, common_name)`:
/// new entries land among those expiring the same day, not across the whole history), and the
/// revoked certificates (a partial index, for CRLs). A SPIFFE ID is found through
/// `certificate_subjects`, one row per (SPIFFE ID, account) pair ever recorded (a trigger on
/// `certificates` adds it), rather than an index entry per certificate: each index entry written
/// dirties a random page of its index, which the WAL then carries whole.
///
/// ```swift
/// let ledger = try SQLiteLedger(path: "state/ledger.sqlite")
/// ```
public final class SQLiteLedger: CertificateLedger {
    private let pool: DatabasePool
    /// Concurrent ``record(_:claiming:)`` calls share transactions (group commit).
    private let commits: GroupCommit<LedgerRecord>

    /// The size the write-ahead log is cut back to after a checkpoint (`journal_size_limit`):
    /// 4 MiB. Between two checkpoints it grows by about SQLite's 1,000 pages (4 MiB), plus the
    /// transaction that crosses them.
    package static let walSizeLimit = 4 << 20

    /// Opens (creating if needed) the ledger at `path` and brings its schema up to date. Another
    /// process creating or migrating the same file at that moment is waited for (no new attempt
    /// after 30 s; this blocks the calling thread, so call it off the concurrency pool's threads
    /// where that matters); a file that is not a ledger, or a missing directory, throws at once
    /// (``PeerCAError/Code/ledger``).
    public init(path: String) throws(PeerCAError) {
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        let location = path
        // One limit for opening and migrating together (see ``openingBesideOthers(_:configuration:until:_:)``).
        let deadline = ContinuousClock.now.advanced(by: .seconds(30))
        do {
            // Another opener of the same file (another process, or another ledger in this one) may
            // be creating or migrating it at this moment: see ``openingBesideOthers(_:configuration:until:_:)``.
            pool = try SQLiteLedger.openingBesideOthers(location, configuration: configuration, until: deadline) {
                try DatabasePool(path: location, configuration: configuration)
            }
            // After the pool is open: DatabasePool puts its writer in WAL mode with its own
            // `PRAGMA synchronous = NORMAL` once `prepareDatabase` has run, which would leave each
            // commit unflushed (a power loss could lose certificates already handed out).
            //
            // SQLite's own automatic checkpoint (every 1,000 WAL pages, on the committing
            // connection), and the log cut back to ``walSizeLimit`` after a checkpoint: a log that
            // grew to tens of megabytes between checkpoints filled a small disk by itself, and then
            // no checkpoint could run to empty it. A 16 MiB page cache for the writer (SQLite's
            // default is 2 MiB) keeps the pages every batch touches — the tails of the table and its
            // serial index, the day's region of the account index — in memory.
            try pool.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA synchronous = FULL; PRAGMA wal_autocheckpoint = 1000; PRAGMA journal_size_limit = \(SQLiteLedger.walSizeLimit); PRAGMA cache_size = -16384")
            }
            var migrator = DatabaseMigrator()
            migrator.registerMigration("v1") { db in
                try db.execute(sql: """
                    CREATE TABLE certificates (
                        serial TEXT PRIMARY KEY NOT NULL,
                        subject TEXT NOT NULL,
                        common_name TEXT NOT NULL,
                        token_issuer TEXT NOT NULL,
                        token_subject TEXT NOT NULL,
                        token_id TEXT,
                        key_fingerprint TEXT NOT NULL,
                        not_before REAL NOT NULL,
                        not_after REAL NOT NULL,
                        issued_at REAL NOT NULL,
                        der BLOB NOT NULL,
                        revoked_at REAL,
                        revocation_reason INTEGER
                    );
                    CREATE INDEX certificates_subject ON certificates(subject);
                    CREATE INDEX certificates_common_name ON certificates(common_name);
                    CREATE TABLE token_uses (
                        issuer TEXT NOT NULL,
                        token_id TEXT NOT NULL,
                        serial TEXT NOT NULL REFERENCES certificates(serial),
                        PRIMARY KEY (issuer, token_id)
                    );
                    CREATE TABLE counters (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);
                    """)
            }
            // v2: the provider of each certificate, and the ended sessions (revocation by account).
            migrator.registerMigration("v2") { db in
                try db.execute(sql: """
                    ALTER TABLE certificates ADD COLUMN provider TEXT;
                    CREATE INDEX IF NOT EXISTS certificates_common_name ON certificates(common_name);
                    CREATE TABLE ended_sessions (
                        account TEXT PRIMARY KEY NOT NULL,
                        ended_at REAL NOT NULL,
                        reason INTEGER NOT NULL
                    );
                    """)
            }
            // v3: renewals: when each certificate's session began, and which certificate it renews.
            migrator.registerMigration("v3") { db in
                try db.execute(sql: """
                    ALTER TABLE certificates ADD COLUMN session_start REAL;
                    ALTER TABLE certificates ADD COLUMN renewal_of TEXT;
                    """)
            }
            // v4: the SPIFFE IDs by account instead of an index of every certificate's SPIFFE ID.
            // The index cost a random page per certificate (written whole to the WAL at each group
            // commit, then again by the checkpoint: ≈ 7 µs of the ledger's ≈ 20 per record); the
            // table gets a row only for a (SPIFFE ID, account) pair it has not seen, so a device
            // of a known account adds a read, not a write. Lookups by SPIFFE ID go through it to
            // the account index (``entries(subject:)``; keyed by expiry day first since v6). A trigger keeps it: every row that
            // enters `certificates` — from this code, an older tokentool on the same file, or a
            // repair by hand — has its pair (the trigger's insert is not counted in `changes()`).
            migrator.registerMigration("v4") { db in
                try db.execute(sql: """
                    CREATE TABLE certificate_subjects (
                        subject TEXT NOT NULL,
                        common_name TEXT NOT NULL,
                        PRIMARY KEY (subject, common_name)
                    ) WITHOUT ROWID;
                    INSERT INTO certificate_subjects (subject, common_name)
                        SELECT DISTINCT subject, common_name FROM certificates;
                    CREATE TRIGGER certificate_subjects_pair AFTER INSERT ON certificates BEGIN
                        INSERT INTO certificate_subjects (subject, common_name) VALUES (NEW.subject, NEW.common_name)
                            ON CONFLICT DO NOTHING;
                    END;
                    DROP INDEX IF EXISTS certificates_subject;
                    """)
            }
            // v5: the revoked certificates (CRLs, `revoked(notExpiredAt:)`) without reading every
            // row (at 10 M rows: 3 s → 12 ms). The index is partial: a new certificate, not revoked,
            // adds no entry to it. (`recent(limit:)` reads the table backwards by rowid: an
            // issue-time index cost ≈ 1 µs per certificate and 2–6% of the two-core issuance rate.)
            migrator.registerMigration("v5") { db in
                try db.execute(sql: "CREATE INDEX certificates_revoked ON certificates(revoked_at) WHERE revoked_at IS NOT NULL")
            }
            // v6: the account index keyed by expiry day first, `(expiry_day, common_name)`, in
            // place of `(common_name)`. A new certificate's entry then lands in the region of the
            // certificates expiring the same day (sorted by account within it: still a random page
            // of that region, but a region the size of a day's certificates, which the page cache
            // holds) instead of a random page of an index that covers the ledger's whole history
            // (at 10 M rows, a page that had to be read back, dirtied, written to the WAL and
            // checkpointed for each certificate). The price is on the lookups: by account or SPIFFE
            // ID (``entries(subject:)``), one seek per expiry day that has certificates, for each
            // account the SPIFFE ID names (``expiryDays``; 10–21 ms on a 10 M-row ledger spread over
            // a year, where it was one seek; more as the history grows); ending an account's
            // sessions probes only the days not yet past. Built from the table on migration: ≈ 20 s
            // for 10 M rows, in the write transaction (another process opening meanwhile waits,
            // retrying for up to 30 s: ``openingBesideOthers(_:configuration:until:_:)``).
            migrator.registerMigration("v6") { db in
                try db.execute(sql: """
                    ALTER TABLE certificates ADD COLUMN expiry_day INTEGER GENERATED ALWAYS AS (CAST(not_after / 86400 AS INTEGER)) VIRTUAL;
                    CREATE INDEX certificates_expiry_account ON certificates(expiry_day, common_name);
                    DROP INDEX IF EXISTS certificates_common_name;
                    """)
            }
            // v8 (a v7 was tried and dropped in the eleventh session; a file from those builds
            // records it): ended sessions by date, so that a server's reload every second (the ends since a
            // little before its previous one) reads what changed instead of the table: with a
            // million ends in the horizon, an idle `serve` spent 0.6 of a core on whole reads.
            migrator.registerMigration("v8") { db in
                try db.execute(sql: "CREATE INDEX IF NOT EXISTS ended_sessions_by_date ON ended_sessions(ended_at)")
            }
            try SQLiteLedger.openingBesideOthers(location, configuration: configuration, until: deadline) { [pool] in try migrator.migrate(pool) }
        } catch {
            throw PeerCAError(.ledger, "cannot open the ledger at \(path): \(SQLiteLedger.describe(error))")
        }
        let pool = self.pool
        commits = GroupCommit { batch in await SQLiteLedger.write(batch, to: pool) }
    }

    public func record(_ entry: LedgerEntry, claiming use: TokenUse?) async throws(PeerCAError) {
        try await commits.submit(LedgerRecord(entry: entry, use: use))
    }

    /// Transactions written by ``record(_:claiming:)`` and the records in them.
    package var commitStatistics: GroupCommit<LedgerRecord>.Statistics { commits.statistics }

    /// An integer pragma (`synchronous`: 2 = FULL, every commit flushed; `wal_autocheckpoint`;
    /// `journal_size_limit`) as the connection that writes has it.
    package func writerPragma(_ name: String) throws -> Int {
        guard !name.isEmpty, name.utf8.allSatisfy({ (0x61...0x7a).contains($0) || $0 == 0x5f }) else { return -1 }
        return try pool.writeWithoutTransaction { db in try Int.fetchOne(db, sql: "PRAGMA \(name)") ?? -1 }
    }

    /// Writes a batch of records in one transaction (one WAL flush with `synchronous = FULL`).
    /// A duplicate serial or token use fails only its own record: the inserts say `ON CONFLICT
    /// DO NOTHING` and a record whose insert changed no row is answered as a duplicate (its
    /// certificate row removed again when its token use was the duplicate). No savepoint per
    /// record: those were three more statements for every certificate, for a conflict that
    /// almost never happens.
    static func write(_ batch: [LedgerRecord], to pool: DatabasePool) async -> [Result<Void, PeerCAError>] {
        do {
            return try await pool.writeWithoutTransaction { db in try insert(batch, into: db) }
        } catch {
            let failure = PeerCAError(.ledger, "cannot record the certificate: \(SQLiteLedger.describe(error))")
            return batch.map { _ in .failure(failure) }
        }
    }

    /// The batch's transaction: each record's outcome, committed together.
    private static func insert(_ batch: [LedgerRecord], into db: Database) throws -> [Result<Void, PeerCAError>] {
        var results: [Result<Void, PeerCAError>] = []
        results.reserveCapacity(batch.count)
        try db.inTransaction(.immediate) {
            // Cached statements: parsed once per connection, looked up once per batch.
            let statements = BatchStatements(
                insertCertificate: try db.cachedStatement(
                    sql: """
                        INSERT INTO certificates (serial, subject, common_name, token_issuer, token_subject, token_id, key_fingerprint,
                            not_before, not_after, issued_at, der, provider, session_start, renewal_of)
                            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING
                        """),
                findUse: try db.cachedStatement(sql: "SELECT 1 FROM token_uses WHERE issuer = ? AND token_id = ?"),
                insertUse: try db.cachedStatement(sql: "INSERT INTO token_uses (issuer, token_id, serial) VALUES (?, ?, ?)"))
            // SQLite's copies of the last record's values (its DER) are not kept past the batch.
            defer { sqlite3_clear_bindings(statements.insertCertificate.sqliteStatement) }
            for record in batch {
                results.append(try insert(record, into: db, with: statements))
            }
            return .commit
        }
        return results
    }

    /// The statements a batch writes its records with.
    private struct BatchStatements {
        let insertCertificate: Statement
        let findUse: Statement
        let insertUse: Statement
    }

    private static func insert(_ record: LedgerRecord, into db: Database, with statements: BatchStatements) throws -> Result<Void, PeerCAError> {
        let entry = record.entry
        // A token use recorded before (a retried one-use token) is refused before anything is
        // written. Inserting the certificate first and deleting it on refusal, as before, made
        // SQLite check the foreign key from token_uses.serial, which has no index: a scan of every
        // token use (102 ms at 2 M) in the writer's transaction, holding every issuance. The
        // writer holds the write lock, so nothing can claim the use between this probe and the
        // insert below (a use twice in one batch: the second probe finds the first).
        if let use = record.use {
            var probe = RowBinder(statements.findUse.sqliteStatement)
            probe.text(use.issuer)
            probe.text(use.tokenID)
            if try probe.exists(in: db) { return .failure(record.duplicate(tokenUse: true)) }
        }
        // Bound with SQLite's own calls: GRDB's StatementArguments box every value into an
        // existential and a DatabaseValue first (≈ 2.5 µs of the ledger's ≈ 26 per certificate).
        var row = RowBinder(statements.insertCertificate.sqliteStatement)
        row.text(entry.serial)
        row.text(entry.subject)
        row.text(entry.commonName)
        row.text(entry.tokenIssuer)
        row.text(entry.tokenSubject)
        row.text(entry.tokenID)
        row.text(entry.keyFingerprint)
        row.real(entry.notBefore.timeIntervalSince1970)
        row.real(entry.notAfter.timeIntervalSince1970)
        row.real(entry.issuedAt.timeIntervalSince1970)
        row.blob(entry.der)
        row.text(entry.provider)
        row.real(entry.sessionStart?.timeIntervalSince1970)
        row.text(entry.renewalOf)
        try row.run(in: db)
        guard db.changesCount == 1 else { return .failure(record.duplicate(tokenUse: false)) }
        if let use = record.use {
            var claim = RowBinder(statements.insertUse.sqliteStatement)
            claim.text(use.issuer)
            claim.text(use.tokenID)
            claim.text(entry.serial)
            try claim.run(in: db)
        }
        // (The trigger certificate_subjects_pair has recorded the account's SPIFFE ID, once.)
        return .success(())
    }

    public func entry(serial: String) async throws(PeerCAError) -> LedgerEntry? {
        try await select("WHERE serial = ?", [serial.lowercased()]).first
    }

    public func entry(claiming use: TokenUse) async throws(PeerCAError) -> LedgerEntry? {
        try await select("WHERE serial = (SELECT serial FROM token_uses WHERE issuer = ? AND token_id = ?)", [use.issuer, use.tokenID]).first
    }

    public func entries(subject: String) async throws(PeerCAError) -> [LedgerEntry] {
        try await fetch(SQLiteLedger.bySubjectOrAccount, [subject, -Double.greatestFiniteMagnitude])
    }

    /// The expiry days that have certificates, from the day of `?2` (a time, seconds since 1970)
    /// on, as the table `days`: a loose scan of `certificates_expiry_account`, one seek per day.
    /// (The last row is NULL, which matches nothing.)
    static let expiryDays = """
        WITH RECURSIVE days(d) AS (
            SELECT (SELECT expiry_day FROM certificates WHERE expiry_day >= CAST(?2 / 86400 AS INTEGER) ORDER BY expiry_day LIMIT 1)
            UNION ALL
            SELECT (SELECT expiry_day FROM certificates WHERE expiry_day > d ORDER BY expiry_day LIMIT 1) FROM days WHERE d IS NOT NULL
        )
        """

    /// `entries(subject:)`'s query (`?1`: a SPIFFE ID or an account; `?2`: the earliest expiry
    /// to look at), through the account index only: for each expiry day, the account's
    /// certificates and those of the accounts that hold the SPIFFE ID (`certificate_subjects`).
    package static let bySubjectOrAccount = expiryDays + """
        SELECT * FROM certificates
        WHERE expiry_day IN (SELECT d FROM days)
            AND common_name IN (SELECT ?1 UNION SELECT common_name FROM certificate_subjects WHERE subject = ?1)
            AND (common_name = ?1 OR subject = ?1)
        ORDER BY issued_at DESC
        """

    /// `revokeAccount`'s update (`?1`: the account, `?2`: the time of revocation, `?3`: the
    /// reason): the account's certificates not yet expired, probed in the expiry days from that
    /// time's on.
    package static let revokeAccountUpdate = expiryDays + """
        UPDATE certificates SET revoked_at = ?2, revocation_reason = ?3
        WHERE expiry_day IN (SELECT d FROM days) AND common_name = ?1 AND revoked_at IS NULL AND not_after > ?2
        RETURNING *
        """

    /// The last `limit` certificates recorded, the latest first: the table's rowid grows with
    /// each row written, so this reads `limit` rows from the end of the table. (By `issued_at`,
    /// it sorted the whole table, with no index on it: 4.6–9.6 s for `tokentool ca list` at 3 M
    /// rows. The order differs from issue time only when the clock was set back.)
    public func recent(limit: Int) async throws(PeerCAError) -> [LedgerEntry] {
        try await select(SQLiteLedger.latestRecorded, [max(0, limit)])
    }

    /// `recent(limit:)`'s order: the rowid, from the end.
    package static let latestRecorded = "ORDER BY rowid DESC LIMIT ?"

    /// The ended sessions from a date on (read from their date index, v8).
    package static let endedSince = "SELECT account, ended_at FROM ended_sessions WHERE ended_at >= ?"
    /// `revoked(notExpiredAt:)`'s condition: the partial index of revoked certificates only.
    package static let revokedNotExpired = "WHERE revoked_at IS NOT NULL AND not_after > ? ORDER BY revoked_at"

    public func revoke(serial: String, reason: LedgerEntry.RevocationReason, at date: Date) async throws(PeerCAError) -> LedgerEntry {
        let serial = serial.lowercased()
        do {
            try await pool.write { db in
                try db.execute(
                    sql: "UPDATE certificates SET revoked_at = ?, revocation_reason = ? WHERE serial = ? AND revoked_at IS NULL",
                    arguments: [date.timeIntervalSince1970, reason.rawValue, serial])
            }
        } catch {
            throw PeerCAError(.ledger, "cannot revoke: \(SQLiteLedger.describe(error))")
        }
        guard let entry = try await entry(serial: serial) else { throw PeerCAError(.notFound, "no certificate has serial \(serial.prefix(40))") }
        return entry
    }

    public func revoked(notExpiredAt now: Date) async throws(PeerCAError) -> [LedgerEntry] {
        try await select(SQLiteLedger.revokedNotExpired, [now.timeIntervalSince1970])
    }

    public func nextCRLNumber() async throws(PeerCAError) -> Int64 {
        do {
            return try await pool.write { db -> Int64 in
                try db.execute(sql: "INSERT INTO counters (name, value) VALUES ('crl', 1) ON CONFLICT(name) DO UPDATE SET value = value + 1")
                return try Int64.fetchOne(db, sql: "SELECT value FROM counters WHERE name = 'crl'") ?? 1
            }
        } catch {
            throw PeerCAError(.ledger, "cannot allocate a CRL number: \(SQLiteLedger.describe(error))")
        }
    }

    public func revokeAccount(_ account: String, reason: LedgerEntry.RevocationReason, at date: Date) async throws(PeerCAError) -> [LedgerEntry] {
        guard !account.isEmpty else { throw PeerCAError(.invalidRequest, "the account is empty: no sessions to end") }
        let at = date.timeIntervalSince1970
        do {
            return try await pool.write { db in
                // RETURNING gives the rows as updated; one write transaction with the session row.
                let revoked = try Row.fetchAll(db, sql: SQLiteLedger.revokeAccountUpdate, arguments: [account, at, reason.rawValue])
                    .map(SQLiteLedger.entry(row:))
                try db.execute(
                    sql: """
                        INSERT INTO ended_sessions (account, ended_at, reason) VALUES (?, ?, ?)
                        ON CONFLICT(account) DO UPDATE SET
                            ended_at = MAX(ended_at, excluded.ended_at),
                            reason = CASE WHEN excluded.ended_at > ended_at THEN excluded.reason ELSE reason END
                        """,
                    arguments: [account, at, reason.rawValue])
                return revoked.sorted { ($0.issuedAt, $0.serial) > ($1.issuedAt, $1.serial) }
            }
        } catch {
            throw PeerCAError(.ledger, "cannot end the sessions of the account: \(SQLiteLedger.describe(error))")
        }
    }

    public func endedSessions(since: Date) async throws(PeerCAError) -> [String: Date] {
        do {
            return try await pool.read { db in
                var sessions: [String: Date] = [:]
                // A cursor: a full read of a million ends holds their dictionary, not a row each too.
                let rows = try Row.fetchCursor(db, sql: SQLiteLedger.endedSince, arguments: [since.timeIntervalSince1970])
                while let row = try rows.next() {
                    sessions[try row.decode(String.self, atIndex: 0)] = Date(timeIntervalSince1970: try row.decode(Double.self, atIndex: 1))
                }
                return sessions
            }
        } catch {
            throw PeerCAError(.ledger, "cannot read the ended sessions: \(SQLiteLedger.describe(error))")
        }
    }

    public func endedSession(account: String) async throws(PeerCAError) -> Date? {
        do {
            return try await pool.read { db in
                try Double.fetchOne(db, sql: "SELECT ended_at FROM ended_sessions WHERE account = ?", arguments: [account])
                    .map { Date(timeIntervalSince1970: $0) }
            }
        } catch {
            throw PeerCAError(.ledger, "cannot read the account's ended sessions: \(SQLiteLedger.describe(error))")
        }
    }

    private func select(_ clause: String, _ arguments: StatementArguments) async throws(PeerCAError) -> [LedgerEntry] {
        try await fetch("SELECT * FROM certificates " + clause, arguments)
    }

    /// Rows of `certificates` (every column) a whole query returns, as entries.
    ///
    /// The statement is prepared once per reader connection and kept (`sql` is one of this
    /// type's fixed queries; the values are bound): preparing it was ≈ 25% of the server's CPU
    /// for a `POST /v1/ocsp` and a `GET /v1/crl`, each a lookup.
    private func fetch(_ sql: String, _ arguments: StatementArguments) async throws(PeerCAError) -> [LedgerEntry] {
        do {
            return try await pool.read { db in
                try Row.fetchAll(db.cachedStatement(sql: sql), arguments: arguments).map(SQLiteLedger.entry(row:))
            }
        } catch {
            throw PeerCAError(.ledger, "cannot read the ledger: \(SQLiteLedger.describe(error))")
        }
    }

    /// A `certificates` row (every column) as an entry.
    private static func entry(row: Row) throws -> LedgerEntry {
        let der = try row.decode(Data.self, forColumn: "der")
        let revokedAt = try row.decode(Double?.self, forColumn: "revoked_at")
        let reason = try row.decode(Int?.self, forColumn: "revocation_reason")
        let status: LedgerEntry.Status = revokedAt.map {
            .revoked(at: Date(timeIntervalSince1970: $0), reason: reason.flatMap(LedgerEntry.RevocationReason.init(rawValue:)) ?? .unspecified)
        } ?? .valid
        return LedgerEntry(
            serial: try row.decode(String.self, forColumn: "serial"), subject: try row.decode(String.self, forColumn: "subject"),
            commonName: try row.decode(String.self, forColumn: "common_name"),
            tokenIssuer: try row.decode(String.self, forColumn: "token_issuer"),
            tokenSubject: try row.decode(String.self, forColumn: "token_subject"),
            tokenID: try row.decode(String?.self, forColumn: "token_id"),
            keyFingerprint: try row.decode(String.self, forColumn: "key_fingerprint"),
            notBefore: Date(timeIntervalSince1970: try row.decode(Double.self, forColumn: "not_before")),
            notAfter: Date(timeIntervalSince1970: try row.decode(Double.self, forColumn: "not_after")),
            issuedAt: Date(timeIntervalSince1970: try row.decode(Double.self, forColumn: "issued_at")),
            der: Array(der), status: status, provider: try row.decode(String?.self, forColumn: "provider"),
            sessionStart: try row.decode(Double?.self, forColumn: "session_start").map { Date(timeIntervalSince1970: $0) },
            renewalOf: try row.decode(String?.self, forColumn: "renewal_of"))
    }

    /// Runs `open` (opening the pool, or bringing the schema up to date) again while it
    /// fails because another opener of the same file — another process, or another ledger in this
    /// one — is creating or migrating it at the same moment, until `deadline` (no new attempt
    /// starts after it; one already started may still wait out SQLite's 10 s busy timeout).
    ///
    /// GRDB's migrator reads which migrations the file has outside the transaction of each one it
    /// then runs, so two openers of a new file can both run `v1`: the second fails ("table
    /// certificates already exists", "duplicate column name"), its transaction rolled back. Two
    /// openers of a new file can also meet while each puts it in WAL mode, where SQLite answers
    /// "database is locked" without waiting. So a failure is retried when SQLite said busy, or
    /// when the file's schema changed since the attempt began (someone else is migrating it — or
    /// this attempt itself committed some migrations before one failed, or another process merely
    /// opened the file, as GRDB's WAL set-up creates and drops a table: so a failure that nobody
    /// else explains is thrown after at most one more attempt, or later while others keep opening
    /// the file). A file that is not a database, or a missing directory, has no schema version to
    /// read before or after and is thrown at once.
    static func openingBesideOthers<T>(_ location: String, configuration: Configuration, until deadline: ContinuousClock.Instant, _ open: () throws -> T) throws -> T {
        var schema = schemaVersion(location, configuration: configuration)
        while true {
            do {
                return try open()
            } catch {
                let now = schemaVersion(location, configuration: configuration)
                let busy = (error as? DatabaseError)?.resultCode == .SQLITE_BUSY
                guard busy || now != schema, ContinuousClock.now < deadline else { throw error }
                schema = now
                usleep(10_000)
            }
        }
    }

    /// `PRAGMA schema_version` of the file at `location` (SQLite adds one for every change to the
    /// schema), or nil when it cannot be read.
    private static func schemaVersion(_ location: String, configuration: Configuration) -> Int? {
        guard let queue = try? DatabaseQueue(path: location, configuration: configuration) else { return nil }
        return try? queue.read { db in try Int.fetchOne(db, sql: "PRAGMA schema_version") }
    }

    /// The writer connection's prepared statements that still hold a blob bound to them, as
    /// SQLite expands them (the fuzz-found leak: a cached INSERT kept the last certificate's DER
    /// until its next use). For tests; empty when every batch cleared its bindings.
    func statementsHoldingBlobs() async throws -> [String] {
        try await pool.write { db in
            var held: [String] = []
            var statement = sqlite3_next_stmt(db.sqliteConnection, nil)
            while let current = statement {
                if let expanded = sqlite3_expanded_sql(current) {
                    let text = String(cString: expanded)
                    sqlite3_free(expanded)
                    if text.range(of: "[xX]'[0-9A-Fa-f]{16,}'", options: .regularExpression) != nil { held.append(String(text.prefix(200))) }
                }
                statement = sqlite3_next_stmt(db.sqliteConnection, current)
            }
            return held
        }
    }

    static func describe(_ error: any Error) -> String {
        if let error = error as? DatabaseError { return "SQLite \(error.resultCode): \(error.message ?? "")" }
        return "\(error)"
    }
}

/// Binds one row's values to a prepared statement, in order, with SQLite's own calls (each value
/// copied by SQLite, `SQLITE_TRANSIENT`), then runs it.
private struct RowBinder {
    private let statement: OpaquePointer
    private var index: Int32 = 1
    private var failure: Int32 = SQLITE_OK

    init(_ statement: OpaquePointer) {
        self.statement = statement
        sqlite3_reset(statement)
    }

    private mutating func check(_ code: Int32) {
        if failure == SQLITE_OK, code != SQLITE_OK { failure = code }
        index += 1
    }

    mutating func text(_ value: String?) {
        guard var value else { return check(sqlite3_bind_null(statement, index)) }
        let code = value.withUTF8 { bytes in
            guard let base = bytes.baseAddress else {
                // "" has no buffer; a NULL pointer would bind NULL, not the empty text.
                return "".withCString { sqlite3_bind_text(statement, index, $0, 0, sqliteTransient) }
            }
            return base.withMemoryRebound(to: CChar.self, capacity: bytes.count) {
                sqlite3_bind_text(statement, index, $0, Int32(bytes.count), sqliteTransient)
            }
        }
        check(code)
    }

    mutating func real(_ value: Double?) {
        check(value.map { sqlite3_bind_double(statement, index, $0) } ?? sqlite3_bind_null(statement, index))
    }

    mutating func blob(_ value: [UInt8]) {
        check(value.withUnsafeBytes { sqlite3_bind_blob(statement, index, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32($0.count), sqliteTransient) })
    }

    /// Steps the statement once; a failed bind or step throws SQLite's error.
    func run(in db: Database) throws {
        _ = try step(in: db)
    }

    /// Whether the query gives a row. The statement is reset at once: a query left on its row
    /// would keep the writer's read snapshot open past its commit, and once another connection
    /// had written the file, every later write transaction would fail (`SQLITE_BUSY_SNAPSHOT`).
    func exists(in db: Database) throws -> Bool {
        defer { sqlite3_reset(statement) }
        return try step(in: db)
    }

    /// Steps the statement once and tells whether it gave a row; a failed bind or step throws
    /// SQLite's error.
    private func step(in db: Database) throws -> Bool {
        let code = failure == SQLITE_OK ? sqlite3_step(statement) : failure
        switch code {
        case SQLITE_DONE: return false
        case SQLITE_ROW: return true
        default:
            let message = db.sqliteConnection.flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) }
            sqlite3_reset(statement)
            throw DatabaseError(resultCode: ResultCode(rawValue: code), message: message)
        }
    }
}

/// SQLite copies the bound value (`SQLITE_TRANSIENT`, a C macro Swift does not import).
private let sqliteTransient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
