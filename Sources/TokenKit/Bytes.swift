#if canImport(Glibc)
import Glibc
#endif

extension String {
    /// Runs `body` over the string's UTF-8 bytes, preserving the typed error.
    @inline(__always)
    func withUTF8Bytes<R>(_ body: (UnsafeRawBufferPointer) throws(TokenError) -> R) throws(TokenError) -> R {
        var copy = self
        let result: Result<R, TokenError> = copy.withUTF8 { buffer in
            Result { () throws(TokenError) -> R in try body(UnsafeRawBufferPointer(buffer)) }
        }
        return try result.get()
    }
}

extension Array where Element == UInt8 {
    /// Whether these bytes equal `other` exactly.
    func sameBytes(as other: UnsafeRawBufferPointer) -> Bool {
        guard count == other.count else { return false }
        return withUnsafeBytes { mine in
            guard let a = mine.baseAddress, let b = other.baseAddress else { return other.isEmpty }
            return memcmp(a, b, other.count) == 0
        }
    }

    /// Runs `body` over the bytes, preserving the typed error.
    func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws(TokenError) -> R) throws(TokenError) -> R {
        let result: Result<R, TokenError> = withUnsafeBytes { buffer in
            Result { () throws(TokenError) -> R in try body(buffer) }
        }
        return try result.get()
    }
}
