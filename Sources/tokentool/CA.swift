public import ArgumentParser
import Foundation
import Logging
public import PeerCA
import TokenKit
import TokenServer
import X509

/// A CA directory made by `tokentool ca init`: PeerCA's ``CAFiles`` layout, plus the settings
/// (ca.json) and the ledger.
struct CADirectory {
    let path: String
    var files: CAFiles { CAFiles(directory: path) }
    var settings: String { files.path("ca.json") }
    var ledger: String { files.path("ledger.sqlite") }

    /// The CA's settings (ca.json): trust domain and provider name.
    struct Settings: Codable {
        var appID: String
        var trustDomainSuffix: String?
        var provider: String
        var maximumValidity: Double
        var tokenReuse: String
    }

    /// Runs `body` with the CA and its ledger, then closes the ledger. The ledger is `store` when
    /// given (a `tokentool serve` deployment's store), else ledger.sqlite here. A CA directory made
    /// by `tokentool serve` has no ca.json: only the commands that do not issue (revoke, list, crl:
    /// `issuing: false`) work on it, with a placeholder policy they never consult.
    func withCA<T>(
        passphrase: PassphraseOptions, store: String? = nil, allowInsecure: Bool = false, issuing: Bool,
        _ body: (PeerCertificateAuthority) async throws -> T
    ) async throws -> T {
        let settings = try readSettings()
        if settings == nil, issuing {
            throw CLIExit.usage("cannot read \(self.settings) (run tokentool ca init --dir \(path) first?)")
        }
        guard settings != nil || files.exists else {
            throw CLIExit.usage("\(path) holds no CA (run tokentool ca init --dir \(path) first?)")
        }
        let authority = try files.load(passphrase: try passphrase.value(), allowInsecureKeyFile: allowInsecure)
        var policy = try IssuancePolicy(
            appID: settings?.appID ?? "tokentool", trustDomainSuffix: settings?.trustDomainSuffix, provider: settings?.provider ?? "tokentool")
        if let settings {
            policy.maximumValidity = settings.maximumValidity
            policy.defaultTokenReuse = IssuancePolicy.TokenReuse(rawValue: settings.tokenReuse) ?? .unlimited
        }
        guard let store else {
            return try await body(PeerCertificateAuthority(authority: authority, policy: policy, ledger: try SQLiteLedger(path: ledger)))
        }
        let opened: LedgerStore
        do { opened = try await LedgerStore.open(store, logger: Logger(label: "tokentool")) } catch let error as ConfigurationError {
            throw CLIExit.usage("--store \(error.message)")
        }
        do {
            let result = try await body(PeerCertificateAuthority(authority: authority, policy: policy, ledger: opened.ledger))
            await opened.close()
            return result
        } catch {
            await opened.close()
            throw error
        }
    }

    private func readSettings() throws -> Settings? {
        guard let data = FileManager.default.contents(atPath: settings) else { return nil }
        do { return try JSONDecoder().decode(Settings.self, from: data) } catch {
            throw CLIExit.usage("\(self.settings) is not valid CA settings: \(error)")
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

struct CACommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ca",
        abstract: "Run a small CA that turns verified tokens into peer certificates.",
        discussion: """
            A CA lives in one directory: root.pem, issuer.pem and issuer.key (and root.key when an \
            intermediate issues), ca.json (trust domain, provider, limits) and ledger.sqlite (every \
            certificate issued, with its status). Private keys are mode 0600; nothing is overwritten.

            Examples:
              tokentool ca init --dir ca --app-id my-app --name "My devices" --intermediate
              tokentool csr --out device.key > device.csr
              tokentool ca issue --dir ca --csr device.csr --jwks https://idp.example/jwks.json token.jwt > device.pem
              tokentool ca list --dir ca
              tokentool ca revoke --dir ca --reason keyCompromise 5f1c…
              tokentool ca crl --dir ca > crl.pem
            """,
        subcommands: [CAInit.self, CAIssue.self, CARevoke.self, CAList.self, CACRL.self])
}

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
              tokentool ca init --dir ca --app-id my-app --trust-domain-suffix peers.example.com --key-type p384 --intermediate
              CA_PASS=… tokentool ca init --dir ca --app-id my-app --passphrase-env CA_PASS   # keys encrypted
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
    var provider: String = "token"

    @Option(help: "CA key type: p256, p384, ed25519 or rsa3072.")
    var keyType: CAKeyAlgorithm = .p256

    @Flag(help: "Create an intermediate CA that issues, so the root key can stay offline.")
    var intermediate = false

    @Option(help: "Longest peer-certificate validity in seconds.")
    var maxValidity: Double = 86_400

    @Option(help: "Token reuse: unlimited, or once (per iss + jti).")
    var tokenReuse: String = "unlimited"

    @OptionGroup(title: "Key encryption (optional)") var passphrase: PassphraseOptions

    func run() throws {
        guard IssuancePolicy.TokenReuse(rawValue: tokenReuse) != nil else { throw CLIExit.usage("--token-reuse must be unlimited or once") }
        guard maxValidity >= 60 else { throw CLIExit.usage("--max-validity must be at least 60 seconds") }
        _ = try IssuancePolicy(appID: appID, trustDomainSuffix: trustDomainSuffix, provider: provider)
        let directory = CADirectory(path: dir)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let ca = directory.files
        let files = [ca.rootCertificate, ca.issuerCertificate, ca.issuerKey, directory.settings] + (intermediate ? [ca.rootKey] : [])
        if let existing = files.first(where: { FileManager.default.fileExists(atPath: $0) }) {
            throw CLIExit.usage("\(existing) exists; tokentool never overwrites CA material")
        }
        let secret = try passphrase.value()
        let material = try CertificateAuthority.create(name: name, algorithm: keyType, withIntermediate: intermediate)
        let settings = CADirectory.Settings(
            appID: appID, trustDomainSuffix: trustDomainSuffix, provider: provider, maximumValidity: maxValidity, tokenReuse: tokenReuse)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try ca.create(material, passphrase: secret)
        try Output.writeNew(directory.settings, contents: Array(try encoder.encode(settings)) + [0x0a], mode: 0o644)
        let policy = try IssuancePolicy(appID: appID, trustDomainSuffix: trustDomainSuffix, provider: provider)
        print("CA created in \(dir): \(keyType.rawValue)\(intermediate ? ", root + issuing intermediate" : ", root issues")")
        print("  trust domain: \(policy.trustDomain)")
        print("  give peers:   \(ca.rootCertificate)")
        if intermediate { print("  offline key:  \(ca.rootKey) (not needed to issue)") }
        if secret != nil { print("  keys encrypted with the passphrase (PKCS#8, AES-256-CBC, PBKDF2)") }
    }
}

struct CAIssue: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "issue",
        abstract: "Verify a token, then issue a peer certificate for a CSR's key.",
        discussion: """
            The token is verified exactly as `tokentool verify` does (same key and policy options: \
            --key, --jwks, --oidc, --pda, --iss, --aud, …). The CSR's self-signature must verify; its \
            key must be P-256, P-384, Ed25519 or RSA ≥ 2048. The certificate's identity comes only \
            from the token: CN = sub, URI SAN spiffe://<trust domain>/<issuer>/<sub>. It is recorded \
            in the ledger before it is printed (leaf, then intermediate).

            Exit status: 0 issued, 1 the token is invalid or the policy refuses it, 2 usage, CSR or key error.

            Examples:
              tokentool ca issue --dir ca --csr device.csr --key idp.pub --iss https://idp.example/ token.jwt > device.pem
              tokentool ca issue --dir ca --csr device.csr --pda --validity 3600 hat-token.jwt
            """)

    @Option(help: "CA directory made by tokentool ca init.")
    var dir: String

    @Option(help: "The CSR file (PEM or DER).")
    var csr: String

    @Option(help: "Shorter certificate validity in seconds.")
    var validity: Double?

    @Flag(help: "Print a JSON object (serial, notAfter, SPIFFE ID, chain) instead of PEM.")
    var json = false

    @Argument(help: "The token, a file holding it, or - for standard input.")
    var token: String?

    @OptionGroup(title: "Token verification") var options: VerificationOptions

    @OptionGroup(title: "CA key passphrase") var passphrase: PassphraseOptions

    func run() async throws {
        let text = try Input.token(token)
        try await CADirectory(path: dir).withCA(passphrase: passphrase, allowInsecure: options.allowInsecureKeyFile, issuing: true) { ca in
            try await issue(text, with: ca)
        }
    }

    func issue(_ text: String, with ca: PeerCertificateAuthority) async throws {
        let request = try Input.read(csr)
        let (outcome, _) = try await options.verify(text)
        let verified: VerifiedToken
        switch outcome {
        case .success(let token): verified = token
        case .failure(let error): throw CLIExit(code: 1, message: "INVALID \(error.code.rawValue): \(error.message)")
        }
        let issued: IssuedCertificate
        do { issued = try await ca.issue(token: verified, csr: request, validity: validity) } catch {
            let status: Int32 = [.policyViolation, .tokenExpired, .tokenReused].contains(error.code) ? 1 : 2
            throw CLIExit(code: status, message: "REFUSED \(error.code.rawValue): \(error.message)")
        }
        if json {
            Output.json(.object([
                "serial": .string(issued.serial), "spiffeID": .string(issued.identity.spiffeID),
                "notBefore": .string(ISO8601DateFormatter().string(from: issued.notBefore)),
                "notAfter": .string(ISO8601DateFormatter().string(from: issued.notAfter)), "chain": .string(issued.chainPEM),
            ]))
        } else {
            print(issued.chainPEM, terminator: "")
        }
        printError("issued \(issued.serial) to \(issued.identity.spiffeID), valid until \(ISO8601DateFormatter().string(from: issued.notAfter))")
    }
}

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
        let entry = try await CADirectory(path: dir).withCA(passphrase: passphrase, store: store.store, issuing: false) { ca in
            try await ca.revoke(serial: serial, reason: reason ?? .unspecified)
        }
        if case .revoked(let at, let reason) = entry.status {
            print("revoked \(entry.serial) (\(entry.subject)) at \(ISO8601DateFormatter().string(from: at)): \(reason.name)")
        }
    }
}

struct CAList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List issued certificates from the ledger, newest first.",
        discussion: """
            Examples:
              tokentool ca list --dir ca
              tokentool ca list --dir ca --subject user-42
              tokentool ca list --dir ca --json
              tokentool ca list --dir tokentool-state/ca --store sqlite:tokentool-state/ledger.sqlite
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

    func run() async throws {
        let entries = try await CADirectory(path: dir).withCA(passphrase: passphrase, store: store.store, issuing: false) { ca in
            if let subject { try await ca.ledger.entries(subject: subject) } else { try await ca.ledger.recent(limit: limit) }
        }
        let formatter = ISO8601DateFormatter()
        if json {
            Output.json(.array(entries.prefix(limit).map { entry in
                var object: [String: JSONValue] = [
                    "serial": .string(entry.serial), "subject": .string(entry.subject), "commonName": .string(entry.commonName),
                    "tokenIssuer": .string(entry.tokenIssuer), "tokenSubject": .string(entry.tokenSubject),
                    "keyFingerprint": .string(entry.keyFingerprint), "notBefore": .string(formatter.string(from: entry.notBefore)),
                    "notAfter": .string(formatter.string(from: entry.notAfter)), "status": .string("valid"),
                ]
                if let id = entry.tokenID { object["tokenID"] = .string(id) }
                if case .revoked(let at, let reason) = entry.status {
                    object["status"] = .string("revoked")
                    object["revokedAt"] = .string(formatter.string(from: at))
                    object["reason"] = .string(reason.name)
                }
                return .object(object)
            }))
            return
        }
        for entry in entries.prefix(limit) {
            let status: String
            switch entry.status {
            case .valid: status = entry.notAfter < Date() ? "expired" : "valid"
            case .revoked(_, let reason): status = "revoked(\(reason.name))"
            }
            print("\(entry.serial)  \(status)  until \(formatter.string(from: entry.notAfter))  \(entry.subject)")
        }
    }
}

struct CACRL: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "crl",
        abstract: "Print a signed CRL of every revoked, unexpired certificate.",
        discussion: """
            Examples:
              tokentool ca crl --dir ca > crl.pem
              tokentool ca crl --dir ca --der --validity 3600 > crl.der
              tokentool ca crl --dir /etc/tokentool/ca --store postgres://tokentool:secret@db:5432/tokentool
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

    func run() async throws {
        let crl = try await CADirectory(path: dir).withCA(passphrase: passphrase, store: store.store, issuing: false) { ca in
            try await ca.crl(validity: validity)
        }
        if der {
            FileHandle.standardOutput.write(Data(crl))
        } else {
            print(PEMText.encode(crl, label: "X509 CRL"), terminator: "")
        }
    }
}
