public import TokenKit

/// Verifies JWTs with keys an issuer publishes (JWKS URL, OpenID Connect discovery, or one PDA),
/// fetched and cached by a shared ``RemoteKeyStore``.
///
/// Everything `JWTVerifier` checks is checked the same way; the keys decide the
/// algorithms. When a token names an unknown `kid` or its signature fails, the store is asked
/// for newer keys (rate-limited by its cooldown) and the token is tried once more.
///
/// For `.oidc(issuer:)` sources the policy's issuers default to that issuer, so `iss` is required
/// and must match.
///
/// ```swift
/// let verifier = RemoteJWTVerifier(
///     source: .oidc(issuer: "https://tenant.eu.auth0.com/"),
///     store: store,
///     policy: ClaimsPolicy(audiences: ["my-api"]))
/// let token = try await verifier.verify(jwt)
/// ```
public struct RemoteJWTVerifier: Sendable {
    public let source: KeySource
    public let store: RemoteKeyStore
    public let policy: ClaimsPolicy
    public let engine: JWTVerifier.Engine
    private let built = BuiltVerifiers()

    public init(source: KeySource, store: RemoteKeyStore, policy: ClaimsPolicy = ClaimsPolicy(), engine: JWTVerifier.Engine = .native) {
        var policy = policy
        if case .oidc(let issuer) = source, policy.issuers.isEmpty { policy.issuers = [issuer] }
        self.source = source
        self.store = store
        self.policy = policy
        self.engine = engine
    }

    /// Verifies `token` against the source's current keys (fetching them if needed). Throws
    /// ``RemoteVerificationError/token(_:)`` when the token is invalid,
    /// ``RemoteVerificationError/keys(_:)`` when no keys could be had.
    public func verify(_ token: String) async throws(RemoteVerificationError) -> VerifiedToken {
        try await store.withKeys(for: source, retryingOn: [.unknownKey, .badSignature]) { keys throws(TokenError) in
            try verifier(for: keys).verify(token)
        }
    }

    /// A `JWTVerifier` over one key set, built once per fetched generation.
    func verifier(for keys: RemoteKeySet) throws(TokenError) -> JWTVerifier {
        if let cached = built.get(issuer: "", generation: keys.generation) { return cached }
        let verifier = try JWTVerifier(keys: keys.keys, policy: policy, engine: engine, clock: store.clock)
        built.set(issuer: "", generation: keys.generation, verifier)
        return verifier
    }
}
