public import ArgumentParser
import Foundation
import Logging
public import PeerCA
import PeerCAPostgres

extension CADeployment {
    /// Runs `body` with the CA and its ledger, then closes the ledger. The ledger is `store` when
    /// given (an operator's `--store`), else the one ca.json names (a `tokentool serve` deployment
    /// writes its store there), else ledger.sqlite in the directory. A CA directory without
    /// ca.json (made by an older `tokentool serve`) works for the commands that do not issue
    /// (`issuing: false`: revoke, list, crl), with a placeholder policy they never consult.
    func withCA<T>(
        passphrase: PassphraseOptions, store: String? = nil, allowInsecure: Bool = false, issuing: Bool,
        _ body: (PeerCertificateAuthority) async throws -> T
    ) async throws -> T {
        let settings: CASettings?
        do { settings = try self.settings() } catch { throw CLIExit.usage(error.message) }
        if settings == nil, issuing {
            throw CLIExit.usage("cannot read \(settingsPath) (run tokentool ca init --dir \(directory) first?)")
        }
        guard settings != nil || exists else {
            throw CLIExit.usage("\(directory) holds no CA (run tokentool ca init --dir \(directory) first?)")
        }
        let authority = try files.load(passphrase: try passphrase.value(), allowInsecureKeyFile: allowInsecure)
        let policy = try (settings ?? CASettings(appID: "tokentool")).issuancePolicy()
        var override: LedgerLocation?
        if let store {
            do { override = try LedgerLocation(store) } catch { throw CLIExit.usage("--store: \(error.message)") }
        }
        let location = ledgerLocation(settings: settings, override: override)
        do {
            return try await LedgerStore.with(location, logger: Logger(label: "tokentool")) { ledger in
                try await body(PeerCertificateAuthority(authority: authority, policy: policy, ledger: ledger))
            }
        } catch let error as PeerCAError where error.code == .invalidSettings {
            throw CLIExit.usage("\(store == nil ? "the store in \(settingsPath)" : "--store"): \(error.message)")
        }
    }
}

/// Which ledger the CA commands read and write.
struct StoreOption: ParsableArguments {
    @Option(help: ArgumentHelp(
        "The ledger, when not ledger.sqlite in the CA directory: sqlite:PATH or postgres://user:password@host:port/database.",
        discussion: "For a CA run by tokentool serve, its store: sqlite:tokentool-state/ledger.sqlite on the embedded defaults."))
    var store: String?
}

extension CAKeyAlgorithm: ExpressibleByArgument {}

extension IssuancePolicy.TokenReuse: ExpressibleByArgument {}

/// Where the passphrase of encrypted CA keys comes from.
struct PassphraseOptions: ParsableArguments {
    @Option(help: "File whose first line is the passphrase of the CA keys (mode 0600).")
    var passphraseFile: String?

    @Option(help: "Environment variable holding the passphrase of the CA keys.")
    var passphraseEnv: String?

    /// The passphrase, or nil when none was given.
    func value() throws -> String? {
        if let passphraseFile {
            try Input.checkPrivate(passphraseFile, allowInsecure: false)
            let text = String(decoding: try Input.read(passphraseFile), as: UTF8.self)
            guard let line = text.split(separator: "\n", omittingEmptySubsequences: false).first, !line.isEmpty else {
                throw CLIExit.usage("\(passphraseFile) holds no passphrase")
            }
            return String(line)
        }
        if let passphraseEnv {
            guard let value = ProcessInfo.processInfo.environment[passphraseEnv], !value.isEmpty else {
                throw CLIExit.usage("the environment variable \(passphraseEnv) is not set")
            }
            return value
        }
        return nil
    }
}
