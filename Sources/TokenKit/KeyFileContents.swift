internal import COpenSSL
import Foundation

/// The keys in a key file, whatever its form: a JWK Set, one JWK, or PEM/DER (public key,
/// private key or certificate).
///
/// ```swift
/// let file = try KeyFileContents(Array(try Data(contentsOf: url)))
/// let verifier = try JWTVerifier(keys: file.keys)
/// ```
public struct KeyFileContents: Sendable {
    /// The keys, in file order.
    public let keys: [JWTKey]
    /// JWK Set entries that were skipped (encryption keys, unknown types), one line each.
    public let skipped: [String]
    /// Whether the file was a JWK Set (several keys, each with its own `kid`).
    public let isSet: Bool

    public init(_ bytes: [UInt8]) throws(TokenError) {
        let text = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if text.hasPrefix("{") {
            if case .object(let members)? = try? JSONValue.parse(text), members["keys"] != nil {
                let set = try JWKSet(json: text)
                (keys, skipped, isSet) = (set.keys, set.skipped, true)
            } else {
                (keys, skipped, isSet) = ([try JWTKey(jwk: text)], [], false)
            }
        } else {
            (keys, skipped, isSet) = ([try JWTKey(pemOrDER: bytes)], [], false)
        }
    }
}
