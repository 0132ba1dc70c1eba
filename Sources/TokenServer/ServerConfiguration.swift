public import Foundation
import NIOCore
public import PeerCA
import TokenKit

/// The service's configuration: one JSON file (`tokentool serve --config FILE`), or the embedded
/// defaults (`tokentool serve`). Every problem found at start names the key it is about.
///
/// ```json
/// {
///   "listen": { "host": "127.0.0.1", "port": 8080 },
///   "tls": { "certificate": "server.pem", "key": "server.key" },
///   "state": "/var/lib/tokentool",
///   "ca": { "directory": "/var/lib/tokentool/ca", "appID": "my-app", "passphraseEnv": "CA_PASS" },
///   "store": "sqlite:/var/lib/tokentool/ledger.sqlite",
///   "limits": { "maxBodyBytes": 65536, "requestTimeoutSeconds": 10, "maxExpirationSeconds": 86400 },
///   "providers": {
///     "hat": { "type": "pda", "allowedDomains": [".hubat.net"], "applications": ["my-app"] },
///     "auth0": { "type": "oidc", "issuer": "https://tenant.eu.auth0.com/", "audiences": ["my-api"] },
///     "partner": { "type": "jwks", "url": "https://idp.partner.example/jwks.json", "issuers": ["https://idp.partner.example/"] },
///     "backend": { "type": "hs256", "secretFile": "/etc/tokentool/backend.secret", "issuers": ["backend"] },
///     "legacy": { "type": "pem", "keyFile": "/etc/tokentool/legacy.pub", "issuers": ["legacy"] }
///   }
/// }
/// ```
public struct ServerConfiguration: Sendable, Codable, Hashable {
    public struct Listen: Sendable, Codable, Hashable {
        public var host: String = "127.0.0.1"
        public var port: Int = 8080
        public init(host: String = "127.0.0.1", port: Int = 8080) {
            self.host = host
            self.port = port
        }
        enum CodingKeys: String, CodingKey { case host, port }
        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            host = try container.decodeIfPresent(String.self, forKey: .host) ?? "127.0.0.1"
            port = try container.decodeIfPresent(Int.self, forKey: .port) ?? 8080
        }
    }

    public struct TLS: Sendable, Codable, Hashable {
        /// PEM certificate chain of the server.
        public var certificate: String
        /// PEM private key of the server (mode 0600).
        public var key: String

        public init(certificate: String, key: String) {
            self.certificate = certificate
            self.key = key
        }
    }

    public struct CA: Sendable, Codable, Hashable {
        /// The CA directory (`tokentool ca init` layout). Created with a development CA on first
        /// start when it does not exist and `createIfMissing` is true.
        public var directory: String
        /// App ID the trust domain derives from; requests naming another `appID` are refused.
        public var appID: String?
        /// Environment variable holding the CA key passphrase, if the keys are encrypted.
        public var passphraseEnv: String?
        /// Create a CA on first start if the directory holds none. Default true.
        public var createIfMissing: Bool? = true
        /// How often one token (`iss` + `jti`) may become a certificate: `unlimited` (default) or `once`.
        public var tokenReuse: IssuancePolicy.TokenReuse?
    }

    public struct Limits: Sendable, Codable, Hashable {
        /// Largest accepted request body. Default 64 KiB.
        public var maxBodyBytes: Int?
        /// Time allowed for one request (every POST, and `GET /v1/crl`): past it the answer is 503
        /// `timeout` (for OCSP, a `tryLater` OCSP response), and a certificate request still waiting
        /// for the ledger's next transaction is withdrawn (nothing recorded, its token unused). Default 10 s.
        public var requestTimeoutSeconds: Double?
        /// Cap on the webhook's `expirationSeconds` and on certificate validity. Default 24 h.
        public var maxExpirationSeconds: Int?
        /// Most connections `tokentool serve` keeps open at once: past it, it stops accepting until
        /// one closes (new ones wait in the kernel's accept queue). Default: the process's limit on
        /// open files less 128, kept for the ledger, key fetches and logs (at least 16).
        public var maxConnections: Int?

        /// Nil for a limit: its default (the configuration's `maxBodyBytes`, `requestTimeout`,
        /// `maxExpirationSeconds`, `maxConnections` state them once).
        public init(maxBodyBytes: Int? = nil, requestTimeoutSeconds: Double? = nil, maxExpirationSeconds: Int? = nil, maxConnections: Int? = nil) {
            self.maxBodyBytes = maxBodyBytes
            self.requestTimeoutSeconds = requestTimeoutSeconds
            self.maxExpirationSeconds = maxExpirationSeconds
            self.maxConnections = maxConnections
        }
    }

    /// One side (read or write) of Ditto's permissions: everything, or per collection the Ditto
    /// queries that select what may be touched ("Each value is an array of Ditto queries"). In
    /// configuration a single query string is read as a one-query array.
    public struct Permission: Sendable, Codable, Hashable {
        public var everything: Bool
        public var queriesByCollection: [String: [String]]
        public init(everything: Bool, queriesByCollection: [String: [String]] = [:]) {
            self.everything = everything
            self.queriesByCollection = queriesByCollection
        }

        enum CodingKeys: String, CodingKey { case everything, queriesByCollection }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            everything = try container.decode(Bool.self, forKey: .everything)
            let byCollection = try container.decodeIfPresent([String: OneOrMany].self, forKey: .queriesByCollection) ?? [:]
            queriesByCollection = byCollection.mapValues(\.values)
        }

        /// A query string or an array of them.
        struct OneOrMany: Decodable {
            let values: [String]
            init(from decoder: any Decoder) throws {
                let container = try decoder.singleValueContainer()
                if let one = try? container.decode(String.self) { values = [one] } else {
                    do { values = try container.decode([String].self) } catch {
                        throw DecodingError.dataCorrupted(.init(
                            codingPath: decoder.codingPath, debugDescription: "must be an array of Ditto query strings (or one query string)"))
                    }
                }
            }
        }
    }

    /// Ditto's permissions: read, write, and whether remote queries (`remoteQuery`) are allowed;
    /// `remoteQuery` is answered only when it is stated.
    public struct Permissions: Sendable, Codable, Hashable {
        public var read: Permission
        public var write: Permission
        public var remoteQuery: Bool?
        public init(read: Permission, write: Permission, remoteQuery: Bool? = nil) {
            self.read = read
            self.write = write
            self.remoteQuery = remoteQuery
        }
        /// Read and write everything.
        public static let everything = Permissions(read: Permission(everything: true), write: Permission(everything: true))
    }

    /// How a provider's keys are had.
    public enum ProviderKind: String, Sendable, Codable, Hashable, CaseIterable {
        /// HAT PDA application tokens: the key from `https://<iss>/publickey`.
        case pda
        /// A JWK Set URL.
        case jwks
        /// OpenID Connect discovery from an issuer URL.
        case oidc
        /// An HMAC secret in a file.
        case hs256
        /// A public key file (PEM, JWK or JWKS).
        case pem

        public init(from decoder: any Decoder) throws {
            let text = try decoder.singleValueContainer().decode(String.self)
            guard let kind = ProviderKind(rawValue: text) else {
                let names = ProviderKind.allCases.map(\.rawValue)
                throw DecodingError.dataCorrupted(.init(
                    codingPath: decoder.codingPath,
                    debugDescription: "must be \(names.dropLast().joined(separator: ", ")) or \(names.last ?? "") (not \"\(text.prefix(40))\")"))
            }
            self = kind
        }
    }

    /// One identity provider the webhook accepts tokens from, by name.
    public struct Provider: Sendable, Codable, Hashable {
        /// How its keys are had: `pda`, `jwks`, `oidc`, `hs256` or `pem`.
        public var type: ProviderKind
        /// pda: accepted DNS suffixes (default `.hubat.net`, `.hubofallthings.net`).
        public var allowedDomains: [String]?
        /// pda: accepted `application` values.
        public var applications: [String]?
        /// jwks: the JWK Set URL.
        public var url: String?
        /// oidc: the issuer URL (discovery).
        public var issuer: String?
        /// hs256: file holding the secret's bytes (mode 0600).
        public var secretFile: String?
        /// pem: public key file (PEM, JWK or JWKS).
        public var keyFile: String?
        /// Accepted `iss` values (required for jwks, hs256 and pem).
        public var issuers: [String]?
        /// Accepted audiences (the token's `aud` must contain one).
        public var audiences: [String]?
        /// Permissions granted to this provider's users. Required unless `permissionsClaim` or
        /// `dittoRules` is given.
        public var permissions: Permissions?
        /// A claim holding Ditto permissions (`{"read": {...}, "write": {...}}`) that replaces them;
        /// a claim not in that shape is a refusal (`invalid_permissions`), never a default.
        public var permissionsClaim: String?
        /// Trust HTTPS servers whose certificates chain to this PEM file (private PKI).
        public var caFile: String?
        /// pda, jwks, oidc: connect to another address for a host name (`{"alice.hubat.net":
        /// "10.0.0.7"}`), an IP address; TLS still checks the server's certificate against the
        /// name. For split-horizon networks, and for tests against a loopback PDA or issuer.
        public var hostOverrides: [String: String]?
        /// pda: the port of the PDAs' `/publickey` (default 443).
        public var pdaPort: Int?
        /// How the account UID is made: `claim` (default `sub`; `iss`, the PDA's address, for a
        /// `pda` provider) after `prefix` (default `<provider name>:`, so two providers' users
        /// with one `sub` stay two accounts).
        public var account: Account?
        /// Claims copied into the identity's profile. Default `email`, `name`, `picture`.
        public var profileClaims: [String]?
        /// What the sign-in must show: factors (`amr`), context (`acr`), recency.
        public var factors: Factors?
        /// A file in the format of Ditto's sample webhook's `config.json` (permissions by
        /// `path.to.claim.value`, `userIDField`, `clientInfo`, `identityServiceMetadata`,
        /// `defaultExpirationSeconds`), which then decides the permissions and `userID` (the
        /// account UID, without a prefix unless `account.prefix` says one).
        public var dittoRules: String?
    }

    /// The authentication webhook's settings.
    public struct Webhook: Sendable, Codable, Hashable {
        /// Ditto's `ditto-signature` header: checked before anything else is done.
        public var signature: Signature?
        public init(signature: Signature? = nil) { self.signature = signature }
    }

    /// How `ditto-signature` (`t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`) is checked.
    public struct Signature: Sendable, Codable, Hashable {
        /// Files (mode 0600) each holding a shared secret as Ditto shows it (base64); more than one
        /// while a secret is rotated: a signature by any of them is accepted.
        public var secretFiles: [String]
        /// How far the header's time may be from ours. Default 300 s.
        public var toleranceSeconds: Double?
        /// Whether a request without the header is refused. Default true.
        public var required: Bool?
        public init(secretFiles: [String], toleranceSeconds: Double? = nil, required: Bool? = nil) {
            self.secretFiles = secretFiles
            self.toleranceSeconds = toleranceSeconds
            self.required = required
        }
    }

    /// A provider's account UID rule.
    public struct Account: Sendable, Codable, Hashable {
        /// The claim holding the user's ID at the provider. Default `sub` (`iss` for `pda`).
        public var claim: String?
        /// Put before it. Default `<provider name>:`; `""` for none.
        public var prefix: String?
    }

    /// A provider's factor policy (each refusal has its own code: `factor_required`,
    /// `acr_not_accepted`, `sign_in_too_old`).
    public struct Factors: Sendable, Codable, Hashable {
        /// `amr` values every sign-in must show, e.g. `["mfa"]`.
        public var require: [String]?
        /// Accepted `acr` values (any when absent).
        public var acr: [String]?
        /// The latest sign-in (`auth_time`, else `iat`) at most this many seconds ago.
        public var maxSignInAgeSeconds: Double?
    }

    /// Sessions: how often the ended-sessions list (logouts, revocations by account) is reloaded
    /// from the ledger, so an end made through another instance is seen.
    public struct Sessions: Sendable, Codable, Hashable {
        /// Seconds between reloads. Default 1.
        public var refreshSeconds: Double?
        /// How long a session may be renewed without a new sign-in, counted from the original
        /// sign-in (`auth_time`, else `iat`). Default 7 days.
        public var maxSessionAgeSeconds: Double?
    }

    /// The administrator's credential for `POST /v1/admin/revoke`.
    public struct Admin: Sendable, Codable, Hashable {
        /// A file (mode 0600) whose content, less surrounding whitespace, is the bearer secret
        /// (at least 16 bytes).
        public var tokenFile: String
    }

    /// The service's own token issuer (token exchange, RFC 8693): it signs tokens for an
    /// allow-list of audiences and publishes its keys.
    public struct Issuer: Sendable, Codable, Hashable {
        /// The `iss` of its tokens and the base of its discovery document. Default: the address
        /// the service listens on (`http(s)://host:port`).
        public var url: String?
        /// The audiences it will sign for; a request for any other is refused (`invalid_target`).
        public var audiences: [String]
        /// Longest lifetime of a token, never past the subject token's `exp`. Default 300 s.
        public var lifetimeSeconds: Double?
        /// The key directory every instance reads (see `IssuerKeyRing`). Default `<state>/issuer`.
        public var keyDirectory: String?
        /// How often the key directory is re-read (a rotation made elsewhere). Default 5 s.
        public var reloadSeconds: Double?
    }

    public var listen: Listen = Listen()
    public var tls: TLS?
    /// Directory for state (dev CA, ledger) when `ca`/`store` are not given. Default `tokentool-state`.
    public var state: String?
    public var ca: CA?
    /// `sqlite:PATH` (default `<state>/ledger.sqlite`) or `postgres://user:pass@host:port/db`.
    public var store: String?
    public var limits: Limits?
    public var providers: [String: Provider] = [:]
    public var sessions: Sessions?
    public var admin: Admin?
    /// OpenWeb single sign-on (`POST /v1/sso/openweb`); the endpoint answers 404 without it.
    public var openweb: OpenWeb?
    public var issuer: Issuer?
    /// The authentication webhook's settings (its signature check).
    public var webhook: Webhook?

    public init() {}

    enum CodingKeys: String, CodingKey { case listen, tls, state, ca, store, limits, providers, sessions, admin, issuer, openweb, webhook }

    /// Keys that are left out take their defaults.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        listen = try container.decodeIfPresent(Listen.self, forKey: .listen) ?? Listen()
        tls = try container.decodeIfPresent(TLS.self, forKey: .tls)
        state = try container.decodeIfPresent(String.self, forKey: .state)
        ca = try container.decodeIfPresent(CA.self, forKey: .ca)
        store = try container.decodeIfPresent(String.self, forKey: .store)
        limits = try container.decodeIfPresent(Limits.self, forKey: .limits)
        providers = try container.decodeIfPresent([String: Provider].self, forKey: .providers) ?? [:]
        sessions = try container.decodeIfPresent(Sessions.self, forKey: .sessions)
        admin = try container.decodeIfPresent(Admin.self, forKey: .admin)
        openweb = try container.decodeIfPresent(OpenWeb.self, forKey: .openweb)
        issuer = try container.decodeIfPresent(Issuer.self, forKey: .issuer)
        webhook = try container.decodeIfPresent(Webhook.self, forKey: .webhook)
    }

    /// Parses and validates a configuration file's JSON.
    public static func parse(_ data: Data) throws(ConfigurationError) -> ServerConfiguration {
        let configuration: ServerConfiguration
        do {
            configuration = try JSONDecoder().decode(ServerConfiguration.self, from: data)
        } catch let DecodingError.keyNotFound(key, context) {
            throw ConfigurationError(key: path(context.codingPath + [key]), "is required")
        } catch let DecodingError.typeMismatch(type, context) {
            throw ConfigurationError(key: path(context.codingPath), "must be a \(type)")
        } catch let DecodingError.valueNotFound(type, context) {
            throw ConfigurationError(key: path(context.codingPath), "must be a \(type), not null")
        } catch let DecodingError.dataCorrupted(context) where context.codingPath.isEmpty {
            throw ConfigurationError(key: "", "is not valid JSON (\(context.debugDescription))")
        } catch let DecodingError.dataCorrupted(context) {
            throw ConfigurationError(key: path(context.codingPath), context.debugDescription)
        } catch {
            throw ConfigurationError(key: "", "cannot be read: \(error)")
        }
        try configuration.validate()
        return configuration
    }

    static func path(_ keys: [any CodingKey]) -> String {
        keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".").replacingOccurrences(of: ".[", with: "[")
    }

    /// Checks values the JSON types do not: ports, provider types and their required keys, limits.
    public func validate() throws(ConfigurationError) {
        guard (0...65535).contains(listen.port) else { throw ConfigurationError(key: "listen.port", "must be 0-65535") }
        guard !listen.host.isEmpty else { throw ConfigurationError(key: "listen.host", "must not be empty") }
        if let store {
            do throws(PeerCAError) { _ = try LedgerLocation(store) } catch {
                throw ConfigurationError(key: "store", "must be sqlite:PATH or postgres://user:password@host:port/database")
            }
        }
        if let maxBody = limits?.maxBodyBytes, !(1024...(16 << 20)).contains(maxBody) {
            throw ConfigurationError(key: "limits.maxBodyBytes", "must be 1024 to 16777216")
        }
        if let timeout = limits?.requestTimeoutSeconds, !(timeout > 0 && timeout <= 300) {
            throw ConfigurationError(key: "limits.requestTimeoutSeconds", "must be more than 0 and at most 300")
        }
        if let connections = limits?.maxConnections, !(1...1_000_000).contains(connections) {
            throw ConfigurationError(key: "limits.maxConnections", "must be 1 to 1000000")
        }
        if let maxExpiration = limits?.maxExpirationSeconds, !(60...(30 * 86_400)).contains(maxExpiration) {
            throw ConfigurationError(key: "limits.maxExpirationSeconds", "must be 60 to 2592000")
        }
        if let refresh = sessions?.refreshSeconds, !(refresh >= 0.05 && refresh <= 300) {
            throw ConfigurationError(key: "sessions.refreshSeconds", "must be 0.05 to 300")
        }
        if let age = sessions?.maxSessionAgeSeconds, !(age >= 60 && age <= 366 * 86_400) {
            throw ConfigurationError(key: "sessions.maxSessionAgeSeconds", "must be 60 to 31622400")
        }
        if let issuer {
            if let url = issuer.url, !(url.hasPrefix("https://") || url.hasPrefix("http://")) || URL(string: url)?.host == nil {
                throw ConfigurationError(key: "issuer.url", "must be an http(s) URL")
            }
            if issuer.audiences.isEmpty || issuer.audiences.contains(where: \.isEmpty) {
                throw ConfigurationError(key: "issuer.audiences", "must name at least one audience, none empty")
            }
            if let lifetime = issuer.lifetimeSeconds, !(lifetime >= 1 && lifetime <= 86_400) {
                throw ConfigurationError(key: "issuer.lifetimeSeconds", "must be 1 to 86400")
            }
            if let reload = issuer.reloadSeconds, !(reload >= 0.05 && reload <= 3600) {
                throw ConfigurationError(key: "issuer.reloadSeconds", "must be 0.05 to 3600")
            }
        }
        guard !providers.isEmpty else { throw ConfigurationError(key: "providers", "must name at least one provider") }
        for (name, provider) in providers {
            let key = "providers.\(name)"
            guard !name.isEmpty, name.utf8.count <= 64 else { throw ConfigurationError(key: key, "provider names have 1 to 64 characters") }
            func require(_ value: Any?, _ field: String) throws(ConfigurationError) {
                if value == nil { throw ConfigurationError(key: "\(key).\(field)", "is required for type \(provider.type.rawValue)") }
            }
            switch provider.type {
            case .pda: break
            case .jwks:
                try require(provider.url, "url")
                try require(provider.issuers, "issuers")
            case .oidc: try require(provider.issuer, "issuer")
            case .hs256:
                try require(provider.secretFile, "secretFile")
                try require(provider.issuers, "issuers")
            case .pem:
                try require(provider.keyFile, "keyFile")
                try require(provider.issuers, "issuers")
            }
            // A setting the type does not use is refused rather than ignored: a pda provider given
            // "issuers" or "audiences" accepted tokens from any allowed PDA, with any aud.
            let unused: [(String, Bool)] = [
                ("allowedDomains", provider.allowedDomains != nil && provider.type != .pda),
                ("applications", provider.applications != nil && provider.type != .pda),
                ("url", provider.url != nil && provider.type != .jwks),
                ("issuer", provider.issuer != nil && provider.type != .oidc),
                ("secretFile", provider.secretFile != nil && provider.type != .hs256),
                ("keyFile", provider.keyFile != nil && provider.type != .pem),
                ("issuers", provider.issuers != nil && provider.type == .pda),
                ("audiences", provider.audiences != nil && provider.type == .pda),
                ("caFile", provider.caFile != nil && (provider.type == .hs256 || provider.type == .pem)),
                ("hostOverrides", provider.hostOverrides != nil && (provider.type == .hs256 || provider.type == .pem)),
                ("pdaPort", provider.pdaPort != nil && provider.type != .pda),
            ]
            if let (field, _) = unused.first(where: \.1) {
                let hint = provider.type == .pda && (field == "issuers" || field == "audiences") ? " (a pda provider accepts PDAs by allowedDomains and applications)" : ""
                throw ConfigurationError(key: "\(key).\(field)", "is not used by type \(provider.type.rawValue)\(hint)")
            }
            if let issuers = provider.issuers, issuers.isEmpty { throw ConfigurationError(key: "\(key).issuers", "must not be empty") }
            if let port = provider.pdaPort, !(1...65535).contains(port) { throw ConfigurationError(key: "\(key).pdaPort", "must be 1 to 65535") }
            for (host, address) in provider.hostOverrides ?? [:] where host.isEmpty || (try? SocketAddress(ipAddress: address, port: 0)) == nil {
                throw ConfigurationError(key: "\(key).hostOverrides", "maps a host name to an IPv4 or IPv6 address (not \"\(address.prefix(64))\" for \"\(host.prefix(64))\")")
            }
            if provider.dittoRules != nil {
                if provider.permissions != nil { throw ConfigurationError(key: "\(key).permissions", "is not used with dittoRules (its rules grant the permissions)") }
                if provider.permissionsClaim != nil {
                    throw ConfigurationError(key: "\(key).permissionsClaim", "is not used with dittoRules (its rules grant the permissions)")
                }
                if provider.account?.claim != nil {
                    throw ConfigurationError(key: "\(key).account.claim", "is not used with dittoRules (its userIDField names the account's claim)")
                }
            } else if provider.permissions == nil, provider.permissionsClaim == nil {
                throw ConfigurationError(
                    key: "\(key).permissions",
                    "must be stated: {\"read\": {\"everything\": …, \"queriesByCollection\": {collection: [query]}}, \"write\": {…}} (Ditto's shape), or a permissionsClaim, or dittoRules")
            }
            if let age = provider.factors?.maxSignInAgeSeconds, !(age > 0) {
                throw ConfigurationError(key: "\(key).factors.maxSignInAgeSeconds", "must be more than 0")
            }
            if let claim = provider.account?.claim, claim.isEmpty { throw ConfigurationError(key: "\(key).account.claim", "must not be empty") }
        }
        if let signature = webhook?.signature {
            if signature.secretFiles.isEmpty { throw ConfigurationError(key: "webhook.signature.secretFiles", "must name at least one file") }
            if let tolerance = signature.toleranceSeconds, !(tolerance >= 1 && tolerance <= 3600) {
                throw ConfigurationError(key: "webhook.signature.toleranceSeconds", "must be 1 to 3600")
            }
        }
        try validateOpenWeb()
    }

    var maxBodyBytes: Int { limits?.maxBodyBytes ?? 64 * 1024 }
    var sessionRefresh: Duration { .milliseconds(Int64((sessions?.refreshSeconds ?? 1) * 1000)) }
    var maxSessionAge: Double { sessions?.maxSessionAgeSeconds ?? 7 * 86_400 }
    var issuerKeyDirectory: String { issuer?.keyDirectory ?? (stateDirectory as NSString).appendingPathComponent("issuer") }
    var requestTimeout: Double { limits?.requestTimeoutSeconds ?? 10 }
    /// `limits.maxConnections`, never past the open-file limit less 128 (``defaultMaxConnections``,
    /// also the default): connections must not take the descriptors the ledger, key fetches and
    /// logs need, and out of descriptors SwiftNIO's listening socket (under Hummingbird's server)
    /// wakes for every failed accept — most of a core until connections close.
    var maxConnections: Int { min(limits?.maxConnections ?? Self.defaultMaxConnections, Self.defaultMaxConnections) }
    /// Whether `limits.maxConnections` asks for more than the open-file limit allows (it is lowered).
    var maxConnectionsLowered: Bool { (limits?.maxConnections ?? 0) > Self.defaultMaxConnections }

    /// The open-file limit (`RLIMIT_NOFILE`, soft) less 128, at least 16; 10,000 when it cannot be read.
    static var defaultMaxConnections: Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 10_000 }
        // RLIM_INFINITY is the largest value: clamped, then capped at a million.
        return max(16, min(Int(clamping: limit.rlim_cur) - 128, 1_000_000))
    }
    var maxExpirationSeconds: Int { limits?.maxExpirationSeconds ?? 86_400 }
    var stateDirectory: String { state ?? "tokentool-state" }
    var caDirectory: String { ca?.directory ?? (stateDirectory as NSString).appendingPathComponent("ca") }
    /// The ledger: `store`, else `<state>/ledger.sqlite`. (`validate()` has checked `store`.)
    var ledgerLocation: LedgerLocation {
        store.flatMap { try? LedgerLocation($0) } ?? .sqlite(path: (stateDirectory as NSString).appendingPathComponent("ledger.sqlite"))
    }
}

/// A configuration problem, naming the key it is about.
public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    /// The offending key, dotted (`providers.auth0.issuer`); empty for the whole file.
    public let key: String
    public let message: String
    public init(key: String, _ message: String) {
        self.key = key
        self.message = message
    }
    public var description: String { key.isEmpty ? "configuration: \(message)" : "configuration: \(key) \(message)" }

    /// ``SecureFile/checkPrivate(_:)`` for the secret or key file that configuration `key` names.
    static func checkPrivate(_ path: String, key: String) throws(ConfigurationError) {
        do throws(SecureFileError) { try SecureFile.checkPrivate(path) } catch {
            throw ConfigurationError(key: key, error.message)
        }
    }

    /// The bytes of the file `key` names, at most ``BoundedFile/defaultLimit``; an error names the
    /// key and says why the file cannot be read (never what it holds).
    static func read(_ path: String, key: String) throws(ConfigurationError) -> [UInt8] {
        do throws(BoundedFile.Failure) { return try BoundedFile.read(path) } catch { throw ConfigurationError(key: key, error.description) }
    }
}

extension ServerConfiguration {
    /// The embedded defaults `tokentool serve` runs on without a file: state in `state`, a
    /// development CA created there on first start, an SQLite ledger, 127.0.0.1:8080, and one
    /// provider, `dev`, that accepts HS256 tokens with `iss` `tokentool-dev` signed with a random
    /// secret kept in `<state>/dev-hs256.secret` (mode 0600, made on first start).
    ///
    /// A state directory that cannot be made or written is a ``ConfigurationError`` for `state`
    /// that says why.
    public static func embeddedDefaults(state: String = "tokentool-state", port: Int = 8080) throws(ConfigurationError) -> ServerConfiguration {
        do {
            try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            // Foundation's error says little on Linux ("(null)"); the system call says why.
            let reason = mkdir(state, 0o700) == 0 ? "it was made only on a second try" : String(cString: strerror(errno))
            throw ConfigurationError(key: "state", "\(state) cannot be created: \(reason)")
        }
        let secret = devSecretPath(state: state)
        if !FileManager.default.fileExists(atPath: secret) {
            var generator = SystemRandomNumberGenerator()
            do throws(SecureFileError) {
                try SecureFile.writeNew(secret, (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }, mode: 0o600)
            } catch {
                throw ConfigurationError(key: "state", error.message)
            }
        }
        var configuration = ServerConfiguration()
        configuration.state = state
        configuration.listen = Listen(host: "127.0.0.1", port: port)
        configuration.ca = CA(directory: (state as NSString).appendingPathComponent("ca"), appID: "dev", passphraseEnv: nil, createIfMissing: true)
        configuration.providers = [
            "dev": Provider(type: .hs256, secretFile: secret, issuers: [devIssuer], permissions: .everything),
        ]
        return configuration
    }

    /// The issuer of the development provider's tokens.
    public static let devIssuer = "tokentool-dev"

    /// Where the development provider's secret lives.
    public static func devSecretPath(state: String) -> String { (state as NSString).appendingPathComponent("dev-hs256.secret") }
}

extension ServerConfiguration.Provider {
    init(
        type: ServerConfiguration.ProviderKind, secretFile: String? = nil, keyFile: String? = nil, url: String? = nil, issuer: String? = nil,
        issuers: [String]? = nil, permissions: ServerConfiguration.Permissions? = nil
    ) {
        self.type = type
        self.permissions = permissions
        self.secretFile = secretFile
        self.keyFile = keyFile
        self.url = url
        self.issuer = issuer
        self.issuers = issuers
    }
}
