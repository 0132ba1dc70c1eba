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

    /// The `invalid_base64` error for a segment (`"header"`, `"payload"`, `"signature"`), with a
    /// hint when whitespace is the reason: a token copied with its trailing newline, a space left
    /// in front, or one wrapped over lines. Built only once decoding has failed.
    @inline(never)
    static func invalidBase64(_ name: String, _ segment: UnsafeRawBufferPointer) -> TokenError {
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D }
        var message = "the \(name) segment is not strict base64url"
        if let last = segment.last, isSpace(last), name == "signature" {
            message += " (the token ends with whitespace, e.g. a trailing newline: trim the token)"
        } else if let first = segment.first, isSpace(first), name == "header" {
            message += " (the token starts with whitespace: trim the token)"
        } else if segment.contains(where: isSpace) {
            message += " (it contains whitespace, e.g. a line break: remove it)"
        }
        return TokenError(.invalidBase64, message)
    }

    static func decodeHeader(_ segment: UnsafeRawBufferPointer) throws(TokenError) -> [String: JSONValue] {
        guard let bytes = Base64URL.decode(segment) else { throw invalidBase64("header", segment) }
        return try bytes.withBytes { buffer throws(TokenError) in
            try JSONParser.parseObject(buffer, what: "the header")
        }
    }
}
