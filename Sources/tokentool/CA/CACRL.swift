import ArgumentParser
import Foundation
import PeerCA
import TokenKit

struct CACRL: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "crl",
        abstract: "Print a signed CRL of every revoked, unexpired certificate.",
        discussion: """
            Examples:
              tokentool ca crl --dir ca > crl.pem
              tokentool ca crl --dir ca --der --validity 3600 > crl.der
              tokentool ca crl --dir /etc/tokentool/ca \\
                  --store postgres://tokentool:secret@db:5432/tokentool
              openssl crl -in crl.pem -noout -text
            """)

    @Option(help: "CA directory.")
    var dir: String

    @OptionGroup(title: "CA key passphrase") var passphrase: PassphraseOptions

    @Option(help: "Seconds until nextUpdate.")
    var validity: Double = 86_400

    @Flag(help: "DER instead of PEM.")
    var der = false

    @OptionGroup(title: "Ledger") var store: StoreOption

    func validate() throws {
        guard validity.isFinite, validity >= 1 else { throw ValidationError("--validity must be a number of seconds, at least 1") }
    }

    func run() async throws {
        let crl = try await CADeployment(directory: dir).withCA(passphrase: passphrase, store: store, issuing: false) { ca in
            try await ca.crl(validity: validity)
        }
        if der {
            Output.raw(crl)
        } else {
            print(PEMText.encode(crl, label: "X509 CRL"), terminator: "")
        }
    }
}
