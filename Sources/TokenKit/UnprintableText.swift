/// Characters that have no place in a name shown to people or written into a line of a log:
/// control characters (C0, DEL, C1) and the bidirectional formatting characters. One definition
/// for the identity's check of an account (PeerCA) and the server's log escaping (TokenServer).
package enum UnprintableText {
    /// Whether `scalar` is a control character or a bidirectional formatting character.
    package static func isUnprintable(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0..<0x20, 0x7F...0x9F, 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }

    /// `text` with those characters as `\n`, `\r`, `\t` or `\u{…}`; `text` itself when it has none.
    package static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isUnprintable) else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where isUnprintable(scalar): out += "\\u{\(String(scalar.value, radix: 16))}"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
