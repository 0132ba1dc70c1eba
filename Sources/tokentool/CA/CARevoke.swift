public import ArgumentParser
import Foundation
public import PeerCA

extension LedgerEntry.RevocationReason: ExpressibleByArgument {
    public init?(argument: String) { self.init(name: argument) }
    public static var allValueStrings: [String] { allCases.map(\.name) }
    public static var allValueDescriptions: [String: String] { [:] }
}

struct CARevoke: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "revoke",
        abstract: "Revoke a certificate by serial number (hex, as ca list shows it).",
        discussion: """
            Reasons: unspecified, keyCompromise, caCompromise, affiliationChanged, superseded, \
            cessationOfOperation, certificateHold, privilegeWithdrawn. The next CRL lists it and \
            OCSP answers "revoked".

            Example:
              tokentool ca revoke --dir ca --reason keyCompromise 5f1c0a…
              tokentool ca revoke --dir tokentool-state/ca --store sqlite:tokentool-state/ledger.sqlite 5f1c0a…
            """)

    @Option(help: "CA directory.")
    var dir: String

    @OptionGroup(title: "CA key passphrase") var passphrase: PassphraseOptions

    @Option(help: "Revocation reason (default unspecified).")
    var reason: LedgerEntry.RevocationReason?

    @Argument(help: "Serial number in hex.")
    var serial: String

    @OptionGroup(title: "Ledger") var store: StoreOption

    func run() async throws {
        let entry = try await CADeployment(directory: dir).withCA(passphrase: passphrase, store: store.store, issuing: false) { ca in
            try await ca.revoke(serial: serial, reason: reason ?? .unspecified)
        }
        if case .revoked(let at, let reason) = entry.status {
            print("revoked \(entry.serial) (\(entry.subject)) at \(ISO8601DateFormatter().string(from: at)): \(reason.name)")
        }
    }
}
