import Foundation

/// Signs JWTs (and plain JWS payloads) with a private key or HMAC secret.
///
/// ECDSA signatures are produced as raw r‖s of the curve's exact length (RFC 7518 §3.4), RSA-PSS
/// with a salt as long as the hash (§3.5). The header is `{"alg", "kid" (when the key has one),
/// "typ": "JWT"}` plus any extra members.
///
/// ```swift
/// let key = try JWTKey.generate(.ec(.p256), kid: "device-ca-1")
/// let signer = try JWTSigner(key: key)
/// let jwt = try signer.sign(claims: [
///     "sub": .string("user-1"),
///     "exp": .integer(Int(Date().timeIntervalSince1970) + 3600),
/// ])
/// ```
public struct JWTSigner: Sendable {
    public let key: JWTKey
    public let algorithm: JWTAlgorithm

    /// A signer for `key`.
    ///
    /// - Parameters:
    ///   - key: a private key or an HMAC secret.
    ///   - algorithm: one of the key's algorithms; may be omitted when the key has one.
    public init(key: JWTKey, algorithm: JWTAlgorithm? = nil) throws(TokenError) {
        guard key.isPrivate else { throw TokenError(.privateKeyRequired, "signing needs a private key or secret; this is a public key") }
        if let algorithm {
            guard key.algorithms.contains(algorithm) else {
                throw TokenError(.algorithmNotAllowed, "the key does not allow \(algorithm) (it allows \(key.algorithms.map(\.rawValue).sorted().joined(separator: ", ")))")
            }
            self.algorithm = algorithm
        } else {
            guard key.algorithms.count == 1, let only = key.algorithms.first else {
                throw TokenError(.algorithmNotAllowed, "the key allows several algorithms; name one")
            }
            self.algorithm = only
        }
        self.key = key
    }

    /// Signs a JWT whose payload is `claims` (serialized compactly, members sorted).
    public func sign(claims: [String: JSONValue], header extra: [String: JSONValue] = [:]) throws(TokenError) -> String {
        try signJWS(payload: Array(JSONValue.object(claims).compactText.utf8), header: extra)
    }

    /// Signs a JWT whose payload is `payload` encoded as JSON (`Date` as NumericDate seconds).
    public func sign<T: Encodable>(_ payload: T, header extra: [String: JSONValue] = [:]) throws(TokenError) -> String {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data: Data
        do {
            data = try encoder.encode(payload)
        } catch {
            throw TokenError(.encoding, "the payload cannot be encoded as JSON: \(error)")
        }
        guard data.first == UInt8(ascii: "{") else { throw TokenError(.encoding, "a JWT payload must encode as a JSON object") }
        return try signJWS(payload: Array(data), header: extra)
    }

    /// The signature over an exact signing input (`base64url(header) "." base64url(payload)`),
    /// for callers that assemble the header themselves (tests, fuzzers, detached signatures).
    /// ECDSA signatures are raw r‖s.
    public func signature(forSigningInput input: [UInt8]) throws(TokenError) -> [UInt8] {
        try NativeSignatures.sign(algorithm, key: key, message: input)
    }

    /// Signs arbitrary payload bytes as a compact JWS.
    public func signJWS(payload: [UInt8], header extra: [String: JSONValue] = [:]) throws(TokenError) -> String {
        var header = extra
        header["alg"] = .string(algorithm.rawValue)
        if header["typ"] == nil { header["typ"] = .string("JWT") }
        if header["kid"] == nil, let kid = key.kid { header["kid"] = .string(kid) }
        let signingInput = Base64URL.encode(Array(JSONValue.object(header).compactText.utf8)) + "." + Base64URL.encode(payload)
        let signature = try NativeSignatures.sign(algorithm, key: key, message: Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }
}
