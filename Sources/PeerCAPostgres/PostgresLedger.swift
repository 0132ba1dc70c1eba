public import Foundation
public import Logging
import NIOCore
public import PeerCA
import PostgresNIO
import Synchronization
import TokenKit
public import ServiceLifecycle

/// The issuance ledger in PostgreSQL, for several CA instances behind a load balancer: serials
/// and token uses are unique across instances (primary keys), revocations made through one
/// instance are in every instance's CRL, and a commit is durable before a certificate is returned.
/// Concurrent ``record(_:claiming:)`` calls share one transaction and one commit (group commit).
///
/// It is a `Service`: run it (in a `ServiceGroup`, or through ``LedgerStore/with(_:logger:_:)``)
/// while the ledger is in use, and call ``migrate(connectionWait:lockWait:migrationWait:)`` once it runs. Its errors are
/// `PeerCAError`s; the URL's password never appears in them.
public final class PostgresLedger: CertificateLedger, Service {
    let client: PostgresClient
    let logger: Logger
    /// The server as errors name it: host and port (never the password).
    private let target: String
    /// Concurrent ``record(_:claiming:)`` calls share transactions (group commit).
    private let commits: GroupCommit<LedgerRecord>

    /// A ledger for `postgres://user:password@host:port/database[?sslmode=disable|prefer|require]`.
    public init(url: String, logger: Logger) throws(PeerCAError) {
        let configuration = try PostgresLedger.configuration(url)
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        self.client = client
        target = "\(configuration.host ?? "?"):\(configuration.port ?? 5432)"
        self.logger = logger
        // The batch writer holds the client and logger, not the ledger (no reference cycle).
        commits = GroupCommit { batch in await PostgresLedger.write(batch, client: client, logger: logger) }
    }

    /// Runs the connection pool until cancelled or shut down gracefully.
    public func run() async { await client.run() }

    static func configuration(_ url: String) throws(PeerCAError) -> PostgresClient.Configuration {
        guard let components = URLComponents(string: url), let scheme = components.scheme, ["postgres", "postgresql"].contains(scheme),
            let host = components.host, !host.isEmpty, let user = components.user
        else { throw PeerCAError(.invalidSettings, "the store is not postgres://user:password@host:port/database") }
        let database = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        let tls: PostgresClient.Configuration.TLS
        switch components.queryItems?.last(where: { $0.name == "sslmode" })?.value ?? "prefer" {
        case "disable": tls = .disable
        case "require", "verify-ca", "verify-full": tls = .require(.makeClientConfiguration())
        default: tls = .prefer(.makeClientConfiguration())
        }
        return PostgresClient.Configuration(
            host: host, port: components.port ?? 5432, username: user, password: components.password,
            database: database.isEmpty ? nil : database, tls: tls)
    }

    /// Creates the tables if they do not exist, and adds what later versions added (the
    /// `provider` column, `ended_sessions`) to a ledger made before; serialised across instances
    /// by an advisory lock, and idempotent.
    ///
    /// A change the ledger does not have yet (the first start after an upgrade) locks its table,
    /// and every instance's statements on that table queue behind the lock; so it waits at most
    /// `lockWait` for a transaction that holds the table (a long report, an idle session left in
    /// a transaction) and fails then, with an error that says so. Each change is whole or not
    /// made; those made before it stay, and the next start makes the rest once that transaction
    /// has ended. A ledger that has every change takes no such lock.
    ///
    /// - Parameters:
    ///   - connectionWait: How long to wait for a first connection to the server. The pool tries
    ///     again and again (its log lines say why each try failed); past this a server that is
    ///     down, refuses or never answers is an error (`PeerCAError` `.ledger`, naming the host
    ///     and port, never the password) instead of a wait without end.
    ///   - lockWait: How long a schema change waits for its table's lock.
    ///   - migrationWait: How long to wait for another instance's migration to end (instances
    ///     migrate one at a time; one whose server or connection hangs would otherwise hold the
    ///     others' starts for good).
    public func migrate(
        connectionWait: Duration = PostgresLedger.defaultConnectionWait, lockWait: Duration = PostgresLedger.defaultLockWait,
        migrationWait: Duration = PostgresLedger.defaultMigrationWait
    ) async throws(PeerCAError) {
        let connected = ConnectedFlag(), target = self.target
        // Past the wait, the migration is cancelled only if it has no connection yet (the pool
        // gives up a connection request when cancelled); one that has goes on.
        let unanswered = PeerCAError(.ledger, "cannot prepare the PostgreSQL ledger: cancelled before it was ready")
        let outcome: Result<Void, PeerCAError> = await TimeLimit.race(connectionWait, fallback: .failure(unanswered)) {
            do {
                try await self.migrateOnce(connected: connected, lockWait: lockWait, migrationWait: migrationWait)
                return .success(())
            } catch is AnotherMigration {
                return .failure(PeerCAError(
                    .ledger,
                    "cannot prepare the PostgreSQL ledger: another instance's migration went on for more than \(migrationWait) "
                        + "(pg_locks shows its advisory lock 7402291); start again once it has ended"))
            } catch where PostgresLedger.sqlState(error) == "55P03" {
                return .failure(PeerCAError(
                    .ledger,
                    "cannot prepare the PostgreSQL ledger: a schema change waited \(lockWait) for its table, which another transaction "
                        + "holds (pg_stat_activity shows it); start again once that transaction has ended"))
            } catch {
                return .failure(PeerCAError(.ledger, "cannot prepare the PostgreSQL ledger: \(PostgresLedger.describe(error))"))
            }
        } timedOut: {
            connected.value.load(ordering: .acquiring)
                ? nil
                : .failure(PeerCAError(
                    .ledger, "cannot prepare the PostgreSQL ledger: no connection to \(target) within \(connectionWait) (PostgresNIO's log lines say why)"))
        }
        try outcome.get()
    }

    /// How long ``migrate(connectionWait:lockWait:migrationWait:)`` waits for a first connection by default.
    public static let defaultConnectionWait: Duration = .seconds(15)
    /// How long a schema change of ``migrate(connectionWait:lockWait:migrationWait:)`` waits for its table's
    /// lock by default.
    public static let defaultLockWait: Duration = .seconds(3)
    /// How long ``migrate(connectionWait:lockWait:migrationWait:)`` waits for another instance's
    /// migration by default: building an index on 10 M rows takes seconds, not minutes.
    public static let defaultMigrationWait: Duration = .seconds(120)

    /// Another instance's migration held the advisory lock past the wait.
    private struct AnotherMigration: Error {}

    /// `wait` in whole milliseconds for `lock_timeout`: at least 1 (0 would be no limit), at most
    /// PostgreSQL's.
    private static func lockTimeout(_ wait: Duration) -> Int64 {
        Int64(min(max(wait / .milliseconds(1), 1), Double(Int32.max)))
    }

    /// Set once the migration has a connection.
    private final class ConnectedFlag: Sendable {
        let value = Atomic<Bool>(false)
    }

    /// The migration itself, once connected (its errors as PostgresNIO throws them).
    private func migrateOnce(connected: ConnectedFlag, lockWait: Duration, migrationWait: Duration) async throws {
        try await client.withConnection { connection in
            connected.value.store(true, ordering: .releasing)
            // Another instance migrating is waited for (its changes are the same), for
            // `migrationWait`; a table lock held by someone else, only for `lockWait` (set after
            // the advisory lock). Both are reset before the connection goes back to the pool.
            try await connection.query(PostgresQuery(unsafeSQL: "SET lock_timeout = \(PostgresLedger.lockTimeout(migrationWait))"), logger: logger)
            do {
                // Its row read to the end: PostgresNIO returns a SELECT's rows once their
                // description arrives, before the statement has run, and an error that comes
                // after (the lock's timeout) would end only the unread rows.
                for try await _ in try await connection.query("SELECT pg_advisory_lock(7402291)", logger: logger) {}
            } catch {
                _ = try? await connection.query("RESET lock_timeout", logger: logger)
                if PostgresLedger.sqlState(error) == "55P03" { throw AnotherMigration() }
                throw error
            }
            var failure: (any Error)?
            do {
                try await connection.query(PostgresQuery(unsafeSQL: "SET lock_timeout = \(PostgresLedger.lockTimeout(lockWait))"), logger: logger)
                for statement in PostgresLedger.schema {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
            } catch {
                failure = error
            }
            // A failure of the clean-up does not hide the migration's own (after a lost
            // connection, both would fail; the server has dropped the lock and the setting then).
            do {
                try await connection.query("RESET lock_timeout", logger: logger)
                try await connection.query("SELECT pg_advisory_unlock(7402291)", logger: logger)
            } catch {
                if failure == nil { throw error }
            }
            if let failure { throw failure }
        }
    }

    static let schema = [
        """
        CREATE TABLE IF NOT EXISTS certificates (
            serial TEXT PRIMARY KEY, subject TEXT NOT NULL, common_name TEXT NOT NULL, token_issuer TEXT NOT NULL,
            token_subject TEXT NOT NULL, token_id TEXT, key_fingerprint TEXT NOT NULL, not_before DOUBLE PRECISION NOT NULL,
            not_after DOUBLE PRECISION NOT NULL, issued_at DOUBLE PRECISION NOT NULL, der BYTEA NOT NULL,
            revoked_at DOUBLE PRECISION, revocation_reason INTEGER)
        """,
        index("certificates_subject", on: "certificates(subject)"),
        index("certificates_common_name", on: "certificates(common_name)"),
        """
        CREATE TABLE IF NOT EXISTS token_uses (
            issuer TEXT NOT NULL, token_id TEXT NOT NULL, serial TEXT NOT NULL REFERENCES certificates(serial) DEFERRABLE INITIALLY DEFERRED,
            PRIMARY KEY (issuer, token_id))
        """,
        // A batch writes its token uses before their certificates (``write(_:client:logger:)``):
        // the foreign key is checked at commit. A ledger made before gets its key changed, once.
        """
        DO $$ DECLARE fk TEXT; BEGIN
            SELECT conname INTO fk FROM pg_constraint
                WHERE conrelid = 'token_uses'::regclass AND contype = 'f' AND NOT (condeferrable AND condeferred);
            IF fk IS NOT NULL THEN
                EXECUTE format('ALTER TABLE token_uses ALTER CONSTRAINT %I DEFERRABLE INITIALLY DEFERRED', fk);
            END IF;
        END $$
        """,
        "CREATE SEQUENCE IF NOT EXISTS crl_numbers",
        // Added with revocation by account; each statement is a no-op on a ledger that has it. The
        // column is looked up first: ALTER TABLE would lock the table (every instance's queries)
        // at each start even when it has nothing to add.
        """
        DO $$ BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'certificates'::regclass AND attname = 'provider' AND NOT attisdropped)
            THEN ALTER TABLE certificates ADD COLUMN IF NOT EXISTS provider TEXT;
            END IF;
        END $$
        """,
        """
        DO $$ BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'certificates'::regclass AND attname = 'renewal_of' AND NOT attisdropped)
            THEN ALTER TABLE certificates ADD COLUMN IF NOT EXISTS session_start DOUBLE PRECISION, ADD COLUMN IF NOT EXISTS renewal_of TEXT;
            END IF;
        END $$
        """,
        """
        CREATE TABLE IF NOT EXISTS ended_sessions (
            account TEXT PRIMARY KEY, ended_at DOUBLE PRECISION NOT NULL, reason INTEGER NOT NULL)
        """,
        // CRLs without reading every row: the revoked certificates only (a partial index: a new
        // certificate, not revoked, adds no entry to it). The first start after the upgrade builds
        // it, holding the table's writes for that long: seconds at 10 M rows.
        index("certificates_revoked", on: "certificates(revoked_at) WHERE revoked_at IS NOT NULL"),
        // Ended sessions by date: a server's reload every second reads the ends since a little
        // before its previous one, not the whole table.
        index("ended_sessions_by_date", on: "ended_sessions(ended_at)"),
        // The latest certificates (`tokentool ca list`) without sorting the table. Issue times
        // grow, so each new entry goes to the index's last page. Built on the first start after
        // the upgrade, holding the table's writes for that long.
        index("certificates_by_issue", on: "certificates(issued_at)"),
    ]

    /// Creates the index `name` when it does not exist. Looked up first: CREATE INDEX takes its
    /// lock on the table (holding every instance's writes) before it checks the name, even with
    /// IF NOT EXISTS — which stays, for two instances starting at once.
    static func index(_ name: String, on definition: String) -> String {
        """
        DO $$ BEGIN
            IF to_regclass('\(name)') IS NULL THEN CREATE INDEX IF NOT EXISTS \(name) ON \(definition); END IF;
        END $$
        """
    }

    /// The `certificates` columns ``entries(_:)`` decodes, in its order.
    static let columns = """
        serial, subject, common_name, token_issuer, token_subject, token_id, key_fingerprint, not_before, not_after, \
        issued_at, der, revoked_at, revocation_reason, provider, session_start, renewal_of
        """

    public func record(_ entry: LedgerEntry, claiming use: TokenUse?) async throws(PeerCAError) {
        try await commits.submit(LedgerRecord(entry: entry, use: use))
    }

    /// Batches written by ``record(_:claiming:)`` and the records in them.
    package var commitStatistics: GroupCommit<LedgerRecord>.Statistics { commits.statistics }

    /// Writes a batch: one transaction with one multi-row INSERT per table (one commit, one WAL
    /// flush). A row a unique key refuses (a reused token or an existing serial, by this instance
    /// or another) is skipped (`ON CONFLICT … DO NOTHING`), not an error that would undo the batch;
    /// each INSERT returns the serials it wrote. The token uses go first (the foreign key to
    /// `certificates` is checked at commit): a certificate is written only when its use was
    /// claimed, and a use whose certificate was refused (an existing serial) is deleted again by
    /// its key. No certificate is ever deleted: that would make PostgreSQL look for uses
    /// referring to it, through `token_uses`, which has no index on `serial`.
    ///
    /// So a retried one-use token (refused here, then given its certificate again) costs its
    /// batch nothing: before, it undid the batch, and the batch's N records were then written in
    /// N transactions of their own.
    static func write(_ batch: [LedgerRecord], client: PostgresClient, logger: Logger) async -> [Result<Void, PeerCAError>] {
        // A serial twice in the batch: the later record is refused here (the database's answer,
        // the serials written, could not tell the two apart).
        var results = [Result<Void, PeerCAError>?](repeating: nil, count: batch.count)
        var serials = Set<String>()
        var records: [LedgerRecord] = []
        for (index, record) in batch.enumerated() {
            if serials.insert(record.entry.serial).inserted {
                records.append(record)
            } else {
                results[index] = .failure(record.duplicate(tokenUse: false))
            }
        }
        let written: (uses: Set<String>, certificates: Set<String>)
        do {
            written = try await client.withTransaction(logger: logger) { connection in
                // Rows in key order: two instances' batches that share keys (a token raced on both)
                // wait for each other in one order, never in a cycle (a deadlock would fail both).
                var uses = Set<String>()
                let claims = records.compactMap { record in record.use.map { (use: $0, serial: record.entry.serial) } }
                    .sorted { ($0.use.issuer, $0.use.tokenID) < ($1.use.issuer, $1.use.tokenID) }
                if !claims.isEmpty {
                    for try await serial in try await connection.query(PostgresLedger.usesInsert(claims), logger: logger).decode(String.self) {
                        uses.insert(serial)
                    }
                }
                let writing = records.filter { $0.use == nil || uses.contains($0.entry.serial) }.sorted { $0.entry.serial < $1.entry.serial }
                var certificates = Set<String>()
                if !writing.isEmpty {
                    for try await serial in try await connection.query(PostgresLedger.certificatesInsert(writing), logger: logger).decode(String.self) {
                        certificates.insert(serial)
                    }
                }
                let orphans = writing.filter { !certificates.contains($0.entry.serial) }.compactMap(\.use)
                if !orphans.isEmpty {
                    try await connection.query(
                        "DELETE FROM token_uses WHERE (issuer, token_id) IN (SELECT * FROM unnest(\(orphans.map(\.issuer)), \(orphans.map(\.tokenID))))",
                        logger: logger)
                }
                return (uses, certificates)
            }
        } catch {
            let failure = PeerCAError(.ledger, "cannot record the certificate: \(PostgresLedger.describe(error))")
            return results.map { $0 ?? .failure(failure) }
        }
        return zip(batch, results).map { record, result in
            if let result { return result }
            let serial = record.entry.serial
            if record.use != nil && !written.uses.contains(serial) { return .failure(record.duplicate(tokenUse: true)) }
            if !written.certificates.contains(serial) { return .failure(record.duplicate(tokenUse: false)) }
            return .success(())
        }
    }

    /// The INSERT of `batch`'s certificates; a serial that exists is skipped, and the serials
    /// written are returned.
    static func certificatesInsert(_ batch: [LedgerRecord]) -> PostgresQuery {
        var bindings = PostgresBindings(capacity: batch.count * 14)
        var rows: [String] = []
        rows.reserveCapacity(batch.count)
        for record in batch {
            let entry = record.entry
            let first = bindings.count
            bindings.append(entry.serial)
            bindings.append(entry.subject)
            bindings.append(entry.commonName)
            bindings.append(entry.tokenIssuer)
            bindings.append(entry.tokenSubject)
            bindings.append(entry.tokenID)
            bindings.append(entry.keyFingerprint)
            bindings.append(entry.notBefore.timeIntervalSince1970)
            bindings.append(entry.notAfter.timeIntervalSince1970)
            bindings.append(entry.issuedAt.timeIntervalSince1970)
            bindings.append(ByteBuffer(bytes: entry.der))
            bindings.append(entry.provider)
            bindings.append(entry.sessionStart?.timeIntervalSince1970)
            bindings.append(entry.renewalOf)
            rows.append("(" + (first + 1...first + 14).map { "$\($0)" }.joined(separator: ", ") + ")")
        }
        return PostgresQuery(
            unsafeSQL: """
                INSERT INTO certificates (serial, subject, common_name, token_issuer, token_subject, token_id, key_fingerprint,
                    not_before, not_after, issued_at, der, provider, session_start, renewal_of)
                VALUES
                """ + " " + rows.joined(separator: ", ") + " ON CONFLICT (serial) DO NOTHING RETURNING serial",
            binds: bindings)
    }

    /// The INSERT of token uses, each for its certificate's serial; a use recorded before, or
    /// twice in `claims`, is skipped, and the serials of the uses written are returned.
    static func usesInsert(_ claims: [(use: TokenUse, serial: String)]) -> PostgresQuery {
        var bindings = PostgresBindings(capacity: claims.count * 3)
        var rows: [String] = []
        for (use, serial) in claims {
            let first = bindings.count
            bindings.append(use.issuer)
            bindings.append(use.tokenID)
            bindings.append(serial)
            rows.append("($\(first + 1), $\(first + 2), $\(first + 3))")
        }
        return PostgresQuery(
            unsafeSQL: "INSERT INTO token_uses (issuer, token_id, serial) VALUES " + rows.joined(separator: ", ") + " ON CONFLICT (issuer, token_id) DO NOTHING RETURNING serial",
            binds: bindings)
    }

    public func entry(serial: String) async throws(PeerCAError) -> LedgerEntry? {
        try await select("WHERE serial = $1", [serial.lowercased()]).first
    }

    public func entry(claiming use: TokenUse) async throws(PeerCAError) -> LedgerEntry? {
        try await select("WHERE serial = (SELECT serial FROM token_uses WHERE issuer = $1 AND token_id = $2)", [use.issuer, use.tokenID]).first
    }

    public func entries(subject: String) async throws(PeerCAError) -> [LedgerEntry] {
        try await select("WHERE subject = $1 OR common_name = $1 ORDER BY issued_at DESC", [subject])
    }

    /// The `limit` certificates issued last, the latest first: read backwards from the index
    /// of issue times (`certificates_by_issue`), not by sorting the table.
    public func recent(limit: Int) async throws(PeerCAError) -> [LedgerEntry] {
        try await select(PostgresLedger.latestIssued, [max(0, limit)])
    }

    /// `recent(limit:)`'s order and limit.
    package static let latestIssued = "ORDER BY issued_at DESC LIMIT $1"

    public func revoke(serial: String, reason: LedgerEntry.RevocationReason, at date: Date) async throws(PeerCAError) -> LedgerEntry {
        let serial = serial.lowercased()
        do {
            try await client.query(
                "UPDATE certificates SET revoked_at = \(date.timeIntervalSince1970), revocation_reason = \(reason.rawValue) WHERE serial = \(serial) AND revoked_at IS NULL",
                logger: logger)
        } catch {
            throw PeerCAError(.ledger, "cannot revoke: \(PostgresLedger.describe(error))")
        }
        guard let entry = try await entry(serial: serial) else { throw PeerCAError(.notFound, "no certificate has serial \(serial.prefix(40))") }
        return entry
    }

    public func revoked(notExpiredAt now: Date) async throws(PeerCAError) -> [LedgerEntry] {
        try await select("WHERE revoked_at IS NOT NULL AND not_after > $1 ORDER BY revoked_at", [now.timeIntervalSince1970])
    }

    public func nextCRLNumber() async throws(PeerCAError) -> Int64 {
        do {
            for try await value in try await client.query("SELECT nextval('crl_numbers')", logger: logger).decode(Int64.self) { return value }
            throw PeerCAError(.ledger, "no CRL number")
        } catch let error as PeerCAError {
            throw error
        } catch {
            throw PeerCAError(.ledger, "cannot allocate a CRL number: \(PostgresLedger.describe(error))")
        }
    }

    public func revokeAccount(_ account: String, reason: LedgerEntry.RevocationReason, at date: Date) async throws(PeerCAError) -> [LedgerEntry] {
        guard !account.isEmpty else { throw PeerCAError(.invalidRequest, "the account is empty: no sessions to end") }
        let at = date.timeIntervalSince1970
        let update: PostgresQuery
        do {
            update = PostgresQuery(
                unsafeSQL: """
                    UPDATE certificates SET revoked_at = $1, revocation_reason = $2
                    WHERE revoked_at IS NULL AND serial IN (
                        SELECT serial FROM certificates WHERE common_name = $3 AND revoked_at IS NULL AND not_after > $1
                        ORDER BY serial FOR UPDATE)
                    RETURNING \(PostgresLedger.columns)
                    """,
                binds: try PostgresLedger.bindings([at, reason.rawValue, account]))
        } catch { throw PeerCAError(.ledger, "cannot bind a query value") }
        do {
            return try await client.withTransaction(logger: logger) { connection in
                // The rows are locked in serial order (two logouts of one account cannot deadlock);
                // under READ COMMITTED a row another transaction revoked meanwhile is checked again
                // (revoked_at IS NULL) once that one commits, so its first revocation stays.
                let revoked = try await PostgresLedger.entries(try await connection.query(update, logger: logger))
                try await connection.query(
                    """
                    INSERT INTO ended_sessions (account, ended_at, reason) VALUES (\(account), \(at), \(reason.rawValue))
                    ON CONFLICT (account) DO UPDATE SET
                        ended_at = GREATEST(ended_sessions.ended_at, EXCLUDED.ended_at),
                        reason = CASE WHEN EXCLUDED.ended_at > ended_sessions.ended_at THEN EXCLUDED.reason ELSE ended_sessions.reason END
                    """, logger: logger)
                return revoked.sorted { ($0.issuedAt, $0.serial) > ($1.issuedAt, $1.serial) }
            }
        } catch {
            throw PeerCAError(.ledger, "cannot end the sessions of the account: \(PostgresLedger.describe(error))")
        }
    }

    public func endedSessions(since: Date) async throws(PeerCAError) -> [String: Date] {
        do {
            var sessions: [String: Date] = [:]
            let rows = try await client.query(
                "SELECT account, ended_at FROM ended_sessions WHERE ended_at >= \(since.timeIntervalSince1970)", logger: logger)
            for try await (account, endedAt) in rows.decode((String, Double).self) {
                sessions[account] = Date(timeIntervalSince1970: endedAt)
            }
            return sessions
        } catch {
            throw PeerCAError(.ledger, "cannot read the ended sessions: \(PostgresLedger.describe(error))")
        }
    }

    public func endedSession(account: String) async throws(PeerCAError) -> Date? {
        do {
            let rows = try await client.query("SELECT ended_at FROM ended_sessions WHERE account = \(account)", logger: logger)
            for try await endedAt in rows.decode(Double.self) { return Date(timeIntervalSince1970: endedAt) }
            return nil
        } catch {
            throw PeerCAError(.ledger, "cannot read the account's ended sessions: \(PostgresLedger.describe(error))")
        }
    }

    private func select(_ clause: String, _ values: [any PostgresEncodable & Sendable]) async throws(PeerCAError) -> [LedgerEntry] {
        let bindings: PostgresBindings
        do { bindings = try PostgresLedger.bindings(values) } catch { throw PeerCAError(.ledger, "cannot bind a query value") }
        let query = PostgresQuery(unsafeSQL: "SELECT \(PostgresLedger.columns) FROM certificates " + clause, binds: bindings)
        do {
            return try await PostgresLedger.entries(try await client.query(query, logger: logger))
        } catch {
            throw PeerCAError(.ledger, "cannot read the ledger: \(PostgresLedger.describe(error))")
        }
    }

    static func bindings(_ values: [any PostgresEncodable & Sendable]) throws -> PostgresBindings {
        var bindings = PostgresBindings()
        for value in values { try bindings.append(value) }
        return bindings
    }

    /// Rows of ``columns``, as entries.
    static func entries(_ rows: PostgresRowSequence) async throws -> [LedgerEntry] {
        var entries: [LedgerEntry] = []
        for try await row in rows {
            let full = try row.decode(
                (String, String, String, String, String, String?, String, Double, Double, Double, ByteBuffer, Double?, Int?, String?, Double?, String?).self)
            let status: LedgerEntry.Status = full.11.map {
                .revoked(at: Date(timeIntervalSince1970: $0), reason: full.12.flatMap(LedgerEntry.RevocationReason.init(rawValue:)) ?? .unspecified)
            } ?? .valid
            entries.append(LedgerEntry(
                serial: full.0, subject: full.1, commonName: full.2, tokenIssuer: full.3, tokenSubject: full.4, tokenID: full.5,
                keyFingerprint: full.6, notBefore: Date(timeIntervalSince1970: full.7), notAfter: Date(timeIntervalSince1970: full.8),
                issuedAt: Date(timeIntervalSince1970: full.9), der: Array(full.10.readableBytesView), status: status, provider: full.13,
                sessionStart: full.14.map { Date(timeIntervalSince1970: $0) }, renewalOf: full.15))
        }
        return entries
    }

    /// The SQLSTATE of a server's error (`55P03`: lock not available), or nil.
    static func sqlState(_ error: any Error) -> String? {
        (error as? PSQLError).flatMap { $0.code == .server ? $0.serverInfo?[.sqlState] : nil }
    }

    static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            return "PostgreSQL \(error.serverInfo?[.sqlState] ?? "\(error.code)"): \(error.serverInfo?[.message] ?? "")"
        }
        if let error = error as? PostgresTransactionError, let inner = error.closureError ?? error.commitError ?? error.beginError {
            return describe(inner)
        }
        return "\(type(of: error))"
    }
}
