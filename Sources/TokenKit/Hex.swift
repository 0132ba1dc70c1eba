/// Lower-case hexadecimal text for bytes: serial numbers, key fingerprints, SPIFFE segments (PeerCA),
/// the JSON writer's `\u00XX` escapes.
///
/// Two digits per byte written into one preallocated string: `String(format: "%02x")` per byte went
/// through Foundation's formatter and cost about 50 µs per issued certificate (fingerprint and
/// serial), a fifth of the whole issuance.
package enum Hex {
    /// Appends `byte`'s two hex digits to `out`.
    package static func append(_ byte: UInt8, to out: inout [UInt8]) {
        out.append(digit(byte >> 4))
        out.append(digit(byte & 0x0f))
    }

    /// `bytes` as lower-case hex, two characters per byte.
    package static func encode<Bytes: Sequence<UInt8>>(_ bytes: Bytes) -> String {
        if let text = bytes.withContiguousStorageIfAvailable({ encode(UnsafeRawBufferPointer($0)) }) { return text }
        return Array(bytes).withUnsafeBytes { encode($0) }
    }

    /// `bytes` as lower-case hex, written straight into the string's storage (a digest's
    /// `withUnsafeBytes`: iterating a swift-crypto digest as a sequence costs more than the hex).
    package static func encode(_ bytes: UnsafeRawBufferPointer) -> String {
        String(unsafeUninitializedCapacity: bytes.count * 2) { out in
            var index = 0
            for byte in bytes {
                out[index] = digit(byte >> 4)
                out[index + 1] = digit(byte & 0x0f)
                index += 2
            }
            return index
        }
    }

    /// The ASCII digit for a nibble (0…15).
    private static func digit(_ nibble: UInt8) -> UInt8 { nibble < 10 ? 0x30 + nibble : 0x57 + nibble }
}
