public import TokenKit

/// How tokens from one source are verified: where the keys come from, and the claims policy.
/// `tokentool verify`, `tokentool ca issue` and the server's providers all describe their
/// verifiers with this type and build them with ``makeVerifier(store:)``, so a token is verified
/// the same way whichever of them asks.
///
/// ```swift
/// let description = TokenVerifierDescription(
///     keys: .oidc(issuer: "https://tenant.eu.auth0.com/"), policy: ClaimsPolicy(audiences: ["my-api"]))
/// let verifier = try description.makeVerifier(store: store)
/// let verified = try await verifier.verify(jwt)
/// print(verified.token.claims.subject ?? "-")
/// ```
public struct TokenVerifierDescription: Sendable {
    /// Where the keys come from.
    public enum Keys: Sendable {
        /// Keys in hand: from a key file (PEM, DER, JWK, JWKS) or an HMAC secret.
        case local([JWTKey])
        /// A JWK Set at this https URL.
        case jwks(url: String)
        /// OpenID Connect discovery from this issuer (`iss` must equal it).
        case oidc(issuer: String)
        /// HAT PDA application tokens: the key of the PDA the token's `iss` names, when that host
        /// is on `allowList`; `applications` (when set) are the accepted `application` values.
        case pda(allowList: IssuerAllowList = .hat, applications: Set<String>? = nil)

        /// Whether the keys are fetched (and so need a ``RemoteKeyStore``).
        public var isRemote: Bool {
            if case .local = self { return false }
            return true
        }
    }

    public var keys: Keys
    /// The claims policy. For `.pda` its `leeway` applies and its `maxAge` bounds `iat` (30 days
    /// when nil); the rest of a HAT token's policy is fixed by ``HATTokenVerifier``.
    public var policy: ClaimsPolicy
    /// The signature engine.
    public var engine: JWTVerifier.Engine
    /// The clock for `.local` keys; remote keys use their store's clock.
    public var clock: VerificationClock

    public init(keys: Keys, policy: ClaimsPolicy = ClaimsPolicy(), engine: JWTVerifier.Engine = .native, clock: VerificationClock = .system) {
        self.keys = keys
        self.policy = policy
        self.engine = engine
        self.clock = clock
    }

    /// Builds the verifier; `storeProvider` is asked for a key store only when the keys are
    /// fetched (so a configuration can make stores lazily, one per fetch configuration).
    public func makeVerifier(storeProvider store: () throws -> RemoteKeyStore) throws -> TokenSourceVerifier {
        switch keys {
        case .local(let keys):
            return TokenSourceVerifier(.local(try JWTVerifier(keys: keys, policy: policy, engine: engine, clock: clock)))
        case .jwks(let url):
            return TokenSourceVerifier(.remote(RemoteJWTVerifier(source: .jwks(url: url), store: try store(), policy: policy, engine: engine)))
        case .oidc(let issuer):
            return TokenSourceVerifier(.remote(RemoteJWTVerifier(source: .oidc(issuer: issuer), store: try store(), policy: policy, engine: engine)))
        case .pda(let allowList, let applications):
            return TokenSourceVerifier(.pda(HATTokenVerifier(
                store: try store(), allowList: allowList, applications: applications,
                maximumAge: policy.maxAge ?? HATTokenVerifier.thirtyDays, leeway: policy.leeway)))
        }
    }

    /// Builds the verifier with `store` for fetched keys (nil is fine for keys in hand).
    public func makeVerifier(store: RemoteKeyStore? = nil) throws -> TokenSourceVerifier {
        try makeVerifier(storeProvider: {
            guard let store else { throw KeySourceError(.noKeyStore, "keys from \\(keys) are fetched, so the verifier needs a key store") }
            return store
        })
    }
}

/// A verifier built from a ``TokenVerifierDescription``: one ``verify(_:)`` whatever the keys'
/// source.
public struct TokenSourceVerifier: Sendable {
    enum Kind: Sendable {
        case local(JWTVerifier)
        case remote(RemoteJWTVerifier)
        case pda(HATTokenVerifier)
    }

    let kind: Kind

    init(_ kind: Kind) { self.kind = kind }

    /// A verified token and, for a HAT PDA token, who the PDA says the caller is.
    public struct Verified: Sendable {
        public let token: VerifiedToken
        /// Set for `.pda` sources.
        public let hat: HATIdentity?
    }

    /// Verifies `token`. Throws ``RemoteVerificationError/token(_:)`` for an invalid token,
    /// ``RemoteVerificationError/keys(_:)`` when the keys cannot be had.
    public func verify(_ token: String) async throws(RemoteVerificationError) -> Verified {
        switch kind {
        case .local(let verifier):
            return Verified(token: try Result { () throws(TokenError) in try verifier.verify(token) }.getRemote(), hat: nil)
        case .remote(let verifier):
            return Verified(token: try await verifier.verify(token), hat: nil)
        case .pda(let verifier):
            let (identity, verified) = try await verifier.verifyWithToken(token)
            return Verified(token: verified, hat: identity)
        }
    }
}
