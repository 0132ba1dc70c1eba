import Foundation
import TokenKit

/// A CA as it is deployed: one directory with PeerCA's ``CAFiles`` layout, its settings
/// (`ca.json`, ``CASettings``) and, unless the settings name another store, its ledger
/// (`ledger.sqlite`).
///
/// `tokentool ca init` and `tokentool serve` both make CAs through this type, so every `ca`
/// command works on a CA either of them made.
///
/// ```swift
/// let deployment = CADeployment(directory: "state/ca")
/// if !deployment.exists {
///     try deployment.create(
///         try CertificateAuthority.create(name: "My devices"),
///         settings: CASettings(appID: "my-app"), passphrase: nil)
/// }
/// let settings = try deployment.settings() ?? CASettings(appID: "my-app")
/// let policy = try settings.issuancePolicy()
/// let ledger = try deployment.ledgerLocation(settings: settings)  // sqlite:state/ca/ledger.sqlite
/// ```
public struct CADeployment: Sendable {
    /// The CA's key and certificate files.
    public let files: CAFiles

    public init(directory: String) { files = CAFiles(directory: directory) }

    /// The directory.
    public var directory: String { files.directory }
    /// `ca.json`: the settings.
    public var settingsPath: String { files.path("ca.json") }
    /// `ledger.sqlite`: the ledger when the settings name no other store.
    public var defaultLedgerPath: String { files.path("ledger.sqlite") }

    /// Whether the directory holds a CA (its issuing key).
    public var exists: Bool { files.exists }

    /// The settings, or nil when the directory has no `ca.json`.
    public func settings() throws(PeerCAError) -> CASettings? {
        // Only a missing file means "no settings": one that cannot be read must not quietly turn
        // a CA whose settings name PostgreSQL into one writing a new SQLite ledger.
        let bytes: [UInt8]?
        do throws(BoundedFile.Failure) { bytes = try BoundedFile.readIfPresent(settingsPath) } catch { throw PeerCAError(.io, error.description) }
        guard let bytes else { return nil }
        return try CASettings.decode(bytes, from: settingsPath)
    }

    /// Writes `ca.json` (mode 0644, or 0600 when its store URL holds a password); refuses to
    /// replace an existing one.
    public func writeSettings(_ settings: CASettings) throws(PeerCAError) {
        let file = try settingsFile(settings)
        try caFile { () throws(SecureFileError) in try SecureFile.writeNew(file.path, file.contents, mode: file.mode) }
    }

    /// `ca.json` for `settings`: mode 0644, or 0600 when its store URL holds a password.
    func settingsFile(_ settings: CASettings) throws(PeerCAError) -> SecureFile.NewFile {
        SecureFile.NewFile(path: settingsPath, contents: try settings.encoded(), mode: settings.store?.holdsPassword == true ? 0o600 : 0o644)
    }

    /// Creates the CA: keys and certificates (``CAFiles/create(_:passphrase:)``), then `ca.json`.
    /// Refuses before writing anything if any of those files exists or the settings cannot be
    /// used or written down; all or nothing after that (a file that cannot be written removes
    /// those written before it).
    public func create(_ material: CertificateAuthority.Material, settings: CASettings, passphrase: String?) throws(PeerCAError) {
        _ = try settings.issuancePolicy()  // a trust domain that cannot be used is refused before any file is written
        try files.create(material, passphrase: passphrase, then: [try settingsFile(settings)])
    }

    /// Where the ledger is: `override` when given (an operator's `--store`), else the settings'
    /// store, else `ledger.sqlite` in the directory.
    public func ledgerLocation(settings: CASettings?, override: LedgerLocation? = nil) -> LedgerLocation {
        override ?? settings?.store ?? .sqlite(path: defaultLedgerPath)
    }
}

/// A CA's settings, kept in its directory as `ca.json`: what the trust domain derives from, the
/// provider recorded in identities, the longest certificate validity, token reuse, and which
/// ledger records its certificates. Each default is stated here once.
///
/// ```json
/// {"appID": "my-app", "maximumValidity": 86400, "provider": "token", "tokenReuse": "unlimited",
///  "store": "sqlite:/var/lib/tokentool/ledger.sqlite"}
/// ```
public struct CASettings: Sendable, Hashable, Codable {
    /// The app ID the trust domain derives from (lower-cased).
    public var appID: String
    /// Appended to the app ID (after a dot) to make the trust domain.
    public var trustDomainSuffix: String?
    /// The provider name recorded in identities.
    public var provider: String
    /// Longest certificate validity, in seconds.
    public var maximumValidity: Double
    /// How often one token (`iss` + `jti`) may become a certificate.
    public var tokenReuse: IssuancePolicy.TokenReuse
    /// The ledger, when it is not `ledger.sqlite` in the CA directory (a server's store).
    public var store: LedgerLocation?

    /// The provider name recorded when none is given.
    public static let defaultProvider = "token"
    /// The longest validity when none is given: 24 hours.
    public static let defaultMaximumValidity: Double = 86_400
    /// The shortest longest validity a CA may have: 60 seconds.
    public static let minimumMaximumValidity: Double = 60

    public init(
        appID: String, trustDomainSuffix: String? = nil, provider: String = CASettings.defaultProvider,
        maximumValidity: Double = CASettings.defaultMaximumValidity, tokenReuse: IssuancePolicy.TokenReuse = .unlimited,
        store: LedgerLocation? = nil
    ) {
        self.appID = appID
        self.trustDomainSuffix = trustDomainSuffix
        self.provider = provider
        self.maximumValidity = maximumValidity
        self.tokenReuse = tokenReuse
        self.store = store
    }

    enum CodingKeys: String, CodingKey { case appID, trustDomainSuffix, provider, maximumValidity, tokenReuse, store }

    /// Keys that are left out take their defaults; only `appID` is required.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        appID = try container.decode(String.self, forKey: .appID)
        trustDomainSuffix = try container.decodeIfPresent(String.self, forKey: .trustDomainSuffix)
        provider = try container.decodeIfPresent(String.self, forKey: .provider) ?? CASettings.defaultProvider
        maximumValidity = try container.decodeIfPresent(Double.self, forKey: .maximumValidity) ?? CASettings.defaultMaximumValidity
        tokenReuse = try container.decodeIfPresent(IssuancePolicy.TokenReuse.self, forKey: .tokenReuse) ?? .unlimited
        store = try container.decodeIfPresent(LedgerLocation.self, forKey: .store)
    }

    /// The issuance policy these settings describe.
    public func issuancePolicy() throws(PeerCAError) -> IssuancePolicy {
        guard maximumValidity.isFinite, maximumValidity >= CASettings.minimumMaximumValidity else {
            throw PeerCAError(.invalidSettings, "maximumValidity must be a number of seconds, at least \(Int(CASettings.minimumMaximumValidity))")
        }
        var policy = try IssuancePolicy(appID: appID, trustDomainSuffix: trustDomainSuffix, provider: provider)
        policy.maximumValidity = maximumValidity
        policy.defaultTokenReuse = tokenReuse
        return policy
    }

    /// `ca.json`'s bytes: sorted keys, pretty-printed, a final newline.
    public func encoded() throws(PeerCAError) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        do { return Array(try encoder.encode(self)) + [0x0a] } catch { throw PeerCAError(.invalidSettings, "cannot encode the CA settings") }
    }

    /// Parses `ca.json`'s bytes; `source` names the file in errors.
    public static func decode(_ bytes: [UInt8], from source: String) throws(PeerCAError) -> CASettings {
        do { return try JSONDecoder().decode(CASettings.self, from: Data(bytes)) } catch let DecodingError.keyNotFound(key, _) {
            throw PeerCAError(.invalidSettings, "\(source): \"\(key.stringValue)\" is required")
        } catch let DecodingError.dataCorrupted(context) {
            let key = context.codingPath.map(\.stringValue).joined(separator: ".")
            throw PeerCAError(.invalidSettings, "\(source): \(key.isEmpty ? "" : "\"\(key)\" ")\(context.debugDescription)")
        } catch let DecodingError.typeMismatch(type, context) {
            throw PeerCAError(.invalidSettings, "\(source): \"\(context.codingPath.map(\.stringValue).joined(separator: "."))\" must be a \(type)")
        } catch {
            throw PeerCAError(.invalidSettings, "\(source) is not valid CA settings")
        }
    }
}

extension IssuancePolicy.TokenReuse: Codable, CaseIterable {
    public static var allCases: [IssuancePolicy.TokenReuse] { [.unlimited, .oncePerTokenID] }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let value = IssuancePolicy.TokenReuse(rawValue: text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "must be once or unlimited, not \"\(text.prefix(40))\""))
        }
        self = value
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

/// Where a CA's ledger lives, written as a URL: `sqlite:PATH` (an ``SQLiteLedger`` file) or
/// `postgres://user:password@host:port/database[?sslmode=…]` (a PostgreSQL database that several
/// CA instances share; opened by the `PeerCAPostgres` module).
public enum LedgerLocation: Sendable, Hashable, Codable, CustomStringConvertible {
    case sqlite(path: String)
    case postgres(url: String)

    /// Parses a store URL; a typed error names the two accepted forms.
    public init(_ url: String) throws(PeerCAError) {
        if url.hasPrefix("sqlite:") {
            let path = String(url.dropFirst("sqlite:".count))
            guard !path.isEmpty else { throw PeerCAError(.invalidSettings, "sqlite: needs a path (sqlite:PATH)") }
            self = .sqlite(path: path)
        } else if url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") {
            self = .postgres(url: url)
        } else {
            throw PeerCAError(.invalidSettings, "a store is sqlite:PATH or postgres://user:password@host:port/database")
        }
    }

    /// The URL form (with any password).
    public var url: String {
        switch self {
        case .sqlite(let path): "sqlite:" + path
        case .postgres(let url): url
        }
    }

    /// Whether the URL carries a password (then files holding it are kept private).
    public var holdsPassword: Bool {
        guard case .postgres(let url) = self else { return false }
        return URLComponents(string: url)?.password != nil
    }

    /// The URL with any password replaced by `***`: safe for logs and messages.
    public var description: String {
        guard case .postgres(let url) = self, var components = URLComponents(string: url), components.password != nil else { return self.url }
        components.password = "***"
        return components.string ?? "postgres://***"
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        do { self = try LedgerLocation(text) } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.message))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(url)
    }
}
