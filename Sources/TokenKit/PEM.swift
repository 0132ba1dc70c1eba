/// PEM armour (RFC 7468): `-----BEGIN LABEL-----`, base64 body, `-----END LABEL-----`.
public enum PEM {
    /// One armoured block.
    public struct Block: Sendable, Hashable {
        public let label: String
        public let der: [UInt8]
        public init(label: String, der: [UInt8]) {
            self.label = label
            self.der = der
        }
    }

    /// Parses every block in `text`. Text outside blocks (comments, `openssl` headers) is ignored;
    /// a block with a bad body, a mismatched END line or encapsulated headers is an error.
    public static func parse(_ text: String) throws(TokenError) -> [Block] {
        // ASCII text (every PEM file in practice) is read as bytes: the same lines, labels and
        // verdicts as the Character-based reading below, which cost ≈ 9× as much (grapheme
        // breaking of the whole text; tokenbench --issuance-stages "csr.pem (TokenKit PEM)").
        // Other text keeps the Character-based reading, whose label comparisons are Unicode-aware.
        var text = text
        let ascii = text.withUTF8 { bytes -> Result<[Block], TokenError>? in
            guard bytes.allSatisfy({ $0 < 0x80 }) else { return nil }
            return Result { () throws(TokenError) in try parseASCII(bytes) }
        }
        if let ascii { return try ascii.get() }
        return try parseCharacters(text)
    }

    private static let beginPrefix = Array("-----BEGIN ".utf8)
    private static let endPrefix = Array("-----END ".utf8)
    private static let dashes = Array("-----".utf8)

    /// ``parse(_:)`` of ASCII text, on its bytes: lines end at `\n` (a `\r` before it, and spaces
    /// and tabs, are trimmed from the line's end, as ``parseCharacters(_:)`` does).
    static func parseASCII(_ bytes: UnsafeBufferPointer<UInt8>) throws(TokenError) -> [Block] {
        var blocks: [Block] = []
        var label: [UInt8]? = nil
        var body: [UInt8] = []
        var start = 0
        while start <= bytes.count {
            var end = start
            while end < bytes.count, bytes[end] != 0x0A { end += 1 }
            let next = end + 1
            while end > start, bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09 || bytes[end - 1] == 0x0D { end -= 1 }
            let line = UnsafeBufferPointer(rebasing: bytes[start..<end])
            if let current = label {
                if line.starts(with: endPrefix) {
                    let name = String(decoding: current, as: UTF8.self)
                    guard line.elementsEqual(endPrefix + current + dashes) else { throw blockError(name, .otherEnd) }
                    blocks.append(try closedBlock(name, body: body))
                    label = nil
                    body = []
                } else if line.contains(0x3A) {
                    throw blockError(String(decoding: current, as: UTF8.self), .headers)
                } else {
                    body.append(contentsOf: line)
                }
            } else if line.count > beginPrefix.count + dashes.count, line.starts(with: beginPrefix), line.suffix(dashes.count).elementsEqual(dashes) {
                label = Array(line[beginPrefix.count..<(line.count - dashes.count)])
            }
            start = next
        }
        if let label { throw blockError(String(decoding: label, as: UTF8.self), .noEnd) }
        return blocks
    }

    /// ``parse(_:)`` on Characters: any text. (Public for the fuzzers, which hold the byte reading
    /// of ASCII text to its answers.)
    @_spi(Testing) public static func parseCharacters(_ text: String) throws(TokenError) -> [Block] {
        var blocks: [Block] = []
        var label: String? = nil
        var body: [UInt8] = []
        for rawLine in text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" }) {
            let line = rawLine.trimmingSuffixWhitespace()
            if let current = label {
                if line.hasPrefix("-----END ") {
                    guard line == "-----END \(current)-----" else { throw blockError(current, .otherEnd) }
                    blocks.append(try closedBlock(current, body: body))
                    label = nil
                    body = []
                } else if line.contains(":") {
                    throw blockError(current, .headers)
                } else {
                    body.append(contentsOf: line.utf8)
                }
            } else if line.hasPrefix("-----BEGIN "), line.hasSuffix("-----"), line.count > 16 {
                label = String(line.dropFirst(11).dropLast(5))
            }
        }
        if let label { throw blockError(label, .noEnd) }
        return blocks
    }

    /// What can be wrong with a block, in its error's words.
    private enum Problem: String {
        case otherEnd = "ends with a different label"
        case headers = "has encapsulated headers (encrypted PEM is not supported)"
        case badBody = "has an invalid base64 body"
        case noEnd = "has no END line"
    }

    private static func blockError(_ label: String, _ problem: Problem) -> TokenError {
        TokenError(.invalidKey, "PEM block \"\(label)\" \(problem.rawValue)")
    }

    /// The block an END line closes: its body decoded (both readings).
    private static func closedBlock(_ label: String, body: [UInt8]) throws(TokenError) -> Block {
        guard let der = decodeBase64(body), !der.isEmpty else { throw blockError(label, .badBody) }
        return Block(label: label, der: der)
    }

    /// Armours DER under `label`, 64 characters a line, each line ending in `\n`.
    public static func encode(label: String, der: [UInt8]) -> String {
        var out: [UInt8] = []
        armour(der, lineEnd: newline, into: &out) { $0 += label.utf8 }
        return String(decoding: out, as: UTF8.self)
    }

    /// ``encode(label:der:)``'s text as a JSON string holds it, between the quotes: each line
    /// break escaped (`\n`); nothing else in armoured base64 needs escaping (the label is escaped
    /// as any string). Appended to `out` without the text made first.
    package static func appendJSONEscaped(label: String, der: [UInt8], to out: inout [UInt8]) {
        armour(der, lineEnd: escapedNewline, into: &out) { JSONWriter.appendEscaped(label, into: &$0) }
    }

    private static let newline: [UInt8] = [0x0a]
    private static let escapedNewline: [UInt8] = [0x5c, 0x6e]  // `\n`, as a JSON string holds a line break

    /// The armour both forms share: the BEGIN line, the base64 64 characters a line, the END line,
    /// each line ended by `lineEnd`; `label` appends the label where the lines name it.
    private static func armour(_ der: [UInt8], lineEnd: [UInt8], into out: inout [UInt8], label: (inout [UInt8]) -> Void) {
        let body = base64Bytes(der)
        out.reserveCapacity(out.count + body.count + (body.count / 64 + 3) * lineEnd.count + 64)
        out += "-----BEGIN ".utf8
        label(&out)
        out += "-----".utf8
        out += lineEnd
        var i = 0
        while i < body.count {
            let end = min(i + 64, body.count)
            out += body[i..<end]
            out += lineEnd
            i = end
        }
        out += "-----END ".utf8
        label(&out)
        out += "-----".utf8
        out += lineEnd
    }

    private static let alphabet: [UInt8] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    static func encodeBase64(_ bytes: [UInt8]) -> String { String(decoding: base64Bytes(bytes), as: UTF8.self) }

    /// Standard base64 with padding, as ASCII bytes.
    static func base64Bytes(_ bytes: [UInt8]) -> [UInt8] { Base64Encoding.encode(bytes, alphabet: alphabet, padded: true) }

    /// Standard base64 with padding; whitespace inside is skipped. Nil when invalid.
    static func decodeBase64(_ text: [UInt8]) -> [UInt8]? {
        var values: [UInt8] = []
        values.reserveCapacity(text.count)
        var padding = 0
        for c in text {
            let v: UInt8
            switch c {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): v = c - UInt8(ascii: "A")
            case UInt8(ascii: "a")...UInt8(ascii: "z"): v = c - UInt8(ascii: "a") + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): v = c - UInt8(ascii: "0") + 52
            case UInt8(ascii: "+"): v = 62
            case UInt8(ascii: "/"): v = 63
            case UInt8(ascii: "="): padding += 1; continue
            case 0x20, 0x09, 0x0D, 0x0A: continue
            default: return nil
            }
            if padding > 0 { return nil }  // data after padding
            values.append(v)
        }
        guard (values.count + padding) % 4 == 0, padding <= 2, values.count % 4 != 1 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(values.count * 3 / 4)
        var i = 0
        while i + 4 <= values.count {
            out.append(values[i] << 2 | values[i + 1] >> 4)
            out.append(values[i + 1] << 4 | values[i + 2] >> 2)
            out.append(values[i + 2] << 6 | values[i + 3])
            i += 4
        }
        switch values.count - i {
        case 2: out.append(values[i] << 2 | values[i + 1] >> 4)
        case 3:
            out.append(values[i] << 2 | values[i + 1] >> 4)
            out.append(values[i + 1] << 4 | values[i + 2] >> 2)
        default: break
        }
        return out
    }
}

extension Substring {
    func trimmingSuffixWhitespace() -> Substring {
        var s = self
        while let last = s.last, last == " " || last == "\t" || last == "\r" { s = s.dropLast() }
        return s
    }
}
