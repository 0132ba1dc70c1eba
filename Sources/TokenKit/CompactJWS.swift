import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The three segments of a compact JWS.
struct CompactJWS {
    let header: UnsafeRawBufferPointer
    let payload: UnsafeRawBufferPointer
    let signature: UnsafeRawBufferPointer
    /// `header '.' payload`, the bytes the signature covers.
    let signingInput: UnsafeRawBufferPointer

    static func checkSize(_ count: Int, limit: Int) throws(TokenError) {
        guard count <= limit else {
            throw TokenError(.tokenTooLarge, "the token is \(count) bytes; at most \(limit) are accepted")
        }
    }

    static func split(_ token: UnsafeRawBufferPointer) throws(TokenError) -> CompactJWS {
        func dot(after start: Int) -> Int? {
            guard start < token.count, let base = token.baseAddress,
                let found = memchr(base + start, Int32(UInt8(ascii: ".")), token.count - start)
            else { return nil }
            return base.distance(to: UnsafeRawPointer(found))
        }
        guard let first = dot(after: 0), let second = dot(after: first + 1), dot(after: second + 1) == nil else {
            throw TokenError(.malformed, "a compact JWS has exactly three dot-separated segments")
        }
        guard first > 0 else { throw TokenError(.malformed, "the header segment is empty") }
        return CompactJWS(
            header: UnsafeRawBufferPointer(rebasing: token[0..<first]),
            payload: UnsafeRawBufferPointer(rebasing: token[(first + 1)..<second]),
            signature: UnsafeRawBufferPointer(rebasing: token[(second + 1)...]),
            signingInput: UnsafeRawBufferPointer(rebasing: token[0..<second]))
    }

    static func decodeHeader(_ segment: UnsafeRawBufferPointer) throws(TokenError) -> [String: JSONValue] {
        guard let bytes = Base64URL.decode(segment) else {
            throw TokenError(.invalidBase64, "the header segment is not strict base64url")
        }
        return try bytes.withBytes { buffer throws(TokenError) in
            try JSONParser.parseObject(buffer, what: "the header")
        }
    }
}
