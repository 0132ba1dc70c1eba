import ArgumentParser
import Foundation
import PeerCA

struct CAInit: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "init",
        abstract: "Create a CA: a root, optionally an intermediate that issues, and the settings.",
        discussion: """
            The trust domain of every certificate is derived from --app-id (lower-cased, then \
            .SUFFIX if --trust-domain-suffix is given). With --intermediate, root.key can be moved \
            offline: only issuer.* is needed to issue.

            Examples:
              tokentool ca init --dir ca --app-id 2f4e61b8 --name "Ditto app devices"
              tokentool ca init --dir ca --app-id my-app \\
                  --trust-domain-suffix peers.example.com --key-type p384 --intermediate
              # keys encrypted with the passphrase in $CA_PASS:
              CA_PASS=… tokentool ca init --dir ca --app-id my-app --passphrase-env CA_PASS
            """)

    @Option(help: "Directory for the CA's files (created if missing).")
    var dir: String

    @Option(help: "App ID the trust domain is derived from.")
    var appID: String

    @Option(help: "Appended to the app ID to make the trust domain.")
    var trustDomainSuffix: String?

    @Option(help: "Organisation name in the CA certificates.")
    var name: String = "tokentool"

    @Option(help: "Provider name recorded in identities.")
    var provider: String = CASettings.defaultProvider

    @Option(help: "CA key type: p256, p384, ed25519 or rsa3072.")
    var keyType: CAKeyAlgorithm = .p256

    @Flag(help: "Create an intermediate CA that issues, so the root key can stay offline.")
    var intermediate = false

    @Option(help: "Longest peer-certificate validity in seconds.")
    var maxValidity: Double = CASettings.defaultMaximumValidity

    @Option(help: "Token reuse: unlimited, or once (per iss + jti; the same token and key again get the same certificate again, another key is refused).")
    var tokenReuse: IssuancePolicy.TokenReuse = .unlimited

    @Option(help: ArgumentHelp(
        "The ledger, when not ledger.sqlite in the CA directory: sqlite:PATH or postgres://user:password@host:port/database.",
        discussion: "Written to ca.json, so every ca command on this directory uses it."))
    var store: String?

    @OptionGroup(title: "Key encryption (optional)") var passphrase: PassphraseOptions

    func run() throws {
        guard maxValidity.isFinite, maxValidity >= CASettings.minimumMaximumValidity else {
            throw CLIExit.usage("--max-validity must be a number of seconds, at least 60")
        }
        var location: LedgerLocation?
        if let store {
            do { location = try LedgerLocation(store) } catch { throw CLIExit.usage("--store: \(error.message)") }
        }
        let settings = CASettings(
            appID: appID, trustDomainSuffix: trustDomainSuffix, provider: provider, maximumValidity: maxValidity, tokenReuse: tokenReuse,
            store: location)
        let policy: IssuancePolicy
        do { policy = try settings.issuancePolicy() } catch { throw CLIExit.usage(error.message) }
        let deployment = CADeployment(directory: dir)
        let ca = deployment.files
        let files = [ca.rootCertificate, ca.issuerCertificate, ca.issuerKey, deployment.settingsPath] + (intermediate ? [ca.rootKey] : [])
        if let existing = files.first(where: { FileManager.default.fileExists(atPath: $0) }) {
            throw CLIExit.usage("\(existing) exists; tokentool never overwrites CA material")
        }
        let secret = try passphrase.value()
        let material = try CertificateAuthority.create(name: name, algorithm: keyType, withIntermediate: intermediate)
        try deployment.create(material, settings: settings, passphrase: secret)
        print("CA created in \(dir): \(keyType.rawValue)\(intermediate ? ", root + issuing intermediate" : ", root issues")")
        print("  trust domain: \(policy.trustDomain)")
        print("  give peers:   \(ca.rootCertificate)")
        if intermediate { print("  offline key:  \(ca.rootKey) (not needed to issue)") }
        if secret != nil { print("  keys encrypted with the passphrase (PKCS#8, AES-256-CBC, PBKDF2)") }
    }
}
