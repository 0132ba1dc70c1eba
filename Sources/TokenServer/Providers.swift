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
    /// Ditto's sample webhook's rules (`dittoRules`), which then decide permissions, `userID`,
    /// `clientInfo` and `identityServiceMetadata`.
    var dittoRules: DittoRules? = nil

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

    /// The user's Ditto permissions: from the provider's `dittoRules` when it has them (the rules
    /// the token's claims match, merged); else from the permissions claim when the provider names
    /// one and the token carries it (it must have Ditto's shape); else the configured ones.
    func permissions(_ claims: [String: JSONValue]) throws(ServiceRefusal) -> DittoPermissions {
        if let dittoRules { return dittoRules.permissions(for: claims) }
        if let claim = permissionsClaim, let value = claims[claim] {
            return try DittoPermissions.validated(value, claim: claim)
        }
        guard let permissions else {
            throw ServiceRefusal("missing_permissions", "the token carries no \"\(permissionsClaim ?? "")\" claim, and the provider grants none")
        }
        return DittoPermissions(permissions)
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
                let rules = try provider.dittoRules.map { path throws(ConfigurationError) in try Self.dittoRules(path, key: "\(key).dittoRules") }
                let description = try Self.description(provider, key: key, acceptsNoExpiration: rules?.defaultExpirationSeconds != nil)
                let verifier: TokenSourceVerifier
                do {
                    verifier = try description.makeVerifier {
                        var fetch = KeyFetchConfiguration()
                        if let caFile = provider.caFile { fetch.trustRoots = .pemFile(caFile) }
                        fetch.hostOverrides = provider.hostOverrides ?? [:]
                        if let port = provider.pdaPort { fetch.pdaPort = port }
                        do throws(KeySourceError) { return try stores.store(for: fetch) } catch { throw ConfigurationError(key: "\(key).caFile", error.message) }
                    }
                } catch let error as TokenError {  // keys in hand that cannot make a verifier
                    throw ConfigurationError(key: provider.type == .hs256 ? "\(key).secretFile" : "\(key).keyFile", error.message)
                }
                providers[name] = ProviderVerifier(
                    name: name, verifier: verifier, identityRules: identityRules(name, provider, caPolicy: caPolicy, dittoRules: rules),
                    permissions: provider.permissions, permissionsClaim: provider.permissionsClaim, dittoRules: rules)
            }
        } catch {
            let pool = stores
            Task { await pool.shutdown() }
            throw error
        }
        return ProviderSet(providers: providers, stores: stores)
    }

    /// A provider's `dittoRules` file, read and checked; an error names the file's member.
    static func dittoRules(_ path: String, key: String) throws(ConfigurationError) -> DittoRules {
        let bytes = try ConfigurationError.read(path, key: key)
        do throws(DittoRules.Problem) { return try DittoRules.parse(bytes) } catch {
            throw ConfigurationError(key: key, "(\(path)): \(error.key.isEmpty ? "the file" : error.key) \(error.message)")
        }
    }

    /// The CA's policy with one provider's identity rules.
    static func identityRules(
        _ name: String, _ provider: ServerConfiguration.Provider, caPolicy: IssuancePolicy, dittoRules: DittoRules? = nil
    ) -> IssuancePolicy {
        var rules = caPolicy
        rules.provider = name
        // A PDA is its owner's identity (HAT: "iss is the address of the PDA … that you should be
        // logging in"); a `sub` is the PDA's own, and two PDAs may sign the same one.
        rules.accountClaim = provider.account?.claim ?? (provider.type == .pda ? "iss" : "sub")
        rules.accountPrefix = provider.account?.prefix ?? "\(name):"
        if let dittoRules {
            // The userID the sample webhook answered: Ditto keeps a user's data by it.
            rules.accountClaim = dittoRules.userIDField
            rules.accountPrefix = provider.account?.prefix ?? ""
            rules.lifetimeWithoutExpiration = dittoRules.defaultExpirationSeconds.map(TimeInterval.init)
        }
        if let profile = provider.profileClaims { rules.profileClaims = profile }
        if let factors = provider.factors {
            rules.factorPolicy = FactorPolicy(
                requiredFactors: Set(factors.require ?? []), acceptedContexts: Set(factors.acr ?? []), maximumSignInAge: factors.maxSignInAgeSeconds)
        }
        return rules
    }

    /// How one configured provider verifies tokens; errors name the configuration key.
    static func description(_ provider: ServerConfiguration.Provider, key: String, acceptsNoExpiration: Bool = false) throws -> TokenVerifierDescription {
        let policy = ClaimsPolicy(requireExpiration: !acceptsNoExpiration, issuers: Set(provider.issuers ?? []), audiences: Set(provider.audiences ?? []))
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
