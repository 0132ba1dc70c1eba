import Foundation
import Logging
import PeerCA

/// The server's CA, as a `CADeployment`: loaded from the configured directory, or made
/// there as a development CA on first start. Its `ca.json` states the server's settings (app ID,
/// validity, token reuse, and the store as an absolute URL), so every `tokentool ca` command works
/// on it and reaches the server's ledger.
enum ServerCA {
    /// The identities' provider name the server's CA records.
    static let provider = "webhook"

    /// The settings the configuration gives the CA.
    static func settings(_ configuration: ServerConfiguration) -> CASettings {
        var location = configuration.ledgerLocation
        if case .sqlite(let path) = location, !path.hasPrefix("/") {
            location = .sqlite(path: FileManager.default.currentDirectoryPath + "/" + path)
        }
        return CASettings(
            appID: configuration.ca?.appID ?? "dev", provider: provider, maximumValidity: Double(configuration.maxExpirationSeconds),
            tokenReuse: configuration.ca?.tokenReuse ?? .unlimited, store: location)
    }

    static func loadOrCreate(_ configuration: ServerConfiguration, logger: Logger) throws -> (CertificateAuthority, CASettings) {
        let deployment = CADeployment(directory: configuration.caDirectory)
        let settings = settings(configuration)
        var passphrase: String?
        if let variable = configuration.ca?.passphraseEnv {
            guard let value = ProcessInfo.processInfo.environment[variable], !value.isEmpty else {
                throw ConfigurationError(key: "ca.passphraseEnv", "names \(variable), which is not set")
            }
            passphrase = value
        }
        if !deployment.exists {
            guard configuration.ca?.createIfMissing ?? true else {
                throw ConfigurationError(key: "ca.directory", "\(deployment.directory) holds no CA (createIfMissing is false)")
            }
            let material = try CertificateAuthority.create(name: "tokentool \(configuration.ca?.appID ?? "dev")", withIntermediate: true)
            try deployment.files.create(material, passphrase: passphrase)
            logger.notice("created a CA", metadata: ["directory": "\(deployment.directory)"])
        }
        do {
            if let written = try deployment.settings() {
                if written != settings {
                    logger.warning(
                        "ca.json differs from the server configuration; the server follows its configuration, tokentool ca commands follow ca.json",
                        metadata: ["file": "\(deployment.settingsPath)"])
                }
            } else {
                try deployment.writeSettings(settings)
            }
        } catch {
            logger.warning("ca.json cannot be used by tokentool ca commands", metadata: ["error": "\(error.message)"])
        }
        return (try deployment.files.load(passphrase: passphrase), settings)
    }
}
