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

    static func json(_ status: Int, _ value: JSONValue) -> ServiceResponse {
        ServiceResponse(status: status, contentType: "application/json", body: Array(value.compactText.utf8))
    }

    static func error(_ status: Int, _ code: String, _ message: String) -> ServiceResponse {
        json(status, .object(["error": .object(["code": .string(code), "message": .string(message)])]))
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
    /// call ``prepare()`` once they run; ``TokenHTTPServer/serviceGroup(_:logger:signals:onRunning:)``
    /// does both.
    public static func start(configuration: ServerConfiguration, logger: Logger) async throws -> TokenService {
        try configuration.validate()
        let (authority, settings) = try ServerCA.loadOrCreate(configuration, logger: logger)
        let store = try LedgerStore.open(configuration.ledgerLocation, logger: logger)
        let policy = try settings.issuancePolicy()
        let ca = PeerCertificateAuthority(authority: authority, policy: policy, ledger: store.ledger)
        let providers = try ProviderSet.build(configuration, caPolicy: policy, logger: logger)
        return TokenService(
            configuration: configuration, ca: ca, providers: providers, logger: logger, appID: configuration.ca?.appID, store: store)
    }

    let store: LedgerStore

    init(configuration: ServerConfiguration, ca: PeerCertificateAuthority, providers: ProviderSet, logger: Logger, appID: String?, store: LedgerStore) {
        self.configuration = configuration
        self.ca = ca
        self.providers = providers
        self.logger = logger
        self.appID = appID
        self.store = store
    }

    /// What must run while the service is in use: the ledger's connection pool (PostgreSQL).
    public var services: [any Service] { store.services }

    /// Makes the ledger's tables if needed (PostgreSQL); needs ``services`` running.
    public func prepare() async throws {
        try await store.prepare()
    }

    /// Closes the HTTP clients of remote providers. (The ledger closes with its services.)
    public func shutdown() async {
        await providers.shutdown()
    }

    // MARK: Requests

    struct Request {
        let provider: ProviderVerifier
        let providerName: String
        let token: String
        let object: [String: JSONValue]
    }

    /// Parses `{provider, token, …}`; an error response when it is not that.
    func parse(_ body: [UInt8], needs: [String]) -> Result<Request, ServiceResponseError> {
        guard let value = try? JSONValue.parse(body), case .object(let object) = value else {
            return .failure(ServiceResponseError(.error(400, "invalid_request", "the body must be a JSON object")))
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
    /// userInfo}`. A refused token is a 200 with `authenticate: false` and an `error` object.
    public func authenticate(_ body: [UInt8]) async -> ServiceResponse {
        let request: Request
        switch parse(body, needs: ["provider", "token"]) {
        case .failure(let error): return error.response
        case .success(let parsed): request = parsed
        }
        let outcome: ProviderVerifier.Outcome
        do {
            outcome = try await request.provider.verify(request.token)
        } catch {
            return refusal(error, provider: request.providerName)
        }
        let claims = outcome.token.payload  // parsed once
        let permissions: JSONValue
        do throws(ServiceRefusal) { permissions = try request.provider.permissions(claims) } catch {
            return refusal(error, provider: request.providerName)
        }
        let now = Date().timeIntervalSince1970
        let expiration = outcome.identity.expiresAt.timeIntervalSince1970
        let seconds = max(0, min(Int(expiration - now), configuration.maxExpirationSeconds))
        var userInfo = outcome.identity.jsonValue.objectValue ?? [:]
        userInfo.merge(outcome.userInfo) { $1 }
        let response: JSONValue = .object([
            "authenticate": .bool(true), "authenticated": .bool(true), "expirationSeconds": .integer(seconds),
            "userID": .string(outcome.identity.accountUID),
            "permissions": permissions,
            "userInfo": .object(userInfo),
        ])
        Counter(label: "tokenserver_auth_decisions_total", dimensions: [("provider", request.providerName), ("result", "accepted")]).increment()
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
        Counter(label: "tokenserver_auth_decisions_total", dimensions: [("provider", provider), ("result", "refused")]).increment()
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
        do {
            outcome = try await request.provider.verify(request.token)
        } catch let error as TokenError {
            return .error(401, error.code.rawValue, error.message)
        } catch let error as PeerCAError {
            return .error(403, error.code.rawValue, error.message)
        } catch {
            return .error(503, "keys_unavailable", "the provider's keys cannot be fetched now")
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
            Counter(label: "tokenserver_certificates_issued_total", dimensions: [("provider", request.providerName)]).increment()
            return .json(200, .object([
                "certificate": .string(issued.chainPEM), "serial": .string(issued.serial),
                "notAfter": .string(ISO8601DateFormatter().string(from: issued.notAfter)), "spiffeID": .string(issued.identity.spiffeID),
                "identity": issued.identity.jsonValue,
            ]))
        } catch {
            let status: Int
            switch error.code {
            case .invalidCSR, .badCSRSignature, .unsupportedKey: status = 400
            case .policyViolation, .tokenReused, .tokenExpired, .factorRequired, .acrNotAccepted, .signInTooOld: status = 403
            default:
                logger.error("issuance failed", metadata: ["code": "\(error.code)", "error": "\(error.message)"])
                status = 500
            }
            return .error(status, error.code.rawValue, error.message)
        }
    }

    /// The CA roots (PEM), for peers to trust.
    public var caPEM: String { ca.authority.root.pemString }

    /// A fresh signed CRL (DER).
    public func crl() async -> ServiceResponse {
        do { return ServiceResponse(status: 200, contentType: "application/pkix-crl", body: try await ca.crl()) } catch {
            logger.error("CRL failed", metadata: ["error": "\(error)"])
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
