import ArgumentParser
import Foundation
import PeerCA
import TokenKit

struct CAList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List issued certificates from the ledger, newest first.",
        discussion: """
            Examples:
              tokentool ca list --dir ca
              tokentool ca list --dir ca --subject user-42
              tokentool ca list --dir ca --json
              tokentool ca list --dir tokentool-state/ca \\
                  --store sqlite:tokentool-state/ledger.sqlite
            """)

    @Option(help: "CA directory.")
    var dir: String

    @OptionGroup(title: "CA key passphrase") var passphrase: PassphraseOptions

    @Option(help: "Only certificates for this SPIFFE ID or CN.")
    var subject: String?

    @Option(help: "At most this many.")
    var limit: Int = 100

    @Flag(help: "One JSON array.")
    var json = false

    @OptionGroup(title: "Ledger") var store: StoreOption

    func validate() throws {
        guard limit >= 0 else { throw ValidationError("--limit must be 0 or more") }
    }

    func run() async throws {
        let entries = try await CADeployment(directory: dir).withCA(passphrase: passphrase, store: store, issuing: false) { ca in
            if let subject { try await ca.ledger.entries(subject: subject) } else { try await ca.ledger.recent(limit: limit) }
        }
        let now = Date()
        if json {
            Output.json(.array(entries.prefix(limit).map { entry in
                var object: [String: JSONValue] = [
                    "serial": .string(entry.serial), "subject": .string(entry.subject), "commonName": .string(entry.commonName),
                    "tokenIssuer": .string(entry.tokenIssuer), "tokenSubject": .string(entry.tokenSubject),
                    "keyFingerprint": .string(entry.keyFingerprint), "notBefore": .string(ISO8601Text.string(entry.notBefore)),
                    "notAfter": .string(ISO8601Text.string(entry.notAfter)), "status": .string(entry.notAfter < now ? "expired" : "valid"),
                ]
                if let id = entry.tokenID { object["tokenID"] = .string(id) }
                if let provider = entry.provider { object["provider"] = .string(provider) }
                if case .revoked(let at, let reason) = entry.status {
                    object["status"] = .string("revoked")
                    object["revokedAt"] = .string(ISO8601Text.string(at))
                    object["reason"] = .string(reason.name)
                }
                return .object(object)
            }))
            return
        }
        for entry in entries.prefix(limit) {
            let status: String
            switch entry.status {
            case .valid: status = entry.notAfter < now ? "expired" : "valid"
            case .revoked(_, let reason): status = "revoked(\(reason.name))"
            }
            print("\(entry.serial)  \(status)  until \(ISO8601Text.string(entry.notAfter))  \(entry.subject)")
        }
    }
}
