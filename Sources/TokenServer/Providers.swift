import Foundation
import Logging
import PDAKeys
import PeerCA
import TokenKit

/// A configured identity provider, ready to verify tokens.
struct ProviderVerifier: Sendable {
    enum Kind: Sendable {
        case local(JWTVerifier)
        case remote(RemoteJWTVerifier)
        case pda(HATTokenVerifier)
    }

    let name: String
    let kind: Kind
    let permissions: ServerConfiguration.Permissions
    let permissionsClaim: String?

    /// What a verified token says, for the webhook and the CA.
    struct Outcome: Sendable {
        let token: VerifiedToken
        var userInfo: [String: JSONValue]
    }

    /// Verifies a token. Throws `TokenError` for an invalid token, `KeySourceError` when keys
    /// cannot be had.
    func verify(_ token: String) async throws -> Outcome {
        switch kind {
        case .local(let verifier):
            let verified = try verifier.verify(token)
            return Outcome(token: verified, userInfo: [:])
        case .remote(let verifier):
            return Outcome(token: try await verifier.verify(token), userInfo: [:])
        case .pda(let verifier):
            let (identity, verified) = try await verifier.verifyWithToken(token)
            var info: [String: JSONValue] = ["pda": .string(identity.pdaHost)]
            if let application = identity.application { info["application"] = .string(application) }
            if let version = identity.applicationVersion { info["applicationVersion"] = .string(version) }
            return Outcome(token: verified, userInfo: info)
        }
    }
}

/// Builds the providers of a configuration; owns the HTTP key fetchers they share.
struct ProviderSet: Sendable {
    let providers: [String: ProviderVerifier]
    let fetchers: [HTTPKeyFetcher]

    static func build(_ configuration: ServerConfiguration, logger: Logging.Logger) throws -> ProviderSet {
        var fetchers: [String: HTTPKeyFetcher] = [:]
        var stores: [String: RemoteKeyStore] = [:]
        func store(caFile: String?) throws -> RemoteKeyStore {
            let key = caFile ?? ""
            if let existing = stores[key] { return existing }
            var fetch = KeyFetchConfiguration()
            if let caFile { fetch.trustRoots = .pemFile(caFile) }
            let fetcher = try HTTPKeyFetcher(configuration: fetch)
            let created = RemoteKeyStore(fetcher: fetcher, logger: logger)
            fetchers[key] = fetcher
            stores[key] = created
            return created
        }
        var providers: [String: ProviderVerifier] = [:]
        do {
            for (name, provider) in configuration.providers.sorted(by: { $0.key < $1.key }) {
                let key = "providers.\(name)"
                let policy = ClaimsPolicy(issuers: Set(provider.issuers ?? []), audiences: Set(provider.audiences ?? []))
                let kind: ProviderVerifier.Kind
                switch provider.type {
                case "pda":
                    var allowList = IssuerAllowList.hat
                    if let domains = provider.allowedDomains {
                        do throws(KeySourceError) { allowList = try IssuerAllowList(suffixes: domains) } catch {
                            throw ConfigurationError(key: "\(key).allowedDomains", error.message)
                        }
                    }
                    kind = .pda(HATTokenVerifier(store: try store(caFile: provider.caFile), allowList: allowList, applications: provider.applications.map(Set.init)))
                case "jwks":
                    kind = .remote(RemoteJWTVerifier(source: .jwks(url: provider.url ?? ""), store: try store(caFile: provider.caFile), policy: policy))
                case "oidc":
                    kind = .remote(RemoteJWTVerifier(source: .oidc(issuer: provider.issuer ?? ""), store: try store(caFile: provider.caFile), policy: policy))
                case "hs256":
                    let path = provider.secretFile ?? ""
                    try ConfigurationError.checkPrivate(path, key: "\(key).secretFile")
                    guard let secret = FileManager.default.contents(atPath: path) else {
                        throw ConfigurationError(key: "\(key).secretFile", "cannot read \(path)")
                    }
                    do { kind = .local(try JWTVerifier(key: try JWTKey.hmac(secret: Array(secret)), policy: policy)) } catch {
                        throw ConfigurationError(key: "\(key).secretFile", error.message)
                    }
                default:  // pem
                    let path = provider.keyFile ?? ""
                    guard let contents = FileManager.default.contents(atPath: path) else {
                        throw ConfigurationError(key: "\(key).keyFile", "cannot read \(path)")
                    }
                    do { kind = .local(try JWTVerifier(keys: try KeyFileContents(Array(contents)).keys.map(\.publicKey), policy: policy)) } catch {
                        throw ConfigurationError(key: "\(key).keyFile", error.message)
                    }
                }
                providers[name] = ProviderVerifier(
                    name: name, kind: kind, permissions: provider.permissions ?? .everything, permissionsClaim: provider.permissionsClaim)
            }
        } catch {
            for fetcher in fetchers.values { Task { await fetcher.shutdown() } }
            throw error
        }
        return ProviderSet(providers: providers, fetchers: Array(fetchers.values))
    }

    func shutdown() async {
        for fetcher in fetchers { await fetcher.shutdown() }
    }
}
