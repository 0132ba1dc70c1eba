import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A token decoded without any verification, for inspection (`tokentool decode`). Nothing in it
/// may be trusted.
public struct UnverifiedToken: Sendable {
    /// Header members.
    public let header: [String: JSONValue]
    /// The payload parsed as JSON when it is JSON, else nil (see ``payloadBytes``).
    public let payload: JSONValue?
    public let payloadBytes: [UInt8]
    public let signature: [UInt8]

    /// Splits and decodes a compact JWS strictly (base64url, header JSON), checking nothing else.
    public init(_ token: String, maxTokenBytes: Int = 64 * 1024) throws(TokenError) {
        try CompactJWS.checkSize(token.utf8.count, limit: maxTokenBytes)
        let decoded = try token.withUTF8Bytes { buffer throws(TokenError) -> ([String: JSONValue], [UInt8], [UInt8]) in
            let parts = try CompactJWS.split(buffer)
            let header = try CompactJWS.decodeHeader(parts.header)
            guard let payload = Base64URL.decode(parts.payload) else {
                throw CompactJWS.invalidBase64("payload", parts.payload)
            }
            guard let signature = Base64URL.decode(parts.signature) else {
                throw CompactJWS.invalidBase64("signature", parts.signature)
            }
            return (header, payload, signature)
        }
        header = decoded.0
        payloadBytes = decoded.1
        signature = decoded.2
        payload = try? JSONValue.parse(decoded.1)
    }
}
