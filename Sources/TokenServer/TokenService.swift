import Foundation
public import Logging
import Metrics
import PDAKeys
public import PeerCA
import PeerCAPostgres
public import ServiceLifecycle
import TokenKit

/// What an endpoint answers: an HTTP status and a body.
public struct ServiceResponse: Sendable {
    public let status: Int
    public let contentType: String
    public let body: [UInt8]
    /// Seconds a client should wait before trying again (`Retry-After`), on a 503 that a retry
    /// may get past: the ledger could not record, keys could not be fetched.
    public var retryAfter: Int?

    public init(status: Int, contentType: String, body: [UInt8], retryAfter: Int? = nil) {
        self.status = status
        self.contentType = contentType
        self.body = body
        self.retryAfter = retryAfter
    }

    static func json(_ status: Int, _ value: JSONValue) -> ServiceResponse {
        json(status, bytes: value.compactBytes)
    }

    /// A JSON body already written (`IssuedCertificate.replyJSON(renewalOf:now:)`).
    static func json(_ status: Int, bytes: [UInt8]) -> ServiceResponse {
        ServiceResponse(status: status, contentType: "application/json", body: bytes)
    }

    static func error(_ status: Int, _ code: String, _ message: String) -> ServiceResponse {
        json(status, .object(["error": .object(["code": .string(code), "message": .string(message)])]))
    }

    /// 503 `ledger_unavailable`, `Retry-After: 1`: the ledger could not record or read (a full
    /// disk, an I/O error, PostgreSQL out of reach). Nothing was handed out that is not recorded;
    /// the same request can be sent again.
    static func ledgerUnavailable(_ error: PeerCAError) -> ServiceResponse {
        var response = ServiceResponse.error(503, "ledger_unavailable", "the ledger cannot record or read now; try again (\(error.message))")
        response.retryAfter = 1
        return response
    }
}

/// The service behind the HTTP endpoints: the authentication webhook, certificate issuance, and
/// the CA's public material. Transport-agnostic (bytes in, status and JSON out), so every rule is
/// testable without a socket; ``TokenHTTPServer`` puts it on Hummingbird.
public final class TokenService: Sendable {
    public let configuration: ServerConfiguration
    public let ca: PeerCertificateAuthority
    let providers: ProviderSet
    let logger: Logger
    /// The app ID requests must name (`appID` or `databaseID`), when one is configured.
    let appID: String?

    /// Loads (or creates, on first start) the CA, opens the ledger and builds the providers.
    /// Run ``services`` (a PostgreSQL ledger's connection pool) while the service is in use and
    /// call ``prepare()`` once they run; ``TokenHTTPServer/serviceGroup(_:logger:signals:metrics:onRunning:)``
    /// does both.
    public static func start(configuration: ServerConfiguration, logger: Logger) async throws -> TokenService {
        try configuration.validate()
        // OpenWeb's access token and trust roots; its client is made last, when nothing can throw.
        let openWeb = try configuration.openweb.map(OpenWebSSO.Settings.load)
        let (authority, settings) = try ServerCA.loadOrCreate(configuration, logger: logger)
        let store = try LedgerStore.open(configuration.ledgerLocation, logger: logger)
        let policy = try settings.issuancePolicy()
        let ca = PeerCertificateAuthority(authority: authority, policy: policy, ledger: store.ledger)
        let providers = try ProviderSet.build(configuration, caPolicy: policy, logger: logger)
        var adminToken: [UInt8]?
        if let admin = configuration.admin {
            adminToken = try AdminCredential.read(admin.tokenFile)
        }
        var issuer: TokenIssuer?
        if let issuerConfiguration = configuration.issuer {
            do { issuer = try TokenIssuer(configuration: issuerConfiguration, keyDirectory: configuration.issuerKeyDirectory, logger: logger) } catch {
                throw ConfigurationError(key: "issuer.keyDirectory", error.message)
            }
        }
        let signature = try configuration.webhook?.signature.map(Self.webhookSignature)
        return TokenService(
            configuration: configuration, ca: ca, providers: providers, logger: logger, appID: configuration.ca?.appID, store: store,
            sessions: SessionDenyList(ledger: store.ledger, refreshInterval: configuration.sessionRefresh, logger: logger),
            adminToken: adminToken, openWeb: openWeb.map(OpenWebSSO.init(settings:)), issuer: issuer, signature: signature)
    }

    /// The webhook's signature check from `webhook.signature`: each secret file private (0600)
    /// and holding base64.
    static func webhookSignature(_ settings: ServerConfiguration.Signature) throws(ConfigurationError) -> WebhookSignatureCheck {
        var secrets: [[UInt8]] = []
        for (index, path) in settings.secretFiles.enumerated() {
            let key = "webhook.signature.secretFiles[\(index)]"
            try ConfigurationError.checkPrivate(path, key: key)
            let text = String(decoding: try ConfigurationError.read(path, key: key), as: UTF8.self)
            guard let secret = DittoWebhookSignature.secret(base64: text), secret.count >= 16 else {
                throw ConfigurationError(key: key, "must hold a shared secret in base64, as Ditto shows it (16 bytes or more once decoded)")
            }
            secrets.append(secret)
        }
        do throws(DittoWebhookSignature.Refusal) {
            return WebhookSignatureCheck(
                signature: try DittoWebhookSignature(secrets: secrets, tolerance: settings.toleranceSeconds ?? 300), required: settings.required ?? true)
        } catch {
            throw ConfigurationError(key: "webhook.signature.secretFiles", error.message)
        }
    }

    /// The webhook's signature check, and whether a request without a signature is refused.
    struct WebhookSignatureCheck: Sendable {
        let signature: DittoWebhookSignature
        let required: Bool
    }

    let store: LedgerStore
    /// Ended sessions (logouts, revocations by account), reloaded from the ledger.
    let sessions: SessionDenyList
    /// The administrator's bearer secret, when `admin` is configured.
    let adminToken: [UInt8]?
    /// The token issuer (token exchange), when `issuer` is configured.
    let issuer: TokenIssuer?
    /// OpenWeb's `register-user` client, when `openweb` is configured.
    let openWeb: OpenWebSSO?
    /// The service's own counters (decisions, certificates issued, sessions ended, …).
    let counters = CounterCache()
    /// The webhook's `ditto-signature` check, when `webhook.signature` is configured.
    let signature: WebhookSignatureCheck?

    init(
        configuration: ServerConfiguration, ca: PeerCertificateAuthority, providers: ProviderSet, logger: Logger, appID: String?,
        store: LedgerStore, sessions: SessionDenyList, adminToken: [UInt8]?, openWeb: OpenWebSSO? = nil, issuer: TokenIssuer? = nil,
        signature: WebhookSignatureCheck? = nil
    ) {
        self.signature = signature
        self.configuration = configuration
        self.ca = ca
        self.providers = providers
        self.logger = logger
        self.appID = appID
        self.store = store
        self.sessions = sessions
        self.adminToken = adminToken
        self.issuer = issuer
        self.openWeb = openWeb
    }

    /// What must run while the service is in use: the ledger's connection pool (PostgreSQL) and
    /// the reloading of the ended-sessions list.
    public var services: [any Service] { store.services + [sessions] + (issuer.map { [$0] } ?? []) }

    /// Tells the service where it listens (the issuer's URL when none is configured).
    public func listening(at base: String) { issuer?.listening(at: base) }

    /// Makes the ledger's tables if needed (PostgreSQL) and loads the ended sessions; needs
    /// ``services`` running.
    public func prepare() async throws {
        try await store.prepare()
        try await sessions.reload()
    }

    /// Closes the HTTP clients of remote providers and OpenWeb's. (The ledger closes with its services.)
    public func shutdown() async {
        await providers.shutdown()
        await openWeb?.shutdown()
    }

    /// ``verifiedCaller(_:)`` for the JSON endpoints other than the webhook: a refusal is an HTTP
    /// error (401 for the token, 403 for the identity rules, 503 when keys cannot be had).
    func verifiedCallerOrError(_ request: Request) async -> Result<ProviderVerifier.Outcome, ServiceResponseError> {
        do {
            return .success(try await verifiedCaller(request))
        } catch let error as TokenError {
            return .failure(ServiceResponseError(.error(401, error.code.rawValue, error.message)))
        } catch let error as PeerCAError {
            return .failure(ServiceResponseError(.error(403, error.code.rawValue, error.message)))
        } catch let error as ServiceRefusal {
            return .failure(ServiceResponseError(.error(401, error.code, error.message)))
        } catch {
            return .failure(ServiceResponseError(.error(503, "keys_unavailable", "the provider's keys cannot be fetched now")))
        }
    }

    /// Verifies a request's token with its provider and derives the identity, refusing an
    /// account whose sessions have ended since the token was issued.
    func verifiedCaller(_ request: Request) async throws -> ProviderVerifier.Outcome {
        let outcome = try await request.provider.verify(request.token)
        try sessions.check(outcome.identity)
        return outcome
    }

    // MARK: Requests

    struct Request {
        let provider: ProviderVerifier
        let providerName: String
        let token: String
        let object: [String: JSONValue]
    }

    /// A request body as a JSON object, or a 400 that says what was wrong with it (not UTF-8, a
    /// member named twice, a number too long…: the parser's words, not one sentence for all).
    static func jsonObject(_ body: [UInt8]) -> Result<[String: JSONValue], ServiceResponseError> {
        let value: JSONValue
        do { value = try JSONValue.parse(body) } catch {
            return .failure(ServiceResponseError(.error(400, "invalid_request", "the body is not JSON this server reads: \(error.message.prefix(200))")))
        }
        guard case .object(let object) = value else { return .failure(ServiceResponseError(.error(400, "invalid_request", "the body must be a JSON object"))) }
        return .success(object)
    }

    /// ``jsonObject(_:)`` with only the `allowed` members: another is a 400 that names it.
    static func jsonObject(_ body: [UInt8], members allowed: Set<String>) -> Result<[String: JSONValue], ServiceResponseError> {
        Self.jsonObject(body).flatMap { object in
            if let extra = object.keys.sorted().first(where: { !allowed.contains($0) }) {
                return .failure(ServiceResponseError(.error(400, "invalid_request", "unknown member \"\(extra.prefix(40))\"")))
            }
            return .success(object)
        }
    }

    /// Parses `{provider, token, …}`; an error response when it is not that.
    func parse(_ body: [UInt8], needs: [String]) -> Result<Request, ServiceResponseError> {
        let object: [String: JSONValue]
        switch Self.jsonObject(body) {
        case .success(let parsed): object = parsed
        case .failure(let refusal): return .failure(refusal)
        }
        for name in needs where object[name]?.stringValue == nil {
            return .failure(ServiceResponseError(.error(400, "invalid_request", "\"\(name)\" must be a string")))
        }
        let providerName = object["provider"]?.stringValue ?? ""
        let token = object["token"]?.stringValue ?? ""
        guard let provider = providers.providers[providerName] else {
            return .failure(ServiceResponseError(.error(400, "unknown_provider", "no provider is named \"\(providerName.prefix(64))\"")))
        }
        var named: [String] = []
        for name in ["appID", "databaseID"] {
            guard let value = object[name] else { continue }
            guard let text = value.stringValue else {
                return .failure(ServiceResponseError(.error(400, "invalid_request", "\"\(name)\" must be a string")))
            }
            named.append(text)
        }
        if let appID, let requested = named.first(where: { $0 != appID }) {
            return .failure(ServiceResponseError(.error(400, "app_mismatch", "this service serves app \(appID), not \(requested.prefix(64))")))
        }
        return .success(Request(provider: provider, providerName: providerName, token: token, object: object))
    }

    /// The authentication webhook (Ditto's "Online With Authentication"): `{appID | databaseID,
    /// provider, token}` → `{authenticate, authenticated, expirationSeconds, userID, permissions,
    /// userInfo}` (and `clientInfo`, `identityServiceMetadata` from a provider's `dittoRules`). A
    /// refused token is a 200 with `authenticate: false` and an `error` object.
    ///
    /// With `webhook.signature` configured, `dittoSignature` (the `ditto-signature` header) is
    /// checked over the raw body first: missing (when required), malformed, stale or wrong is a 401
    /// with `authenticated: false`, and nothing else is done.
    public func authenticate(_ body: [UInt8], dittoSignature: String? = nil) async -> ServiceResponse {
        if let signature, dittoSignature != nil || signature.required {
            do throws(DittoWebhookSignature.Refusal) { try signature.signature.check(dittoSignature, body: body) } catch {
                counters.counter("tokenserver_webhook_signature_refusals_total", [("reason", error.code.rawValue)]).increment()
                logger.warning("webhook call refused: its signature", metadata: ["code": "\(error.code.rawValue)"])
                return .json(401, .object([
                    "authenticate": .bool(false), "authenticated": .bool(false),
                    "error": .object(["code": .string(error.code.rawValue), "message": .string(error.message)]),
                ]))
            }
        }
        let request: Request
        switch parse(body, needs: ["provider", "token"]) {
        case .failure(let error): return error.response
        case .success(let parsed): request = parsed
        }
        let outcome: ProviderVerifier.Outcome
        do {
            outcome = try await verifiedCaller(request)
        } catch {
            return refusal(error, provider: request.providerName)
        }
        let permissions: DittoPermissions
        do throws(ServiceRefusal) { permissions = try request.provider.permissions(outcome.claims) } catch {
            return refusal(error, provider: request.providerName)
        }
        let now = Date().timeIntervalSince1970
        let expiration = outcome.identity.expiresAt.timeIntervalSince1970
        let seconds = max(0, min(Int(expiration - now), configuration.maxExpirationSeconds))
        var userInfo = outcome.identity.jsonValue.objectValue ?? [:]
        userInfo.merge(outcome.userInfo) { $1 }
        var members: [String: JSONValue] = [
            "authenticate": .bool(true), "authenticated": .bool(true), "expirationSeconds": .integer(seconds),
            "userID": .string(outcome.identity.accountUID),
            "permissions": permissions.json,
            "userInfo": .object(userInfo),
        ]
        if let rules = request.provider.dittoRules {
            members["clientInfo"] = DittoRules.gathered(rules.clientInfo, from: outcome.claims)
            members["identityServiceMetadata"] = DittoRules.gathered(rules.identityServiceMetadata, from: outcome.claims)
        }
        let response = JSONValue.object(members)
        counters.counter("tokenserver_auth_decisions_total", [("provider", request.providerName), ("result", "accepted")]).increment()
        return .json(200, response)
    }

    /// Why a token was refused, as the webhook says it.
    func refusal(_ error: any Error, provider: String) -> ServiceResponse {
        let (code, message): (String, String)
        switch error {
        case let error as TokenError: (code, message) = (error.code.rawValue, error.message)
        case let error as PeerCAError: (code, message) = (error.code.rawValue, error.message)
        case let error as ServiceRefusal: (code, message) = (error.code, error.message)
        case let error as KeySourceError:
            logger.warning("provider keys unavailable", metadata: ["provider": "\(provider)", "code": "\(error.code)"])
            return .error(503, "keys_unavailable", "the provider's keys cannot be fetched now (\(error.code.rawValue))")
        default: (code, message) = ("invalid_token", "the token was refused")
        }
        counters.counter("tokenserver_auth_decisions_total", [("provider", provider), ("result", "refused")]).increment()
        return .json(200, .object([
            "authenticate": .bool(false), "authenticated": .bool(false), "userInfo": .string(message),
            "error": .object(["code": .string(code), "message": .string(message)]),
        ]))
    }

    /// `{provider, token, csr}` → `{certificate (PEM chain), serial, notAfter, spiffeID}`.
    public func issueCertificate(_ body: [UInt8]) async -> ServiceResponse {
        let request: Request
        switch parse(body, needs: ["provider", "token", "csr"]) {
        case .failure(let error): return error.response
        case .success(let parsed): request = parsed
        }
        let outcome: ProviderVerifier.Outcome
        switch await verifiedCallerOrError(request) {
        case .failure(let error): return error.response
        case .success(let verified): outcome = verified
        }
        let csr = Array((request.object["csr"]?.stringValue ?? "").utf8)
        do {
            var validity: Double?
            if let value = request.object["validitySeconds"] {
                guard let seconds = value.doubleValue else {
                    return .error(400, "invalid_request", "\"validitySeconds\" must be a number")
                }
                validity = seconds
            }
            let issued = try await ca.issue(identity: outcome.identity, csr: try ValidatedCSR(csr), validity: validity)
            // A logout through this instance between the check and the record: the logout's
            // revocation may have run before this certificate was recorded, so it goes now. (The
            // end is noted before the logout writes, so a check that missed it finds it here.)
            do throws(ServiceRefusal) { try sessions.check(outcome.identity) } catch {
                _ = try? await ca.revoke(serial: issued.serial, reason: .cessationOfOperation)
                return .error(401, error.code, error.message)
            }
            if issued.isRepeat {
                // A retry with a one-use token already used for this key: the same certificate again.
                counters.counter("tokenserver_certificates_repeated_total", [("provider", request.providerName)]).increment()
            } else {
                counters.counter("tokenserver_certificates_issued_total", [("provider", request.providerName)]).increment()
            }
            return .json(200, bytes: issued.replyJSON())
        } catch {
            let status: Int
            switch error.code {
            case .invalidCSR, .badCSRSignature, .unsupportedKey: status = 400
            case .policyViolation, .tokenReused, .tokenExpired, .factorRequired, .acrNotAccepted, .signInTooOld: status = 403
            case .ledger:
                logger.error("issuance refused: the ledger cannot record", metadata: ["error": "\(error.message)"])
                return .ledgerUnavailable(error)
            default:
                logger.error("issuance failed", metadata: ["code": "\(error.code)", "error": "\(error.message)"])
                status = 500
            }
            return .error(status, error.code.rawValue, error.message)
        }
    }

    /// Renewal (`POST /v1/certificates/renew`, `{csr, validitySeconds?}`), authenticated by mutual
    /// TLS with the device's current certificate (`clientCertificateDER`, what the TLS handshake
    /// verified): a new certificate with the same identity, recorded as the renewal of the current
    /// one, never valid past `sessions.maxSessionAgeSeconds` after the original sign-in. No
    /// identity-provider token is needed.
    public func renewCertificate(_ body: [UInt8], clientCertificateDER: [UInt8]?) async -> ServiceResponse {
        guard let presented = clientCertificateDER else {
            return .error(
                401, "client_certificate_required",
                "renewal is authenticated by the current certificate over mutual TLS (the server must run with tls)")
        }
        let object: [String: JSONValue]
        switch Self.jsonObject(body, members: ["csr", "validitySeconds"]) {
        case .success(let parsed): object = parsed
        case .failure(let refusal): return refusal.response
        }
        guard let csr = object["csr"]?.stringValue else { return .error(400, "invalid_request", "\"csr\" must be a string") }
        var validity: Double?
        if let given = object["validitySeconds"] {
            guard let seconds = given.doubleValue else { return .error(400, "invalid_request", "\"validitySeconds\" must be a number") }
            validity = seconds
        }
        do {
            let (issued, previous) = try await ca.renew(
                presented: presented, csr: Array(csr.utf8), maximumSessionAge: configuration.maxSessionAge, validity: validity)
            if let end = sessions.endedAt(previous.commonName), end >= previous.sessionStart ?? previous.issuedAt {
                // Ended after the session the current certificate continues began: the logout
                // revoked that certificate, or — recorded by an instance whose list had not heard
                // of the logout yet — should have; neither it nor a renewal racing the logout on
                // another instance may carry the session on (compared with the issue time, a
                // certificate recorded after the logout renewed until the session limit).
                _ = try? await ca.revoke(serial: issued.serial, reason: .cessationOfOperation)
                return .error(401, "session_ended", "the account's sessions were ended; sign in again")
            }
            counters.counter("tokenserver_certificates_renewed_total").increment()
            return .json(200, bytes: issued.replyJSON(renewalOf: previous.serial))
        } catch {
            let status: Int
            switch error.code {
            case .invalidCSR, .badCSRSignature, .unsupportedKey: status = 400
            case .untrustedPeer: status = 401
            case .revoked, .tokenExpired, .sessionExpired, .policyViolation: status = 403
            case .ledger:
                logger.error("renewal refused: the ledger cannot record", metadata: ["error": "\(error.message)"])
                return .ledgerUnavailable(error)
            default:
                logger.error("renewal failed", metadata: ["code": "\(error.code)", "error": "\(error.message)"])
                status = 500
            }
            return .error(status, error.code.rawValue, error.message)
        }
    }

    /// Logout (`POST /v1/logout`, `{provider, token}`, authenticated by the user's own token):
    /// revokes every unexpired certificate of the account and ends its sessions, so its tokens
    /// issued before now are refused — on every instance sharing the ledger — until they expire.
    /// → `{account, revoked: [serial], endedAt}`.
    public func logout(_ body: [UInt8]) async -> ServiceResponse {
        let request: Request
        switch parse(body, needs: ["provider", "token"]) {
        case .failure(let error): return error.response
        case .success(let parsed): request = parsed
        }
        let outcome: ProviderVerifier.Outcome
        switch await verifiedCallerOrError(request) {
        case .failure(let error): return error.response
        case .success(let verified): outcome = verified
        }
        return await endSessions(of: outcome.identity.accountUID, reason: .cessationOfOperation, by: "logout")
    }

    /// Revokes an account's certificates and ends its sessions; the answer lists what was revoked.
    func endSessions(of account: String, reason: LedgerEntry.RevocationReason, by: String) async -> ServiceResponse {
        let now = Date()
        // Noted before the ledger's write: an issuance on this instance that checked before this
        // line and records after the revocation below finds the end when it checks again. (A
        // failed write leaves this instance refusing the account's older tokens: it fails closed.)
        sessions.note(account, endedAt: now)
        do {
            let revoked = try await ca.ledger.revokeAccount(account, reason: reason, at: now)
            counters.counter("tokenserver_sessions_ended_total", [("by", by)]).increment()
            logger.notice("sessions ended", metadata: ["account": "\(account)", "by": "\(by)", "revoked": "\(revoked.count)"])
            return .json(200, .object([
                "account": .string(account), "revoked": .array(revoked.map { .string($0.serial) }),
                "endedAt": .string(ISO8601Text.string(now)), "reason": .string(reason.name),
            ]))
        } catch {
            logger.error("ending sessions failed", metadata: ["code": "\(error.code)", "error": "\(error.message)"])
            if error.code == .ledger { return .ledgerUnavailable(error) }
            return .error(error.code == .invalidRequest ? 400 : 500, error.code.rawValue, error.message)
        }
    }

    /// An administrator's revocation (`POST /v1/admin/revoke`, `Authorization: Bearer <secret>`):
    /// `{serial, reason?}` revokes one certificate, `{account, reason?}` every certificate of an
    /// account and its sessions. Reasons are RFC 5280's names (default `unspecified`).
    public func adminRevoke(_ body: [UInt8], authorization: String?) async -> ServiceResponse {
        if let refusal = adminRefusal(authorization) { return refusal }
        let object: [String: JSONValue]
        switch Self.jsonObject(body, members: ["serial", "account", "reason"]) {
        case .success(let parsed): object = parsed
        case .failure(let refusal): return refusal.response
        }
        var reason = LedgerEntry.RevocationReason.unspecified
        if let given = object["reason"] {
            guard let name = given.stringValue, let parsed = LedgerEntry.RevocationReason(name: name) else {
                let names = LedgerEntry.RevocationReason.allCases.map(\.name).joined(separator: ", ")
                return .error(400, "invalid_request", "\"reason\" must be one of \(names)")
            }
            reason = parsed
        }
        switch (object["serial"], object["account"]) {
        case (let serial?, nil):
            guard let serial = serial.stringValue, !serial.isEmpty, serial.utf8.count <= 64, serial.allSatisfy(\.isHexDigit) else {
                return .error(400, "invalid_request", "\"serial\" must be a hex string")
            }
            do {
                let entry = try await ca.revoke(serial: serial, reason: reason)
                logger.notice("certificate revoked by an admin", metadata: ["serial": "\(entry.serial)"])
                // The reason the ledger holds: a second revocation keeps the first one's (it said
                // the reason asked for, while the CRL kept the first).
                var stored = reason
                var revokedAt: Date?
                if case .revoked(let at, let held) = entry.status { (stored, revokedAt) = (held, at) }
                var reply: [String: JSONValue] = [
                    "revoked": .array([.string(entry.serial)]), "account": .string(entry.commonName), "reason": .string(stored.name),
                ]
                if let revokedAt { reply["revokedAt"] = .string(ISO8601Text.string(revokedAt)) }
                return .json(200, .object(reply))
            } catch {
                if error.code == .ledger { return .ledgerUnavailable(error) }
                return .error(error.code == .notFound ? 404 : 500, error.code.rawValue, error.message)
            }
        case (nil, let account?):
            guard let account = account.stringValue, !account.isEmpty, account.utf8.count <= 64 else {
                return .error(400, "invalid_request", "\"account\" must be a string of 1 to 64 bytes")
            }
            return await endSessions(of: account, reason: reason, by: "admin")
        default:
            return .error(400, "invalid_request", "give exactly one of \"serial\" and \"account\"")
        }
    }

    /// Why an admin request is refused (no admin credential configured: 404; a missing or wrong
    /// bearer: 401), or nil for the administrator.
    func adminRefusal(_ authorization: String?) -> ServiceResponse? {
        guard let adminToken else {
            return .error(404, "admin_disabled", "no admin credential is configured (admin.tokenFile)")
        }
        guard let authorization, AdminCredential.matches(authorization, adminToken) else {
            counters.counter("tokenserver_admin_refusals_total").increment()
            return .error(401, "unauthorized", "an admin bearer credential is required")
        }
        return nil
    }

    /// An administrator provisions a device (`POST /v1/admin/certificates`, `Authorization:
    /// Bearer <secret>`), Ditto's Manual identity: `{deviceID, csr, validitySeconds, by?}` → the
    /// certificate reply, recorded as provider `manual` (PeerCA's `PeerCertificateAuthority.issueManual(deviceID:csr:validity:by:)`).
    public func adminIssue(_ body: [UInt8], authorization: String?) async -> ServiceResponse {
        if let refusal = adminRefusal(authorization) { return refusal }
        let object: [String: JSONValue]
        switch Self.jsonObject(body, members: ["deviceID", "csr", "validitySeconds", "by"]) {
        case .success(let parsed): object = parsed
        case .failure(let refusal): return refusal.response
        }
        guard let deviceID = object["deviceID"]?.stringValue else { return .error(400, "invalid_request", "\"deviceID\" must be a string") }
        guard let csr = object["csr"]?.stringValue else { return .error(400, "invalid_request", "\"csr\" must be a string") }
        guard let validity = object["validitySeconds"]?.doubleValue else { return .error(400, "invalid_request", "\"validitySeconds\" must be a number") }
        var by = "admin"
        if let given = object["by"] {
            guard let name = given.stringValue else { return .error(400, "invalid_request", "\"by\" must be a string") }
            by = name
        }
        do {
            let issued = try await ca.issueManual(deviceID: deviceID, csr: try ValidatedCSR(Array(csr.utf8)), validity: validity, by: by)
            counters.counter("tokenserver_certificates_issued_total", [("provider", PeerCertificateAuthority.manualProvider)]).increment()
            logger.notice("device provisioned by an admin", metadata: ["serial": "\(issued.serial)", "device": "\(deviceID)"])
            return .json(200, bytes: issued.replyJSON())
        } catch {
            switch error.code {
            case .invalidCSR, .badCSRSignature, .unsupportedKey, .policyViolation: return .error(400, error.code.rawValue, error.message)
            case .ledger:
                logger.error("provisioning refused: the ledger cannot record", metadata: ["error": "\(error.message)"])
                return .ledgerUnavailable(error)
            default:
                logger.error("provisioning failed", metadata: ["code": "\(error.code)", "error": "\(error.message)"])
                return .error(500, error.code.rawValue, error.message)
            }
        }
    }

    /// The CA roots (PEM), for peers to trust.
    public var caPEM: String { ca.authority.root.pemString }

    /// The CA's signed CRL (DER), made again only when needed (`PeerCertificateAuthority.crl(validity:)`).
    public func crl() async -> ServiceResponse {
        do { return ServiceResponse(status: 200, contentType: "application/pkix-crl", body: try await ca.crl()) } catch {
            logger.error("CRL failed", metadata: ["error": "\(error)"])
            if error.code == .ledger { return .ledgerUnavailable(error) }
            return .error(500, error.code.rawValue, "the CRL could not be made")
        }
    }

    /// An OCSP response (DER) for a DER request.
    public func ocsp(_ body: [UInt8]) async -> ServiceResponse {
        ServiceResponse(status: 200, contentType: "application/ocsp-response", body: await ca.ocspResponse(for: body))
    }

}

struct ServiceResponseError: Error {
    let response: ServiceResponse
    init(_ response: ServiceResponse) { self.response = response }
}
