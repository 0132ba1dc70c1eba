/// Lower-case hexadecimal text for bytes: serial numbers, key fingerprints, SPIFFE segments (PeerCA),
/// the JSON writer's `\u00XX` escapes.
///
/// A table lookup per nibble into one preallocated string: `String(format: "%02x")` per byte went
/// through Foundation's formatter and cost about 50 µs per issued certificate (fingerprint and
/// serial), a fifth of the whole issuance.
package enum Hex {
    private static let digits: [UInt8] = Array("0123456789abcdef".utf8)

    /// Appends `byte`'s two hex digits to `out`.
    package static func append(_ byte: UInt8, to out: inout [UInt8]) {
        out.append(digits[Int(byte >> 4)])
        out.append(digits[Int(byte & 0x0f)])
    }

    /// `bytes` as lower-case hex, two characters per byte.
    package static func encode<Bytes: Sequence<UInt8>>(_ bytes: Bytes) -> String {
        let count = bytes.underestimatedCount
        var out: [UInt8] = []
        out.reserveCapacity(count * 2)
        for byte in bytes { append(byte, to: &out) }
        return String(decoding: out, as: UTF8.self)
    }
}
