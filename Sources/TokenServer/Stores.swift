import Foundation
import Logging
import PeerCA

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

/// Ledger stores by URL: `sqlite:PATH`, `postgres://…`.
enum LedgerStores {
    /// An open ledger and, for PostgreSQL, the task running its connection pool.
    static func open(_ url: String, logger: Logger) async throws -> (any CertificateLedger, Task<Void, Never>?) {
        if url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") {
            let ledger = try PostgresLedger(url: url, logger: logger)
            let running = Task { await ledger.run() }
            do { try await ledger.migrate() } catch {
                running.cancel()
                throw error
            }
            return (ledger, running)
        }
        return (try openSQLite(url), nil)
    }

    static func openSQLite(_ url: String) throws -> any CertificateLedger {
        if url.hasPrefix("sqlite:") {
            let path = String(url.dropFirst("sqlite:".count))
            let directory = (path as NSString).deletingLastPathComponent
            if !directory.isEmpty {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            }
            return try SQLiteLedger(path: path)
        }
        throw ConfigurationError(key: "store", "must be sqlite:PATH or postgres://…")
    }
}
