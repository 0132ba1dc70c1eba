public import ArgumentParser
import Foundation
public import PeerCA
import TokenKit

extension LedgerEntry.RevocationReason: ExpressibleByArgument {
    public init?(argument: String) { self.init(name: argument) }
    public static var allValueStrings: [String] { allCases.map(\.name) }
    public static var allValueDescriptions: [String: String] { [:] }
}

struct CARevoke: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "revoke",
        abstract: "Revoke a certificate by serial number, or every certificate of an account.",
        discussion: """
            Give a serial number (hex, as ca list shows it), or --account with an account user ID \
            (the certificates' CN) to log the account out everywhere: every certificate of it \
            that has not expired is revoked, and the ledger records that its sessions ended \
            now, for every server sharing it to refuse the account's tokens issued before.

            Reasons: unspecified, keyCompromise, caCompromise, affiliationChanged, superseded, \
            cessationOfOperation, certificateHold, privilegeWithdrawn. The next CRL lists the \
            revoked certificates and OCSP answers "revoked".

            Examples:
              tokentool ca revoke --dir ca --reason keyCompromise 5f1c0a…
              tokentool ca revoke --dir ca --account user-42
              tokentool ca revoke --dir tokentool-state/ca \\
                  --store sqlite:tokentool-state/ledger.sqlite 5f1c0a…
            """)

    @Option(help: "CA directory.")
    var dir: String

    @OptionGroup(title: "CA key passphrase") var passphrase: PassphraseOptions

    @Option(help: "Revocation reason (default unspecified).")
    var reason: LedgerEntry.RevocationReason?

    @Option(help: "Revoke every unexpired certificate of this account (CN) and end its sessions, instead of one serial.")
    var account: String?

    @Argument(help: "Serial number in hex (or --account).")
    var serial: String?

    @OptionGroup(title: "Ledger") var store: StoreOption

    func validate() throws {
        switch (serial, account) {
        case (nil, nil): throw ValidationError("Give a serial number or --account ACCOUNT.")
        case (.some, .some): throw ValidationError("Give a serial number or --account ACCOUNT, not both.")
        case (nil, ""?): throw ValidationError("--account is empty: give the account user ID (the certificates' CN).")
        default: break
        }
    }

    func run() async throws {
        if let account {
            try await revoke(account: account)
            return
        }
        guard let serial else { return }
        let entry = try await CADeployment(directory: dir).withCA(passphrase: passphrase, store: store, issuing: false) { ca in
            try await ca.revoke(serial: serial, reason: reason ?? .unspecified)
        }
        if case .revoked(let at, let reason) = entry.status {
            print("revoked \(entry.serial) (\(entry.subject)) at \(ISO8601Text.string(at)): \(reason.name)")
        }
    }

    /// Revokes the account's certificates and ends its sessions in one ledger transaction.
    func revoke(account: String) async throws {
        let now = Date()
        let revoked = try await CADeployment(directory: dir).withCA(passphrase: passphrase, store: store, issuing: false) { ca in
            try await ca.ledger.revokeAccount(account, reason: reason ?? .unspecified, at: now)
        }
        for entry in revoked {
            print("revoked \(entry.serial) (\(entry.subject)): \((reason ?? .unspecified).name)")
        }
        let count = revoked.count == 1 ? "1 certificate" : "\(revoked.count) certificates"
        print("revoked \(count) of \(account); its sessions before \(now.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))) are ended")
    }
}
