public import Foundation
public import Logging
import NIOCore
public import PeerCA
import PostgresNIO
public import ServiceLifecycle

/// The issuance ledger in PostgreSQL, for several CA instances behind a load balancer: serials
/// and token uses are unique across instances (primary keys), revocations made through one
/// instance are in every instance's CRL, and a commit is durable before a certificate is returned.
///
/// It is a `Service`: run it (in a `ServiceGroup`, or through ``LedgerStore/with(_:logger:_:)``)
/// while the ledger is in use, and call ``migrate()`` once it runs. Its errors are
/// `PeerCAError`s; the URL's password never appears in them.
public final class PostgresLedger: CertificateLedger, Service {
    let client: PostgresClient
    let logger: Logger

    /// A ledger for `postgres://user:password@host:port/database[?sslmode=disable|prefer|require]`.
    public init(url: String, logger: Logger) throws(PeerCAError) {
        self.client = PostgresClient(configuration: try PostgresLedger.configuration(url), backgroundLogger: logger)
        self.logger = logger
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

    /// Creates the tables if they do not exist (serialised across instances by an advisory lock).
    public func migrate() async throws(PeerCAError) {
        do {
            try await client.withConnection { connection in
                try await connection.query("SELECT pg_advisory_lock(7402291)", logger: logger)
                var failure: (any Error)?
                do {
                    for statement in PostgresLedger.schema {
                        try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                    }
                } catch {
                    failure = error
                }
                try await connection.query("SELECT pg_advisory_unlock(7402291)", logger: logger)
                if let failure { throw failure }
            }
        } catch {
            throw PeerCAError(.ledger, "cannot prepare the PostgreSQL ledger: \(PostgresLedger.describe(error))")
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
        "CREATE INDEX IF NOT EXISTS certificates_subject ON certificates(subject)",
        "CREATE INDEX IF NOT EXISTS certificates_common_name ON certificates(common_name)",
        """
        CREATE TABLE IF NOT EXISTS token_uses (
            issuer TEXT NOT NULL, token_id TEXT NOT NULL, serial TEXT NOT NULL REFERENCES certificates(serial),
            PRIMARY KEY (issuer, token_id))
        """,
        "CREATE SEQUENCE IF NOT EXISTS crl_numbers",
    ]

    public func record(_ entry: LedgerEntry, claiming use: TokenUse?) async throws(PeerCAError) {
        let der = ByteBuffer(bytes: entry.der)
        do {
            try await client.withTransaction(logger: logger) { connection in
                try await connection.query(
                    """
                    INSERT INTO certificates (serial, subject, common_name, token_issuer, token_subject, token_id, key_fingerprint,
                        not_before, not_after, issued_at, der)
                    VALUES (\(entry.serial), \(entry.subject), \(entry.commonName), \(entry.tokenIssuer), \(entry.tokenSubject),
                        \(entry.tokenID), \(entry.keyFingerprint), \(entry.notBefore.timeIntervalSince1970),
                        \(entry.notAfter.timeIntervalSince1970), \(entry.issuedAt.timeIntervalSince1970), \(der))
                    """, logger: logger)
                if let use {
                    try await connection.query(
                        "INSERT INTO token_uses (issuer, token_id, serial) VALUES (\(use.issuer), \(use.tokenID), \(entry.serial))", logger: logger)
                }
            }
        } catch {
            switch PostgresLedger.uniqueViolation(error) {
            case "token_uses_pkey"?: throw PeerCAError(.tokenReused, "this token (jti) was already used for a certificate")
            case .some: throw PeerCAError(.serialExists, "serial \(entry.serial) is recorded already")
            case nil: throw PeerCAError(.ledger, "cannot record the certificate: \(PostgresLedger.describe(error))")
            }
        }
    }

    public func entry(serial: String) async throws(PeerCAError) -> LedgerEntry? {
        try await select("WHERE serial = $1", [serial.lowercased()]).first
    }

    public func entries(subject: String) async throws(PeerCAError) -> [LedgerEntry] {
        try await select("WHERE subject = $1 OR common_name = $1 ORDER BY issued_at DESC", [subject])
    }

    public func recent(limit: Int) async throws(PeerCAError) -> [LedgerEntry] {
        try await select("ORDER BY issued_at DESC LIMIT \(max(0, limit))", [])
    }

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

    private func select(_ clause: String, _ values: [any PostgresEncodable & Sendable]) async throws(PeerCAError) -> [LedgerEntry] {
        var bindings = PostgresBindings()
        do { for value in values { try bindings.append(value) } } catch { throw PeerCAError(.ledger, "cannot bind a query value") }
        let query = PostgresQuery(
            unsafeSQL: """
                SELECT serial, subject, common_name, token_issuer, token_subject, token_id, key_fingerprint, not_before, not_after,
                    issued_at, der, revoked_at, revocation_reason FROM certificates
                """ + " " + clause, binds: bindings)
        do {
            var entries: [LedgerEntry] = []
            let rows = try await client.query(query, logger: logger)
            for try await row in rows {
                let full = try row.decode((String, String, String, String, String, String?, String, Double, Double, Double, ByteBuffer, Double?, Int?).self)
                let status: LedgerEntry.Status = full.11.map {
                    .revoked(at: Date(timeIntervalSince1970: $0), reason: full.12.flatMap(LedgerEntry.RevocationReason.init(rawValue:)) ?? .unspecified)
                } ?? .valid
                entries.append(LedgerEntry(
                    serial: full.0, subject: full.1, commonName: full.2, tokenIssuer: full.3, tokenSubject: full.4, tokenID: full.5,
                    keyFingerprint: full.6, notBefore: Date(timeIntervalSince1970: full.7), notAfter: Date(timeIntervalSince1970: full.8),
                    issuedAt: Date(timeIntervalSince1970: full.9), der: Array(full.10.readableBytesView), status: status))
            }
            return entries
        } catch {
            throw PeerCAError(.ledger, "cannot read the ledger: \(PostgresLedger.describe(error))")
        }
    }

    /// The constraint a unique violation broke, or nil when `error` is not one.
    static func uniqueViolation(_ error: any Error) -> String? {
        if let error = error as? PSQLError, error.code == .server, error.serverInfo?[.sqlState] == "23505" {
            return error.serverInfo?[.constraintName] ?? ""
        }
        if let error = error as? PostgresTransactionError {
            for inner in [error.closureError, error.commitError].compactMap({ $0 }) {
                if let name = uniqueViolation(inner) { return name }
            }
        }
        return nil
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
