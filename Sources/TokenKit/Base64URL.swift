/// Strict base64url (RFC 4648 §5) as JWS uses it (RFC 7515 §2): no padding, no line breaks,
/// no whitespace, and the unused bits of the last character must be zero, so every byte string
/// has exactly one encoding.
public enum Base64URL {
    private static let alphabet: [UInt8] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// 0xFF marks a byte outside the alphabet.
    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in alphabet.enumerated() { table[Int(c)] = UInt8(i) }
        return table
    }()

    /// The decode table pre-shifted for each of a quantum's four positions (256 entries each):
    /// OR-ing four lookups gives the quantum's 24 bits; a character outside the alphabet sets
    /// bit 31 in any position.
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
        let input = Array(bytes)
        var out = [UInt8]()
        out.reserveCapacity((input.count * 4 + 2) / 3)
        var i = 0
        while i + 3 <= input.count {
            let v = UInt32(input[i]) << 16 | UInt32(input[i + 1]) << 8 | UInt32(input[i + 2])
            out.append(alphabet[Int(v >> 18 & 63)])
            out.append(alphabet[Int(v >> 12 & 63)])
            out.append(alphabet[Int(v >> 6 & 63)])
            out.append(alphabet[Int(v & 63)])
            i += 3
        }
        let rest = input.count - i
        if rest == 1 {
            let v = UInt32(input[i]) << 16
            out.append(alphabet[Int(v >> 18 & 63)])
            out.append(alphabet[Int(v >> 12 & 63)])
        } else if rest == 2 {
            let v = UInt32(input[i]) << 16 | UInt32(input[i + 1]) << 8
            out.append(alphabet[Int(v >> 18 & 63)])
            out.append(alphabet[Int(v >> 12 & 63)])
            out.append(alphabet[Int(v >> 6 & 63)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes a strict base64url string; `nil` when it is not canonical base64url.
    public static func decode(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { decode(UnsafeRawBufferPointer($0)) }
    }

    /// Decodes a strict base64url byte range; `nil` when it is not canonical base64url.
    static func decode(_ input: UnsafeRawBufferPointer) -> [UInt8]? {
        let n = input.count
        if n % 4 == 1 { return nil }
        let outCount = n / 4 * 3 + (n % 4 == 0 ? 0 : n % 4 - 1)
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
        let fullQuanta = n / 4
        var i = 0
        var o = 0
        // Invalid characters set bit 31; collected in `bad` and checked once after the loop
        // (the output is discarded when the input is invalid).
        var bad: UInt32 = 0
        shiftedTables.withUnsafeBufferPointer { tables in
            guard let input = input.baseAddress, let out = out.baseAddress, let t = tables.baseAddress else { return }
            for _ in 0..<fullQuanta {
                let v = t[Int(input.load(fromByteOffset: i, as: UInt8.self))] | t[256 + Int(input.load(fromByteOffset: i + 1, as: UInt8.self))]
                    | t[512 + Int(input.load(fromByteOffset: i + 2, as: UInt8.self))] | t[768 + Int(input.load(fromByteOffset: i + 3, as: UInt8.self))]
                bad |= v
                out[o] = UInt8(truncatingIfNeeded: v >> 16)
                out[o + 1] = UInt8(truncatingIfNeeded: v >> 8)
                out[o + 2] = UInt8(truncatingIfNeeded: v)
                i += 4
                o += 3
            }
        }
        if bad & 0x8000_0000 != 0 { return false }
        return decodeTable.withUnsafeBufferPointer { table -> Bool in
            switch n - i {
            case 0:
                return true
            case 2:
                let a = table[Int(input[i])], b = table[Int(input[i + 1])]
                if (a | b) & 0xC0 != 0 || b & 0x0F != 0 { return false }
                out[o] = a << 2 | b >> 4
                return true
            case 3:
                let a = table[Int(input[i])], b = table[Int(input[i + 1])], c = table[Int(input[i + 2])]
                if (a | b | c) & 0xC0 != 0 || c & 0x03 != 0 { return false }
                out[o] = a << 2 | b >> 4
                out[o + 1] = (b & 0x0F) << 4 | c >> 2
                return true
            default:
                return false
            }
        }
    }
}
