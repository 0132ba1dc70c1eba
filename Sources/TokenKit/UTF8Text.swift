#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Strings from UTF-8 bytes that must be valid, without `String(validating:as:)`'s cost: that
/// initializer is generic over the encoding and looks up generic metadata at run time on every
/// call (≈ 17% of turning a token's payload into claims, `perf` on `tokenbench
/// --issuance-stages`). Here the bytes are decoded with `String(decoding:as:)` and kept only if
/// the decoding changed nothing: any invalid sequence comes out as U+FFFD (`EF BF BD`) in place
/// of bytes that were not those, so the text then differs from the input.
package enum UTF8Text {
    /// The text of `bytes` if they are valid UTF-8 (overlong forms, surrogates and values above
    /// U+10FFFF are not); nil otherwise.
    package static func validated(_ bytes: UnsafeRawBufferPointer) -> String? {
        let text = String(decoding: bytes, as: UTF8.self)
        let same =
            text.utf8.withContiguousStorageIfAvailable { decoded in
                guard decoded.count == bytes.count else { return false }
                guard let a = decoded.baseAddress, let b = bytes.baseAddress else { return true }  // both empty
                return memcmp(a, b, bytes.count) == 0
            } ?? text.utf8.elementsEqual(bytes)
        return same ? text : nil
    }

    /// ``validated(_:)`` of an array's bytes.
    package static func validated(_ bytes: [UInt8]) -> String? {
        bytes.withUnsafeBytes { validated($0) }
    }
}
