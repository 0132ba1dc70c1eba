internal import COpenSSL
import Foundation

/// A JSON Web Key Set (RFC 7517 §5).
///
/// Set-level rules, checked at creation: `kid`s are unique; symmetric (`oct`) keys are not mixed
/// with asymmetric ones; public keys are not mixed with private ones. Keys that are not for JWS
/// signatures (`use: "enc"`, an encryption `alg`, an unknown `kty`) are skipped, as RFC 7517 §5
/// asks, and listed in ``skipped``.
public struct JWKSet: Sendable {
    /// The signature keys of the set.
    public let keys: [JWTKey]
    /// One line per member that was skipped, saying why.
    public let skipped: [String]

    /// Parses a JWKS document (`{"keys": [...]}`).
    public init(json text: String) throws(TokenError) {
        let value = try JSONValue.parse(text)
        guard case .object(let members) = value, case .array(let items)? = members["keys"] else {
            throw TokenError(.invalidKeySet, "a JWK Set is a JSON object with a \"keys\" array")
        }
        var keys: [JWTKey] = []
        var skipped: [String] = []
        for (index, item) in items.enumerated() {
            guard case .object(let jwk) = item else { throw TokenError(.invalidKeySet, "keys[\(index)] is not a JSON object") }
            if let reason = JWKSet.skipReason(jwk) {
                skipped.append("keys[\(index)]: \(reason)")
                continue
            }
            do {
                keys.append(try JWTKey(jwk: jwk))
            } catch {
                throw TokenError(error.code, "keys[\(index)]: \(error.message)")
            }
        }
        try self.init(keys: keys, skipped: skipped)
    }

    /// A set from keys already created, with the set-level rules applied.
    public init(keys: [JWTKey]) throws(TokenError) {
        try self.init(keys: keys, skipped: [])
    }

    private init(keys: [JWTKey], skipped: [String]) throws(TokenError) {
        var seen = Set<String>()
        for key in keys {
            if let kid = key.kid, !seen.insert(kid).inserted {
                throw TokenError(.invalidKeySet, "two keys share the kid \"\(JSONParser.printable(kid))\"")
            }
        }
        let symmetric = keys.filter { $0.type.isSymmetric }.count
        if symmetric > 0, symmetric < keys.count {
            throw TokenError(.invalidKeySet, "the set mixes HMAC secrets with public-key keys")
        }
        let privateCount = keys.filter { $0.isPrivate && !$0.type.isSymmetric }.count
        if privateCount > 0, privateCount < keys.count - symmetric {
            throw TokenError(.invalidKeySet, "the set mixes public and private keys")
        }
        self.keys = keys
        self.skipped = skipped
    }

    static func skipReason(_ jwk: [String: JSONValue]) -> String? {
        if case .string(let use)? = jwk["use"], use != "sig" { return "use is \"\(JSONParser.printable(use))\", not \"sig\"" }
        if case .string(let kty)? = jwk["kty"], !["RSA", "EC", "OKP", "oct"].contains(kty) {
            return "kty \"\(JSONParser.printable(kty))\" is not understood"
        }
        if case .string(let alg)? = jwk["alg"], JWTAlgorithm(rawValue: alg) == nil {
            return "alg \"\(JSONParser.printable(alg))\" is not a JWS algorithm TokenKit supports"
        }
        return nil
    }

    /// The set as JSON (public members only unless `includePrivate`).
    public func jsonText(includePrivate: Bool = false) throws(TokenError) -> String {
        var items: [JSONValue] = []
        for key in keys { items.append(.object(try key.jwk(includePrivate: includePrivate))) }
        return JSONValue.object(["keys": .array(items)]).prettyText
    }
}
