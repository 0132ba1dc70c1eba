public import Foundation
import Synchronization
public import TokenKit

/// Who a verified HAT application token says the caller is.
public struct HATIdentity: Sendable, Hashable {
    /// The PDA that issued the token (its `iss`, lower-cased), e.g. `postman.hubat.net`.
    public let pdaHost: String
    /// The token's `sub`.
    public let subject: String
    /// The application that requested the token (`application`), if the token names one.
    public let application: String?
    /// The application's version on the PDA (`applicationVersion`), if present.
    public let applicationVersion: String?
    /// The token's ID (`jti`), if present.
    public let tokenID: String?
    /// When the PDA issued the token (`iat`).
    public let issuedAt: Date
    /// When the token expires (`exp`).
    public let expiresAt: Date
}

extension TokenError.Code {
    /// A HAT token's `application` is missing or not one the verifier accepts.
    public static let applicationNotAllowed = TokenError.Code(rawValue: "application_not_allowed")
}

/// Verifies a HAT PDA application token end to end and returns a ``HATIdentity``.
///
/// 1. The token is parsed (strictly) without trusting it, and its header must say `alg` RS256
///    and `typ` JWT.
/// 2. Its `iss` must be a bare DNS host under an allowed suffix (``IssuerAllowList/hat`` by
///    default) — checked before any request, so a token cannot make us fetch from anywhere else.
/// 3. The key comes from that very PDA (`https://<iss>/publickey`, through the shared
///    ``RemoteKeyStore``) and must be RSA ≥ 2048; the signature is verified with it (RS256 only).
/// 4. Claims: `exp` and `iat` required, `iat` at most ``maximumAge`` (30 days) ago, `sub`
///    required, `iss` equal to the PDA the key came from; `application` must be on
///    ``applications`` when that is set.
///
/// ```swift
/// let hat = HATTokenVerifier(store: store, applications: ["my-app"])
/// let identity = try await hat.verify(token)
/// print(identity.pdaHost, identity.subject)
/// ```
public struct HATTokenVerifier: Sendable {
    public let store: RemoteKeyStore
    public let allowList: IssuerAllowList
    /// Accepted `application` values; nil accepts any (or none).
    public let applications: Set<String>?
    /// Oldest accepted `iat`, in seconds before now. Default 30 days.
    public let maximumAge: Double
    /// Clock-skew allowance in seconds. Default 60.
    public let leeway: Double
    /// Tokens longer than this are refused before anything else. Default 16 KiB.
    public let maxTokenBytes: Int
    private let built = BuiltVerifiers()

    public static let thirtyDays: Double = 30 * 24 * 3600

    public init(
        store: RemoteKeyStore, allowList: IssuerAllowList = .hat, applications: Set<String>? = nil,
        maximumAge: Double = HATTokenVerifier.thirtyDays, leeway: Double = 60, maxTokenBytes: Int = 16 * 1024
    ) {
        self.store = store
        self.allowList = allowList
        self.applications = applications
        self.maximumAge = maximumAge
        self.leeway = leeway
        self.maxTokenBytes = maxTokenBytes
    }

    /// Verifies a HAT token. Throws ``RemoteVerificationError/token(_:)`` for an invalid token
    /// (including a refused `iss`, as `.issuerMismatch`), ``RemoteVerificationError/keys(_:)``
    /// when the PDA's key cannot be had.
    public func verify(_ token: String) async throws(RemoteVerificationError) -> HATIdentity {
        try await verifyWithToken(token).identity
    }

    /// Like ``verify(_:)``, also returning the verified token (header, all claims).
    public func verifyWithToken(_ token: String) async throws(RemoteVerificationError) -> (identity: HATIdentity, token: VerifiedToken) {
        let (issuer, host) = try Result { () throws(TokenError) in try pdaHost(token) }.getRemote()
        // The PDA may have rotated its key: a failed signature refetches (rate-limited) and tries once more.
        let verified = try await store.withKeys(for: .pda(host: host), retryingOn: [.badSignature]) { keys throws(TokenError) in
            try verifier(issuer: issuer, keys: keys).verify(token)
        }
        return (try Result { () throws(TokenError) in try identity(verified, host: host) }.getRemote(), verified)
    }

    /// The token's (unverified) `iss` and the PDA host it names, if the allow-list accepts it.
    func pdaHost(_ token: String) throws(TokenError) -> (issuer: String, host: String) {
        let issuer = try HATTokenVerifier.unverifiedIssuer(token, maxTokenBytes: maxTokenBytes)
        do throws(KeySourceError) { return (issuer, try allowList.host(forIssuer: issuer)) } catch {
            throw TokenError(.issuerMismatch, error.message)
        }
    }

    func identity(_ verified: VerifiedToken, host: String) throws(TokenError) -> HATIdentity {
        let payload = verified.payload
        func string(_ name: String) throws(TokenError) -> String? {
            guard let value = payload[name] else { return nil }
            guard let text = value.stringValue else { throw TokenError(.invalidClaim, "\"\(name)\" must be a string") }
            return text
        }
        let application = try string("application")
        if let applications {
            guard let application else { throw TokenError(.applicationNotAllowed, "the token names no \"application\"") }
            guard applications.contains(application) else {
                throw TokenError(.applicationNotAllowed, "application \"\(IssuerAllowList.printable(application))\" is not accepted")
            }
        }
        // The policy made sub, iat and exp required; these guards only keep the types honest.
        guard let subject = verified.claims.subject, let issuedAt = verified.claims.issuedAtDate,
            let expiresAt = verified.claims.expirationDate
        else { throw TokenError(.missingClaim, "the token lacks sub, iat or exp") }
        return HATIdentity(
            pdaHost: host, subject: subject, application: application, applicationVersion: try string("applicationVersion"),
            tokenID: verified.claims.id, issuedAt: issuedAt, expiresAt: expiresAt)
    }

    /// The policy for tokens from one PDA, over that PDA's key set.
    func verifier(issuer: String, keys: RemoteKeySet) throws(TokenError) -> JWTVerifier {
        if let cached = built.get(issuer: issuer, generation: keys.generation) { return cached }
        let policy = ClaimsPolicy(
            requireExpiration: true, leeway: leeway, maxAge: maximumAge, issuers: [issuer], requiredClaims: ["sub", "iat", "exp"],
            expectedType: "JWT")
        let verifier = try JWTVerifier(keys: keys.keys, policy: policy, clock: store.clock, maxTokenBytes: maxTokenBytes)
        built.set(issuer: issuer, generation: keys.generation, verifier)
        return verifier
    }

    /// The token's `iss`, read before verification, after the header says RS256 — so a token
    /// for another algorithm never causes a request.
    static func unverifiedIssuer(_ token: String, maxTokenBytes: Int) throws(TokenError) -> String {
        let unverified = try UnverifiedToken(token, maxTokenBytes: maxTokenBytes)
        guard let alg = unverified.header["alg"]?.stringValue else { throw TokenError(.invalidHeader, "the header has no \"alg\" string") }
        guard alg == "RS256" else {
            throw TokenError(.algorithmNotAllowed, "HAT tokens are RS256; this one says \"\(IssuerAllowList.printable(alg))\"")
        }
        guard case .object(let payload)? = unverified.payload else { throw TokenError(.invalidJSON, "the payload is not a JSON object") }
        guard let iss = payload["iss"] else { throw TokenError(.missingClaim, "the token has no \"iss\"") }
        guard let issuer = iss.stringValue else { throw TokenError(.invalidClaim, "\"iss\" must be a string") }
        return issuer
    }
}

/// Verifiers for the newest key set of each issuer (one PDA each for ``HATTokenVerifier``, a
/// single entry for ``RemoteJWTVerifier``), shared by copies of the verifier; bounded so a stream
/// of tokens from many PDAs cannot grow it without limit.
final class BuiltVerifiers: Sendable {
    private let slots = Mutex<[String: (generation: Int, verifier: JWTVerifier)]>([:])
    private let limit = 1024

    func get(issuer: String, generation: Int) -> JWTVerifier? {
        slots.withLock { slots in
            guard let slot = slots[issuer], slot.generation == generation else { return nil }
            return slot.verifier
        }
    }

    func set(issuer: String, generation: Int, _ verifier: JWTVerifier) {
        slots.withLock { slots in
            if slots.count >= limit, slots[issuer] == nil { slots.removeAll(keepingCapacity: true) }
            if (slots[issuer]?.generation ?? Int.min) < generation { slots[issuer] = (generation, verifier) }
        }
    }
}
