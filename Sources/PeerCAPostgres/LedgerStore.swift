public import Logging
public import PeerCA
public import ServiceLifecycle
import Foundation

/// A ledger opened from its `LedgerLocation`: an `SQLiteLedger` file or a
/// ``PostgresLedger``. This is the one place that turns a store URL into a ledger; the server and
/// the `tokentool ca` commands both open theirs here.
///
/// A long-running program puts ``services`` in its `ServiceGroup` (PostgreSQL's connection pool
/// runs there) and calls ``prepare()`` once they run; a command that uses the ledger briefly calls
/// ``with(_:logger:_:)``, which does both and stops the pool when the body returns.
///
/// ```swift
/// let recent = try await LedgerStore.with(try LedgerLocation("sqlite:state/ledger.sqlite"), logger: logger) { ledger in
///     try await ledger.recent(limit: 10)
/// }
/// ```
public struct LedgerStore: Sendable {
    /// The open ledger.
    public let ledger: any CertificateLedger
    /// Where it is.
    public let location: LedgerLocation
    /// What must run while the ledger is in use: PostgreSQL's connection pool; none for SQLite.
    public let services: [any Service]
    private let postgres: PostgresLedger?

    /// Opens the ledger `location` names. An SQLite file (and its directory, mode 0700) is created
    /// with its tables; a PostgreSQL ledger's tables are made by ``prepare()``.
    public static func open(_ location: LedgerLocation, logger: Logger) throws(PeerCAError) -> LedgerStore {
        switch location {
        case .postgres(let url):
            let ledger = try PostgresLedger(url: url, logger: logger)
            return LedgerStore(ledger: ledger, location: location, services: [ledger], postgres: ledger)
        case .sqlite(let path):
            let directory = (path as NSString).deletingLastPathComponent
            if !directory.isEmpty {
                do {
                    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
                } catch { throw PeerCAError(.io, "cannot create \(directory) for the ledger") }
            }
            return LedgerStore(ledger: try SQLiteLedger(path: path), location: location, services: [], postgres: nil)
        }
    }

    /// The ledger's group commit so far: transactions written and certificates in them.
    package var commitStatistics: GroupCommit<LedgerRecord>.Statistics? {
        if let postgres { return postgres.commitStatistics }
        return (ledger as? SQLiteLedger)?.commitStatistics
    }

    /// Makes the PostgreSQL ledger's tables if they do not exist yet (safe from several instances
    /// at once). Needs ``services`` running.
    public func prepare() async throws(PeerCAError) {
        try await postgres?.migrate()
    }

    /// Opens the ledger, runs its services and prepares it, runs `body`, then stops the services.
    public static func with<T>(
        _ location: LedgerLocation, logger: Logger, _ body: (any CertificateLedger) async throws -> T
    ) async throws -> T {
        let store = try open(location, logger: logger)
        guard let postgres = store.postgres else { return try await body(store.ledger) }
        return try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { await postgres.run() }
            defer { tasks.cancelAll() }
            try await store.prepare()
            return try await body(store.ledger)
        }
    }
}
