import Foundation
import Logging
import PDAKeys
import PeerCA
import TokenKit

/// A configured identity provider, ready to verify tokens and say who they are for.
struct ProviderVerifier: Sendable {
    let name: String
    let verifier: TokenSourceVerifier
    /// The CA's issuance policy with this provider's identity rules: its name, the account UID
    /// (claim and prefix), the profile claims, the factor policy.
    let identityRules: IssuancePolicy
    let permissions: ServerConfiguration.Permissions?
    let permissionsClaim: String?

    /// What a verified token says, for the webhook and the CA.
    struct Outcome: Sendable {
        let token: VerifiedToken
        /// The token's payload, parsed once (for the identity and the permissions claim).
        let claims: [String: JSONValue]
        let identity: PeerIdentity
        /// Extra facts for the webhook's `userInfo` (a HAT token's PDA and application).
        var userInfo: [String: JSONValue]
    }

    /// Verifies a token and derives its identity. Throws `TokenError` for an invalid token,
    /// `KeySourceError` when keys cannot be had, `PeerCAError` when the identity rules or the
    /// factor policy refuse it.
    func verify(_ token: String, now: Date = Date()) async throws -> Outcome {
        let verified: TokenSourceVerifier.Verified
        do throws(RemoteVerificationError) { verified = try await verifier.verify(token) } catch { throw error.underlying }
        let claims = verified.token.payload
        let identity = try identityRules.identity(for: verified.token, payload: claims, now: now)
        var info: [String: JSONValue] = [:]
        if let hat = verified.hat {
            info["pda"] = .string(hat.pdaHost)
            if let application = hat.application { info["application"] = .string(application) }
            if let version = hat.applicationVersion { info["applicationVersion"] = .string(version) }
        }
        return Outcome(token: verified.token, claims: claims, identity: identity, userInfo: info)
    }

    /// The user's Ditto permissions: from the permissions claim when the provider names one and
    /// the token carries it (it must have Ditto's shape), else the configured ones.
    func permissions(_ claims: [String: JSONValue]) throws(ServiceRefusal) -> JSONValue {
        if let claim = permissionsClaim, let value = claims[claim] {
            return try DittoPermissions.validated(value, claim: claim)
        }
        guard let permissions else {
            throw ServiceRefusal("missing_permissions", "the token carries no \"\(permissionsClaim ?? "")\" claim, and the provider grants none")
        }
        return DittoPermissions.json(permissions)
    }
}

/// A refusal with its code, for what is not a TokenKit, PDAKeys or PeerCA error.
struct ServiceRefusal: Error {
    let code: String
    let message: String
    init(_ code: String, _ message: String) {
        self.code = code
        self.message = message
    }
}

/// Ditto's permissions shape: `{"read": P, "write": P}` with `P = {"everything": Bool,
/// "queriesByCollection": {collection: query string}}`.
enum DittoPermissions {
    static func json(_ permissions: ServerConfiguration.Permissions) -> JSONValue {
        func permission(_ p: ServerConfiguration.Permission) -> JSONValue {
            .object(["everything": .bool(p.everything), "queriesByCollection": .object(p.queriesByCollection.mapValues { .string($0) })])
        }
        return .object(["read": permission(permissions.read), "write": permission(permissions.write)])
    }

    /// The claim's value when it has Ditto's shape (nothing more, nothing less); a refusal naming
    /// what is wrong otherwise.
    static func validated(_ value: JSONValue, claim: String) throws(ServiceRefusal) -> JSONValue {
        func refuse(_ what: String) -> ServiceRefusal { ServiceRefusal("invalid_permissions", "the \"\(claim)\" claim \(what)") }
        guard case .object(let top) = value else { throw refuse("must be an object {read, write}") }
        if let extra = top.keys.first(where: { $0 != "read" && $0 != "write" }) { throw refuse("has an unknown member \"\(extra.prefix(40))\"") }
        var out: [String: JSONValue] = [:]
        for side in ["read", "write"] {
            guard case .object(let permission)? = top[side] else { throw refuse("needs \"\(side)\" as an object") }
            if let extra = permission.keys.first(where: { $0 != "everything" && $0 != "queriesByCollection" }) {
                throw refuse("has an unknown member \"\(side).\(extra.prefix(40))\"")
            }
            guard case .bool(let everything)? = permission["everything"] else { throw refuse("needs \"\(side).everything\" as a boolean") }
            var queries: [String: JSONValue] = [:]
            switch permission["queriesByCollection"] {
            case nil: break
            case .object(let byCollection)?:
                for (collection, query) in byCollection {
                    guard !collection.isEmpty, case .string = query else {
                        throw refuse("needs \"\(side).queriesByCollection\" to map collection names to query strings")
                    }
                    queries[collection] = query
                }
            default: throw refuse("needs \"\(side).queriesByCollection\" as an object")
            }
            out[side] = .object(["everything": .bool(everything), "queriesByCollection": .object(queries)])
        }
        return .object(out)
    }
}

/// The providers of a configuration, built from `TokenVerifierDescription`s; owns the
/// key stores (one per distinct fetch configuration) they share.
struct ProviderSet: Sendable {
    let providers: [String: ProviderVerifier]
    let stores: KeyStorePool

    static func build(_ configuration: ServerConfiguration, caPolicy: IssuancePolicy, logger: Logging.Logger) throws -> ProviderSet {
        let stores = KeyStorePool(logger: logger)
        var providers: [String: ProviderVerifier] = [:]
        do {
            for (name, provider) in configuration.providers.sorted(by: { $0.key < $1.key }) {
                let key = "providers.\(name)"
                let description = try Self.description(provider, key: key)
                let verifier: TokenSourceVerifier
                do {
                    verifier = try description.makeVerifier {
                        var fetch = KeyFetchConfiguration()
                        if let caFile = provider.caFile { fetch.trustRoots = .pemFile(caFile) }
                        do throws(KeySourceError) { return try stores.store(for: fetch) } catch { throw ConfigurationError(key: "\(key).caFile", error.message) }
                    }
                } catch let error as TokenError {  // keys in hand that cannot make a verifier
                    throw ConfigurationError(key: provider.type == .hs256 ? "\(key).secretFile" : "\(key).keyFile", error.message)
                }
                providers[name] = ProviderVerifier(
                    name: name, verifier: verifier, identityRules: identityRules(name, provider, caPolicy: caPolicy),
                    permissions: provider.permissions, permissionsClaim: provider.permissionsClaim)
            }
        } catch {
            let pool = stores
            Task { await pool.shutdown() }
            throw error
        }
        return ProviderSet(providers: providers, stores: stores)
    }

    /// The CA's policy with one provider's identity rules.
    static func identityRules(_ name: String, _ provider: ServerConfiguration.Provider, caPolicy: IssuancePolicy) -> IssuancePolicy {
        var rules = caPolicy
        rules.provider = name
        // A PDA is its owner's identity (HAT: "iss is the address of the PDA … that you should be
        // logging in"); a `sub` is the PDA's own, and two PDAs may sign the same one.
        rules.accountClaim = provider.account?.claim ?? (provider.type == .pda ? "iss" : "sub")
        rules.accountPrefix = provider.account?.prefix ?? "\(name):"
        if let profile = provider.profileClaims { rules.profileClaims = profile }
        if let factors = provider.factors {
            rules.factorPolicy = FactorPolicy(
                requiredFactors: Set(factors.require ?? []), acceptedContexts: Set(factors.acr ?? []), maximumSignInAge: factors.maxSignInAgeSeconds)
        }
        return rules
    }

    /// How one configured provider verifies tokens; errors name the configuration key.
    static func description(_ provider: ServerConfiguration.Provider, key: String) throws -> TokenVerifierDescription {
        let policy = ClaimsPolicy(issuers: Set(provider.issuers ?? []), audiences: Set(provider.audiences ?? []))
        switch provider.type {
        case .pda:
            var allowList = IssuerAllowList.hat
            if let domains = provider.allowedDomains {
                do throws(KeySourceError) { allowList = try IssuerAllowList(suffixes: domains) } catch {
                    throw ConfigurationError(key: "\(key).allowedDomains", error.message)
                }
            }
            return TokenVerifierDescription(keys: .pda(allowList: allowList, applications: provider.applications.map(Set.init)))
        case .jwks:
            return TokenVerifierDescription(keys: .jwks(url: provider.url ?? ""), policy: policy)
        case .oidc:
            return TokenVerifierDescription(keys: .oidc(issuer: provider.issuer ?? ""), policy: policy)
        case .hs256:
            let path = provider.secretFile ?? ""
            try ConfigurationError.checkPrivate(path, key: "\(key).secretFile")
            let secret = try ConfigurationError.read(path, key: "\(key).secretFile")
            do { return TokenVerifierDescription(keys: .local([try JWTKey.hmac(secret: secret)]), policy: policy) } catch {
                throw ConfigurationError(key: "\(key).secretFile", error.message)
            }
        case .pem:
            let path = provider.keyFile ?? ""
            let contents = try ConfigurationError.read(path, key: "\(key).keyFile")
            do { return TokenVerifierDescription(keys: .local(try KeyFileContents(contents).keys.map(\.publicKey)), policy: policy) } catch {
                throw ConfigurationError(key: "\(key).keyFile", error.message)
            }
        }
    }

    func shutdown() async {
        await stores.shutdown()
    }
}
