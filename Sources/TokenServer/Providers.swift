import Foundation
import Logging
import PDAKeys
import PeerCA
import TokenKit

/// A configured identity provider, ready to verify tokens.
struct ProviderVerifier: Sendable {
    let name: String
    let verifier: TokenSourceVerifier
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
        let verified: TokenSourceVerifier.Verified
        do throws(RemoteVerificationError) { verified = try await verifier.verify(token) } catch { throw error.underlying }
        var info: [String: JSONValue] = [:]
        if let identity = verified.hat {
            info["pda"] = .string(identity.pdaHost)
            if let application = identity.application { info["application"] = .string(application) }
            if let version = identity.applicationVersion { info["applicationVersion"] = .string(version) }
        }
        return Outcome(token: verified.token, userInfo: info)
    }
}

/// The providers of a configuration, built from `TokenVerifierDescription`s; owns the
/// key stores (one per distinct fetch configuration) they share.
struct ProviderSet: Sendable {
    let providers: [String: ProviderVerifier]
    let stores: KeyStorePool

    static func build(_ configuration: ServerConfiguration, logger: Logging.Logger) throws -> ProviderSet {
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
                    name: name, verifier: verifier, permissions: provider.permissions ?? .everything, permissionsClaim: provider.permissionsClaim)
            }
        } catch {
            let pool = stores
            Task { await pool.shutdown() }
            throw error
        }
        return ProviderSet(providers: providers, stores: stores)
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
            guard let secret = FileManager.default.contents(atPath: path) else {
                throw ConfigurationError(key: "\(key).secretFile", "cannot read \(path)")
            }
            do { return TokenVerifierDescription(keys: .local([try JWTKey.hmac(secret: Array(secret))]), policy: policy) } catch {
                throw ConfigurationError(key: "\(key).secretFile", error.message)
            }
        case .pem:
            let path = provider.keyFile ?? ""
            guard let contents = FileManager.default.contents(atPath: path) else {
                throw ConfigurationError(key: "\(key).keyFile", "cannot read \(path)")
            }
            do { return TokenVerifierDescription(keys: .local(try KeyFileContents(Array(contents)).keys.map(\.publicKey)), policy: policy) } catch {
                throw ConfigurationError(key: "\(key).keyFile", error.message)
            }
        }
    }

    func shutdown() async {
        await stores.shutdown()
    }
}
