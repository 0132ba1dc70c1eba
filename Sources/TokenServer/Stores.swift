import Foundation
public import Logging
public import PeerCA

/// The CA the server issues with: loaded from the configured directory, or created there as a
/// development CA on first start.
enum CAStore {
    static func loadOrCreate(_ configuration: ServerConfiguration, logger: Logger) throws -> CertificateAuthority {
        let files = CAFiles(directory: configuration.caDirectory)
        var passphrase: String?
        if let variable = configuration.ca?.passphraseEnv {
            guard let value = ProcessInfo.processInfo.environment[variable], !value.isEmpty else {
                throw ConfigurationError(key: "ca.passphraseEnv", "names \(variable), which is not set")
            }
            passphrase = value
        }
        if !files.exists {
            guard configuration.ca?.createIfMissing ?? true else {
                throw ConfigurationError(key: "ca.directory", "\(files.directory) holds no CA (createIfMissing is false)")
            }
            let material = try CertificateAuthority.create(name: "tokentool \(configuration.ca?.appID ?? "dev")", withIntermediate: true)
            try files.create(material, passphrase: passphrase)
            logger.notice("created a CA", metadata: ["directory": "\(files.directory)"])
        }
        return try files.load(passphrase: passphrase)
    }
}

/// A ledger opened from a store URL, the form the server's `store` key takes: `sqlite:PATH` or
/// `postgres://user:password@host:port/database`. Close it when done (for PostgreSQL that stops the
/// connection pool).
///
/// ```swift
/// let store = try await LedgerStore.open("sqlite:tokentool-state/ledger.sqlite", logger: logger)
/// let recent = try await store.ledger.recent(limit: 10)
/// await store.close()
/// ```
public struct LedgerStore: Sendable {
    /// The open ledger.
    public let ledger: any CertificateLedger
    let running: Task<Void, Never>?

    /// Opens (and for a new database, creates the tables of) the ledger `url` names.
    public static func open(_ url: String, logger: Logger) async throws -> LedgerStore {
        if url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") {
            let ledger = try PostgresLedger(url: url, logger: logger)
            let running = Task { await ledger.run() }
            do { try await ledger.migrate() } catch {
                running.cancel()
                throw error
            }
            return LedgerStore(ledger: ledger, running: running)
        }
        guard url.hasPrefix("sqlite:") else { throw ConfigurationError(key: "store", "must be sqlite:PATH or postgres://…") }
        let path = String(url.dropFirst("sqlite:".count))
        let directory = (path as NSString).deletingLastPathComponent
        if !directory.isEmpty {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        }
        return LedgerStore(ledger: try SQLiteLedger(path: path), running: nil)
    }

    /// Closes the connections (PostgreSQL); an SQLite ledger closes when released.
    public func close() async {
        guard let running else { return }
        running.cancel()
        await running.value
    }
}
