import Foundation
import Logging
import Metrics
import PeerCA
import ServiceLifecycle
import Synchronization
import TokenKit

/// The service's own issuer: its keys, its URL, and the reloading of the key directory.
final class TokenIssuer: Service, Sendable {
    static let grantType = "urn:ietf:params:oauth:grant-type:token-exchange"
    static let jwtTokenType = "urn:ietf:params:oauth:token-type:jwt"

    let keys: IssuerKeyRing
    let audiences: Set<String>
    let lifetime: TimeInterval
    let reloadInterval: Duration
    let logger: Logger
    /// The configured URL, or the address the service turned out to listen on.
    private let url: Mutex<String?>

    init(configuration: ServerConfiguration.Issuer, keyDirectory: String, logger: Logger) throws(PeerCAError) {
        keys = try IssuerKeyRing.open(directory: keyDirectory, createIfMissing: true)
        audiences = Set(configuration.audiences)
        lifetime = configuration.lifetimeSeconds ?? 300
        reloadInterval = .milliseconds(Int64((configuration.reloadSeconds ?? 5) * 1000))
        url = Mutex(configuration.url.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 })
        self.logger = logger
    }

    var issuerURL: String? { url.withLock { $0 } }

    /// Sets the URL from the bound address when none is configured.
    func listening(at base: String) { url.withLock { if $0 == nil { $0 = base } } }

    /// The key directory's reloads so far (`/metrics`: `tokenserver_issuer_keys_age_seconds`,
    /// `tokenserver_issuer_keys_reload_failures`), so that an operator can alert on an instance
    /// that has stopped following rotations: it would go on signing with a retired key.
    struct ReloadStatistics: Sendable {
        /// When the keys in use were last read from the directory (at start, then at each reload).
        var loadedAt: ContinuousClock.Instant
        /// Reloads that failed; the keys read before stayed in use.
        var failures = 0
    }

    private let reloads = Mutex(ReloadStatistics(loadedAt: .now))

    var reloadStatistics: ReloadStatistics { reloads.withLock { $0 } }

    /// Reloads the key directory every ``reloadInterval`` until the service group shuts down.
    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(for: self.reloadInterval)
                self.reloadOnce()
            }
        }
    }

    /// One reload: a failure keeps the keys in use, and is logged (with how old those keys are)
    /// and counted.
    func reloadOnce() {
        do throws(PeerCAError) {
            try keys.reload()
            reloads.withLock { $0.loadedAt = .now }
        } catch {
            let loadedAt = reloads.withLock { statistics in
                statistics.failures += 1
                return statistics.loadedAt
            }
            logger.warning(
                "cannot reload the issuer keys; the keys read before stay in use",
                metadata: ["error": "\(error)", "keysAge": "\(ContinuousClock.now - loadedAt)"])
        }
    }
}

extension TokenService {
    /// An RFC 6749 §5.2 error: `{error, error_description}`.
    static func oauthError(_ status: Int, _ error: String, _ description: String) -> ServiceResponse {
        .json(status, .object(["error": .string(error), "error_description": .string(description)]))
    }

    /// Token exchange (`POST /v1/token`, RFC 8693, form-encoded or JSON): `grant_type`
    /// (token-exchange), `subject_token`, `subject_token_type` (JWT), `audience` (from the
    /// allow-list) and `provider` (which configured provider verifies the subject token, with its
    /// identity rules and factor policy). Answers `{access_token, issued_token_type, token_type,
    /// expires_in}`: a JWT signed with the issuer's current key (ES256, `kid`): `iss` the issuer
    /// URL, `sub` the account UID, `aud` the audience, `amr`/`acr`/`auth_time` carried, a short
    /// lifetime never past the subject token's `exp`, a unique `jti`.
    public func exchange(_ body: [UInt8], contentType: String?) async -> ServiceResponse {
        guard let issuer else { return .error(404, "issuer_disabled", "no issuer is configured") }
        guard let form = Self.formOrJSON(body, contentType: contentType) else {
            return Self.oauthError(400, "invalid_request", "the body must be application/x-www-form-urlencoded (or a JSON object of strings)")
        }
        guard form["grant_type"] == TokenIssuer.grantType else {
            return Self.oauthError(400, "unsupported_grant_type", "grant_type must be \(TokenIssuer.grantType)")
        }
        for name in ["subject_token", "subject_token_type", "audience", "provider"] where (form[name] ?? "").isEmpty {
            return Self.oauthError(400, "invalid_request", "\(name) is required")
        }
        guard form["subject_token_type"] == TokenIssuer.jwtTokenType else {
            return Self.oauthError(400, "invalid_request", "subject_token_type must be \(TokenIssuer.jwtTokenType)")
        }
        let audience = form["audience"] ?? ""
        guard issuer.audiences.contains(audience) else {
            return Self.oauthError(400, "invalid_target", "this issuer does not sign for that audience")
        }
        let providerName = form["provider"] ?? ""
        guard let provider = providers.providers[providerName] else {
            return Self.oauthError(400, "invalid_request", "no provider is named \"\(providerName.prefix(64))\"")
        }
        let outcome: ProviderVerifier.Outcome
        do {
            outcome = try await verifiedCaller(Request(provider: provider, providerName: providerName, token: form["subject_token"] ?? "", object: [:]))
        } catch let error as TokenError {
            return Self.oauthError(400, "invalid_grant", "the subject token was refused: \(error.code.rawValue): \(error.message)")
        } catch let error as PeerCAError {
            return Self.oauthError(400, "invalid_grant", "the subject token was refused: \(error.code.rawValue): \(error.message)")
        } catch let error as ServiceRefusal {
            return Self.oauthError(400, "invalid_grant", "the subject token was refused: \(error.code): \(error.message)")
        } catch {
            return Self.oauthError(503, "temporarily_unavailable", "the provider's keys cannot be fetched now")
        }
        guard let url = issuer.issuerURL else { return Self.oauthError(503, "temporarily_unavailable", "the issuer URL is not known yet") }
        let identity = outcome.identity
        let now = Date().timeIntervalSince1970.rounded(.down)  // whole seconds: what the claims say
        let expiry = min(now + issuer.lifetime.rounded(.down), identity.expiresAt.timeIntervalSince1970.rounded(.down))
        guard expiry - now >= 1 else { return Self.oauthError(400, "invalid_grant", "the subject token expires in less than a second") }
        var claims: [String: JSONValue] = [
            "iss": .string(url), "sub": .string(identity.accountUID), "aud": .string(audience), "iat": .integer(Int(now)),
            "exp": .integer(Int(expiry)), "jti": .string(UUID().uuidString.lowercased()), "idp": .string(identity.provider),
        ]
        let methods = identity.factors.map(\.method).filter { $0 != "token" }
        if !methods.isEmpty { claims["amr"] = .array(methods.map { .string($0) }) }
        if let acr = identity.authenticationContext { claims["acr"] = .string(acr) }
        if let signIn = identity.latestSignIn { claims["auth_time"] = .integer(Int(signIn.timeIntervalSince1970)) }
        do {
            let key = try issuer.keys.signingKey
            let token = try JWTSigner(key: key, algorithm: .es256).sign(claims: claims, header: ["typ": .string("JWT")])
            counters.counter("tokenserver_tokens_issued_total", [("audience", audience)]).increment()
            return .json(200, .object([
                "access_token": .string(token), "issued_token_type": .string(TokenIssuer.jwtTokenType), "token_type": .string("Bearer"),
                "expires_in": .integer(Int(expiry - now)),
            ]))
        } catch {
            logger.error("token exchange could not sign", metadata: ["error": "\(error)"])
            return Self.oauthError(500, "server_error", "the token could not be signed")
        }
    }

    /// `GET /.well-known/openid-configuration`: the issuer's discovery document.
    public func discoveryDocument() -> ServiceResponse {
        guard let issuer, let url = issuer.issuerURL else { return .error(404, "issuer_disabled", "no issuer is configured") }
        return .json(200, .object([
            "issuer": .string(url), "jwks_uri": .string(url + "/.well-known/jwks.json"), "token_endpoint": .string(url + "/v1/token"),
            "grant_types_supported": .array([.string(TokenIssuer.grantType)]),
            "id_token_signing_alg_values_supported": .array([.string("ES256")]),
            "token_endpoint_auth_methods_supported": .array([.string("none")]),
            "subject_types_supported": .array([.string("public")]), "response_types_supported": .array([.string("token")]),
        ]))
    }

    /// `GET /.well-known/jwks.json`: the current, next and still-published retired public keys.
    public func publishedKeys() -> ServiceResponse {
        guard let issuer else { return .error(404, "issuer_disabled", "no issuer is configured") }
        do {
            let text = try JWKSet(keys: issuer.keys.publishedKeys).jsonText()
            return ServiceResponse(status: 200, contentType: "application/json", body: Array(text.utf8))
        } catch {
            return .error(500, "internal", "the keys could not be encoded")
        }
    }

    /// The fields of a form-encoded body (or of a JSON object of strings); nil for anything else
    /// or a repeated field.
    static func formOrJSON(_ body: [UInt8], contentType: String?) -> [String: String]? {
        if contentType?.lowercased().hasPrefix("application/json") == true {
            guard case .object(let object)? = try? JSONValue.parse(body) else { return nil }
            var fields: [String: String] = [:]
            for (name, value) in object {
                guard let text = value.stringValue else { return nil }
                fields[name] = text
            }
            return fields
        }
        guard let text = String(validating: body, as: UTF8.self) else { return nil }
        var fields: [String: String] = [:]
        for pair in text.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ part: Substring) -> String? { part.replacingOccurrences(of: "+", with: " ").removingPercentEncoding }
            guard let name = decode(parts[0]), let value = decode(parts.count > 1 ? parts[1] : ""), fields[name] == nil else { return nil }
            fields[name] = value
        }
        return fields
    }
}
