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

/// A token's decoded payload in one allocation of a non-generic class. Allocating a `[UInt8]`
/// looks up the generic metadata of its storage class on every call (about 30 ns of the HS256
/// hot path); this class's metadata is static.
final class PayloadStorage: ManagedBuffer<Int, UInt8> {}

/// Immutable payload bytes in a ``PayloadStorage``.
///
/// `@unchecked Sendable` is safe: the bytes are written only in ``decode(_:)``, before the value
/// exists. (`ManagedBuffer` subclasses cannot conform to `Sendable` themselves.)
struct PayloadBytes: @unchecked Sendable {
    private let storage: PayloadStorage

    /// Decodes a strict base64url segment; nil when it is not canonical base64url.
    static func decode(_ segment: UnsafeRawBufferPointer) -> PayloadBytes? {
        guard let count = Base64URL.decodedCount(segment.count) else { return nil }
        let storage = unsafeDowncast(PayloadStorage.create(minimumCapacity: count) { _ in count }, to: PayloadStorage.self)
        let decoded = storage.withUnsafeMutablePointerToElements { elements in
            Base64URL.decode(segment, into: UnsafeMutableBufferPointer(start: elements, count: count))
        }
        return decoded ? PayloadBytes(storage: storage) : nil
    }

    var count: Int { storage.header }

    var array: [UInt8] { withUnsafeBytes { Array($0) } }

    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        storage.withUnsafeMutablePointerToElements { body(UnsafeRawBufferPointer(start: $0, count: storage.header)) }
    }

    /// Runs `body` over the bytes, preserving the typed error.
    func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws(TokenError) -> R) throws(TokenError) -> R {
        let result: Result<R, TokenError> = withUnsafeBytes { buffer in
            Result { () throws(TokenError) -> R in try body(buffer) }
        }
        return try result.get()
    }
}
