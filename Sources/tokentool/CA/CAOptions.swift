public import ArgumentParser
import Foundation
import Logging
public import PeerCA
import PeerCAPostgres
import TokenKit

extension CADeployment {
    /// Runs `body` with the CA and its ledger, then closes the ledger. The ledger is `store` when
    /// given (an operator's `--store`), else the one ca.json names (a `tokentool serve` deployment
    /// writes its store there), else ledger.sqlite in the directory. A CA directory without
    /// ca.json (made by an older `tokentool serve`) works for the commands that do not issue
    /// (`issuing: false`: revoke, list, crl), with a placeholder policy they never consult.
    ///
    /// The whole ledger part — connecting, preparing, `body` — must end within the store option's
    /// `--ledger-timeout`: a PostgreSQL server that stops answering once connected would otherwise
    /// hold the command without end (PostgresNIO's queries do not end when cancelled).
    func withCA<T: Sendable>(
        passphrase: PassphraseOptions, store storeOption: StoreOption, allowInsecure: Bool = false, issuing: Bool,
        _ body: @escaping @Sendable (PeerCertificateAuthority) async throws -> T
    ) async throws -> T {
        let store = storeOption.store
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
        let limit = storeOption.ledgerTimeout
        let outcome: Result<T, any Error> = await TimeLimit.race(
            .milliseconds(Int64(limit * 1000)), fallback: .failure(CancellationError()),
            {
                do {
                    return .success(
                        try await LedgerStore.with(location, logger: Logger(label: "tokentool")) { ledger in
                            try await body(PeerCertificateAuthority(authority: authority, policy: policy, ledger: ledger))
                        })
                } catch { return .failure(error) }
            },
            timedOut: {
                .failure(CLIExit(code: 1, message: "tokentool: the ledger (\(location)) did not answer within \(StoreOption.seconds(limit)) s (--ledger-timeout)"))
            })
        do {
            return try outcome.get()
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

    @Option(help: ArgumentHelp(
        "Seconds the command may wait for the ledger, connecting included, before it gives up.",
        discussion: "A PostgreSQL server that stops answering would otherwise hold the command without end."))
    var ledgerTimeout: Double = 120

    mutating func validate() throws {
        guard ledgerTimeout.isFinite, ledgerTimeout > 0, ledgerTimeout <= 86_400 else {
            throw ValidationError("--ledger-timeout must be more than 0 and at most 86400 seconds")
        }
    }

    /// `seconds` as a whole number when it is one ("120", "2.5").
    static func seconds(_ seconds: Double) -> String {
        seconds.rounded() == seconds ? String(Int(seconds)) : String(seconds)
    }
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
