/// Strict base64url (RFC 4648 §5) as JWS uses it (RFC 7515 §2): no padding, no line breaks,
/// no whitespace, and the unused bits of the last character must be zero, so every byte string
/// has exactly one encoding.
public enum Base64URL {
    private static let alphabet: [UInt8] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// The decode table pre-shifted for each of a quantum's four positions (256 entries each):
    /// OR-ing four lookups gives the quantum's 24 bits; a character outside the alphabet sets
    /// bit 31 in any position. The last 256 entries are the plain 6-bit values.
    private static let shiftedTables: [UInt32] = {
        var tables = [UInt32](repeating: 0x8000_0000, count: 1024)
        for (i, c) in alphabet.enumerated() {
            let value = UInt32(i)
            tables[Int(c)] = value << 18
            tables[256 + Int(c)] = value << 12
            tables[512 + Int(c)] = value << 6
            tables[768 + Int(c)] = value
        }
        return tables
    }()

    /// Encodes bytes without padding.
    public static func encode<Bytes: Collection>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        String(decoding: Base64Encoding.encode(Array(bytes), alphabet: alphabet, padded: false), as: UTF8.self)
    }

    /// Decodes a strict base64url string; `nil` when it is not canonical base64url.
    public static func decode(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { decode(UnsafeRawBufferPointer($0)) }
    }

    /// Decodes a strict base64url byte range; `nil` when it is not canonical base64url.
    static func decode(_ input: UnsafeRawBufferPointer) -> [UInt8]? {
        guard let outCount = decodedCount(input.count) else { return nil }
        var ok = true
        let result = [UInt8](unsafeUninitializedCapacity: outCount) { out, initialized in
            ok = decode(input, into: out)
            initialized = ok ? outCount : 0
        }
        return ok ? result : nil
    }

    /// Number of bytes `decode` produces for `count` characters, or nil for an impossible length.
    static func decodedCount(_ count: Int) -> Int? {
        if count % 4 == 1 { return nil }
        return count / 4 * 3 + (count % 4 == 0 ? 0 : count % 4 - 1)
    }

    /// Decodes into `out`, which must hold exactly `decodedCount(input.count)` bytes.
    static func decode(_ input: UnsafeRawBufferPointer, into out: UnsafeMutableBufferPointer<UInt8>) -> Bool {
        let n = input.count
        guard let expected = decodedCount(n), expected == out.count else { return false }
        guard let input = input.baseAddress, let out = out.baseAddress else { return true }  // empty
        return shiftedTables.withUnsafeBufferPointer { tables -> Bool in
            guard let t = tables.baseAddress else { return false }
            func byte(_ i: Int) -> Int { Int(input.load(fromByteOffset: i, as: UInt8.self)) }
            var i = 0
            var o = 0
            // Invalid characters set bit 31; collected in `bad` and checked once at the end (the
            // output is discarded when the input is invalid).
            var bad: UInt32 = 0
            for _ in 0..<(n / 4) {
                let v = t[byte(i)] | t[256 + byte(i + 1)] | t[512 + byte(i + 2)] | t[768 + byte(i + 3)]
                bad |= v
                out[o] = UInt8(truncatingIfNeeded: v >> 16)
                out[o + 1] = UInt8(truncatingIfNeeded: v >> 8)
                out[o + 2] = UInt8(truncatingIfNeeded: v)
                i += 4
                o += 3
            }
            // A tail of 2 or 3 characters; its unused low bits must be zero.
            switch n - i {
            case 2:
                let v = t[byte(i)] | t[256 + byte(i + 1)]
                bad |= v | (v & 0xFFFF == 0 ? 0 : 0x8000_0000)
                out[o] = UInt8(truncatingIfNeeded: v >> 16)
            case 3:
                let v = t[byte(i)] | t[256 + byte(i + 1)] | t[512 + byte(i + 2)]
                bad |= v | (v & 0xFF == 0 ? 0 : 0x8000_0000)
                out[o] = UInt8(truncatingIfNeeded: v >> 16)
                out[o + 1] = UInt8(truncatingIfNeeded: v >> 8)
            default:
                break  // 0 (1 is refused by decodedCount)
            }
            return bad & 0x8000_0000 == 0
        }
    }
}

/// The base64 encoder base64url (JWS: its own alphabet, no padding) and PEM (the standard alphabet,
/// `=`-padded) share, writing straight into the result's storage.
enum Base64Encoding {
    /// `input` in the 64 characters of `alphabet`; the last group `=`-padded to four when `padded`.
    static func encode(_ input: [UInt8], alphabet: [UInt8], padded: Bool) -> [UInt8] {
        let rest = input.count % 3
        let count = input.count / 3 * 4 + (rest == 0 ? 0 : padded ? 4 : rest + 1)
        return alphabet.withUnsafeBufferPointer { alphabet in
            input.withUnsafeBufferPointer { input in
                [UInt8](unsafeUninitializedCapacity: count) { out, initialized in
                    let whole = input.count - rest
                    var i = 0, o = 0
                    while i < whole {
                        let v = UInt32(input[i]) << 16 | UInt32(input[i + 1]) << 8 | UInt32(input[i + 2])
                        out[o] = alphabet[Int(v >> 18 & 63)]
                        out[o + 1] = alphabet[Int(v >> 12 & 63)]
                        out[o + 2] = alphabet[Int(v >> 6 & 63)]
                        out[o + 3] = alphabet[Int(v & 63)]
                        i += 3
                        o += 4
                    }
                    if rest > 0 {  // one or two bytes left: two or three characters, then the padding
                        let v = UInt32(input[i]) << 16 | (rest == 2 ? UInt32(input[i + 1]) << 8 : 0)
                        out[o] = alphabet[Int(v >> 18 & 63)]
                        out[o + 1] = alphabet[Int(v >> 12 & 63)]
                        o += 2
                        if rest == 2 {
                            out[o] = alphabet[Int(v >> 6 & 63)]
                            o += 1
                        }
                        if padded {
                            while o < count {
                                out[o] = UInt8(ascii: "=")
                                o += 1
                            }
                        }
                    }
                    initialized = o
                }
            }
        }
    }
}
