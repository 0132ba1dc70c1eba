/// A JSON value as TokenKit parses it: strictly (RFC 8259 grammar, valid UTF-8, no duplicate
/// member names, bounded nesting).
///
/// Numbers keep their literal text, so large integers survive a round trip unchanged; use
/// ``doubleValue`` to read one as a number.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    /// The number's literal text, exactly as it appeared (e.g. `"1700000000"`, `"1.5e3"`).
    case number(String)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// The value of a number as a `Double`, or nil for other kinds.
    public var doubleValue: Double? {
        if case .number(let text) = self { return Double(text) }
        return nil
    }

    /// The string, or nil for other kinds.
    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// The members of an object, or nil for other kinds.
    public var objectValue: [String: JSONValue]? {
        if case .object(let o) = self { return o }
        return nil
    }

    /// A JSON number for an integer.
    public static func integer(_ value: Int) -> JSONValue { .number(String(value)) }

    /// The value a claim path names in an object: the member named `path` itself when there is one
    /// (a claim such as `https://example.com/roles` has dots in its name), else the path followed
    /// member by member through nested objects (`user.role`); nil when it leads nowhere.
    public static func value(atPath path: String, in object: [String: JSONValue]) -> JSONValue? {
        if let whole = object[path] { return whole }
        var current = JSONValue.object(object)
        for name in path.split(separator: ".", omittingEmptySubsequences: false) {
            guard case .object(let members) = current, let next = members[String(name)] else { return nil }
            current = next
        }
        return current
    }

    /// Serializes compactly, object members sorted by name (deterministic output).
    public var compactText: String { String(decoding: compactBytes, as: UTF8.self) }

    /// ``compactText`` as UTF-8 bytes, the form an HTTP body takes (no String in between).
    public var compactBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        JSONWriter.write(self, into: &out, indent: nil, level: 0)
        return out
    }

    /// Serializes with two-space indentation, object members sorted by name.
    public var prettyText: String {
        var out: [UInt8] = []
        JSONWriter.write(self, into: &out, indent: Array("  ".utf8), level: 0)
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses JSON text strictly.
    public static func parse(_ text: String) throws(TokenError) -> JSONValue {
        try text.withUTF8Bytes { buffer throws(TokenError) in try JSONParser.parse(buffer) }
    }

    /// Parses JSON bytes strictly.
    public static func parse(_ bytes: [UInt8]) throws(TokenError) -> JSONValue {
        try bytes.withBytes { buffer throws(TokenError) in try JSONParser.parse(buffer) }
    }
}

/// A JSON object written member by member, straight to compact UTF-8, for replies on a hot path.
///
/// Give the members sorted by name (byte order, as `String`'s `<` compares ASCII names): the bytes
/// are then exactly ``JSONValue/compactBytes`` of the same members as a ``JSONValue/object(_:)``,
/// without building the dictionary, hashing its names and sorting them first. Debug builds check
/// the order and that no name repeats.
///
/// ```swift
/// var reply = JSONObjectWriter()
/// reply.add("serial", string: "01ab")
/// reply.add("valid", .bool(true))
/// let body = reply.finished()  // {"serial":"01ab","valid":true}
/// ```
public struct JSONObjectWriter: Sendable {
    private var bytes: [UInt8]
    private var empty = true
    #if DEBUG
    private var lastName: String?
    #endif

    /// An empty object; `capacity`: the bytes to reserve for the whole text.
    public init(capacity: Int = 256) {
        bytes = []
        bytes.reserveCapacity(max(capacity, 2))
        bytes.append(0x7b)
    }

    /// Adds a member whose value is a string.
    public mutating func add(_ name: String, string value: String) {
        self.name(name)
        JSONWriter.writeString(value, into: &bytes)
    }

    /// Adds a member with any JSON value (objects in it are written with their members sorted).
    public mutating func add(_ name: String, _ value: JSONValue) {
        self.name(name)
        JSONWriter.write(value, into: &bytes, indent: nil, level: 0)
    }

    /// Adds a member whose value is the object `object` holds (its text as ``finished()`` gives it).
    public mutating func add(_ name: String, object: consuming JSONObjectWriter) {
        self.name(name)
        bytes.append(contentsOf: object.finished())
    }

    /// Adds a member whose value is JSON text written elsewhere (an array or object another
    /// writer finished): its bytes go in as they are.
    package mutating func add(_ name: String, json text: [UInt8]) {
        self.name(name)
        bytes.append(contentsOf: text)
    }

    /// Adds a member whose value is a string that `body` appends between the quotes, escaped
    /// already (``JSONWriter/escapedStringBody(_:)``, ``PEM/appendJSONEscaped(label:der:to:)``).
    package mutating func add(_ name: String, escapedString body: (inout [UInt8]) -> Void) {
        self.name(name)
        bytes.append(0x22)
        body(&bytes)
        bytes.append(0x22)
    }

    /// The object's text: `{`, the members, `}`.
    public consuming func finished() -> [UInt8] {
        bytes.append(0x7d)
        return bytes
    }

    private mutating func name(_ name: String) {
        #if DEBUG
        if let lastName { assert(lastName < name, "JSONObjectWriter: \"\(name)\" after \"\(lastName)\" (members must come sorted by name)") }
        lastName = name
        #endif
        if empty { empty = false } else { bytes.append(0x2c) }
        JSONWriter.writeString(name, into: &bytes)
        bytes.append(0x3a)
    }
}

/// What the writer and the parser both look for in a JSON string's bytes.
enum JSONText {
    /// The index of the first byte at or after `start` that a JSON string cannot hold as it is — a
    /// quote, a backslash or a control character (below 0x20) —, or `bytes.count` if there is none:
    /// where the writer must escape and where the parser's plain run ends. Eight bytes at a time
    /// (``hasSpecialByte(_:)``); byte by byte, this scan was a third of writing a certificate
    /// reply (`tokenbench --issuance-stages --filter reply`).
    static func plainRunEnd(_ bytes: UnsafeRawBufferPointer, from start: Int) -> Int {
        var i = start
        while i + 8 <= bytes.count, !hasSpecialByte(bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self)) { i += 8 }
        while i < bytes.count {
            let byte = bytes[i]
            if byte < 0x20 || byte == 0x22 || byte == 0x5c { return i }
            i += 1
        }
        return i
    }

    /// Whether any of the eight bytes in `word` is a control character (below 0x20), a quote or a
    /// backslash. Exact, in both directions: for a byte x, `(x - n) & ~x & 0x80` is set for some
    /// byte of the word exactly when one of its bytes is below n (n ≤ 0x80; a borrow only arises
    /// after such a byte), and a byte equal to c is a zero byte of `word ^ c`. UTF-8's bytes of
    /// 0x80 and above are never flagged (`~x` clears them).
    @inline(__always) static func hasSpecialByte(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
        let quote = word ^ (ones &* 0x22), backslash = word ^ (ones &* 0x5c)
        let below = (word &- ones &* 0x20) & ~word
        let zeroQuote = (quote &- ones) & ~quote
        let zeroBackslash = (backslash &- ones) & ~backslash
        return (below | zeroQuote | zeroBackslash) & highs != 0
    }
}

package enum JSONWriter {
    static func write(_ value: JSONValue, into out: inout [UInt8], indent: [UInt8]?, level: Int) {
        switch value {
        case .null: out += "null".utf8
        case .bool(let b): out += (b ? "true" : "false").utf8
        case .number(let text): out += text.utf8
        case .string(let s): writeString(s, into: &out)
        case .array(let items):
            if items.isEmpty { out += "[]".utf8; return }
            out.append(0x5b)
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(0x2c) }
                newline(&out, indent, level + 1)
                write(item, into: &out, indent: indent, level: level + 1)
            }
            newline(&out, indent, level)
            out.append(0x5d)
        case .object(let members):
            if members.isEmpty { out += "{}".utf8; return }
            out.append(0x7b)
            // The members sorted as pairs: no hash lookup per key afterwards.
            for (i, member) in members.sorted(by: { $0.key < $1.key }).enumerated() {
                if i > 0 { out.append(0x2c) }
                newline(&out, indent, level + 1)
                writeString(member.key, into: &out)
                out.append(0x3a)
                if indent != nil { out.append(0x20) }
                write(member.value, into: &out, indent: indent, level: level + 1)
            }
            newline(&out, indent, level)
            out.append(0x7d)
        }
    }

    private static func newline(_ out: inout [UInt8], _ indent: [UInt8]?, _ level: Int) {
        guard let indent else { return }
        out.append(0x0a)
        for _ in 0..<level { out += indent }
    }

    /// `s` as a JSON string's text between its quotes: what ``writeString(_:into:)`` writes,
    /// without the quotes (for text written once and put into many documents).
    package static func escapedStringBody(_ s: String) -> [UInt8] {
        var out: [UInt8] = []
        appendEscaped(s, into: &out)
        return out
    }

    /// Writes an array of strings.
    package static func writeStrings(_ values: [String], into out: inout [UInt8]) {
        out.append(0x5b)
        for (i, value) in values.enumerated() {
            if i > 0 { out.append(0x2c) }
            writeString(value, into: &out)
        }
        out.append(0x5d)
    }

    /// `s` as a JSON string, written as bytes: runs that need no escape are copied whole and each
    /// escape is two or six bytes appended in place (a PEM chain has an escaped newline every 65
    /// bytes; the String-based writer made two small Strings for each, 4% of the issuance
    /// endpoint's CPU). The runs are found by ``JSONText/plainRunEnd(_:from:)``.
    static func writeString(_ s: String, into out: inout [UInt8]) {
        out.append(0x22)
        appendEscaped(s, into: &out)
        out.append(0x22)
    }

    /// ``writeString(_:into:)`` without the quotes: the text between them, appended to `out`.
    package static func appendEscaped(_ s: String, into out: inout [UInt8]) {
        var text = s
        text.withUTF8 { bytes in
            // Room for the string and a few escapes, grown geometrically: an exact reserve
            // reallocates and copies the whole document for almost every string written after
            // it (quadratic: a 20,000-serial logout reply took 198 ms, `tokenbench
            // --issuance-stages --filter json`).
            let needed = out.count + bytes.count + 8
            if out.capacity < needed { out.reserveCapacity(max(needed, 2 * out.capacity)) }
            var runStart = 0
            while true {
                let runEnd = JSONText.plainRunEnd(UnsafeRawBufferPointer(bytes), from: runStart)
                if runStart < runEnd { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<runEnd])) }
                guard runEnd < bytes.count else { break }
                escape(bytes[runEnd], into: &out)
                runStart = runEnd + 1
            }
        }
    }

    /// The escape for a quote, a backslash or a control character.
    private static func escape(_ byte: UInt8, into out: inout [UInt8]) {
        out.append(0x5c)
        switch byte {
        case 0x22: out.append(0x22)
        case 0x5c: out.append(0x5c)
        case 0x0a: out.append(0x6e)  // n
        case 0x0d: out.append(0x72)  // r
        case 0x09: out.append(0x74)  // t
        case 0x08: out.append(0x62)  // b
        case 0x0c: out.append(0x66)  // f
        default:
            out += [0x75, 0x30, 0x30]  // u00, then the byte's two hex digits
            Hex.append(byte, to: &out)
        }
    }
}

/// A strict recursive-descent JSON parser; nesting is bounded by `maxDepth`, so recursion is too.
struct JSONParser {
    static let maxDepth = 32

    private let input: UnsafeRawBufferPointer
    private var position = 0

    private init(_ input: UnsafeRawBufferPointer) { self.input = input }

    static func parse(_ input: UnsafeRawBufferPointer) throws(TokenError) -> JSONValue {
        var parser = JSONParser(input)
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        if parser.position != input.count {
            throw parser.error("unexpected data after the JSON value")
        }
        return value
    }

    /// Parses a JSON object; anything else is an error naming `what`.
    static func parseObject(_ input: UnsafeRawBufferPointer, what: String) throws(TokenError) -> [String: JSONValue] {
        let value: JSONValue
        do {
            value = try parse(input)
        } catch {
            throw TokenError(error.code, "\(what): \(error.message)")
        }
        guard case .object(let members) = value else {
            throw TokenError(.invalidJSON, "\(what) is not a JSON object")
        }
        return members
    }

    private func error(_ message: String) -> TokenError {
        TokenError(.invalidJSON, "\(message) at byte \(position)")
    }

    private mutating func skipWhitespace() {
        while position < input.count {
            switch input[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    private mutating func parseValue(depth: Int) throws(TokenError) -> JSONValue {
        guard position < input.count else { throw error("unexpected end of JSON") }
        switch input[position] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth + 1)
        case UInt8(ascii: "["): return try parseArray(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try parseNumber())
        default: throw error("unexpected character")
        }
    }

    private mutating func expectLiteral(_ literal: StaticString) throws(TokenError) {
        let count = literal.utf8CodeUnitCount
        guard position + count <= input.count else { throw error("truncated literal") }
        let bytes = UnsafeBufferPointer(start: literal.utf8Start, count: count)
        for i in 0..<count where input[position + i] != bytes[i] {
            throw error("invalid literal")
        }
        position += count
    }

    private mutating func parseObject(depth: Int) throws(TokenError) -> JSONValue {
        if depth > JSONParser.maxDepth { throw error("JSON nested deeper than \(JSONParser.maxDepth) levels") }
        position += 1  // {
        var members: [String: JSONValue] = [:]
        skipWhitespace()
        if position < input.count, input[position] == UInt8(ascii: "}") {
            position += 1
            return .object(members)
        }
        // Room for a token's claims or a request's members, so the dictionary is not grown (and
        // rehashed) three times on the way to eight (tokenbench --issuance-stages --filter
        // identity, 3 alternated pairs: 2.75–4.07 → 2.51–2.81 µs).
        members.reserveCapacity(8)
        while true {
            skipWhitespace()
            guard position < input.count, input[position] == UInt8(ascii: "\"") else {
                throw error("expected a member name")
            }
            let name = try parseString()
            skipWhitespace()
            guard position < input.count, input[position] == UInt8(ascii: ":") else { throw error("expected ':'") }
            position += 1
            skipWhitespace()
            let value = try parseValue(depth: depth)
            if members.updateValue(value, forKey: name) != nil {
                throw TokenError(.duplicateMember, "duplicate member name \"\(JSONParser.printable(name))\"")
            }
            skipWhitespace()
            guard position < input.count else { throw error("unterminated object") }
            let c = input[position]
            position += 1
            if c == UInt8(ascii: "}") { return .object(members) }
            if c != UInt8(ascii: ",") { throw error("expected ',' or '}'") }
        }
    }

    private mutating func parseArray(depth: Int) throws(TokenError) -> JSONValue {
        if depth > JSONParser.maxDepth { throw error("JSON nested deeper than \(JSONParser.maxDepth) levels") }
        position += 1  // [
        var items: [JSONValue] = []
        skipWhitespace()
        if position < input.count, input[position] == UInt8(ascii: "]") {
            position += 1
            return .array(items)
        }
        while true {
            skipWhitespace()
            items.append(try parseValue(depth: depth))
            skipWhitespace()
            guard position < input.count else { throw error("unterminated array") }
            let c = input[position]
            position += 1
            if c == UInt8(ascii: "]") { return .array(items) }
            if c != UInt8(ascii: ",") { throw error("expected ',' or ']'") }
        }
    }

    private mutating func parseNumber() throws(TokenError) -> String {
        let start = position
        if input[position] == UInt8(ascii: "-") { position += 1 }
        guard position < input.count else { throw error("truncated number") }
        if input[position] == UInt8(ascii: "0") {
            position += 1
        } else if isDigit(input[position]) {
            while position < input.count, isDigit(input[position]) { position += 1 }
        } else {
            throw error("invalid number")
        }
        if position < input.count, input[position] == UInt8(ascii: ".") {
            position += 1
            guard position < input.count, isDigit(input[position]) else { throw error("invalid fraction") }
            while position < input.count, isDigit(input[position]) { position += 1 }
        }
        if position < input.count, input[position] == UInt8(ascii: "e") || input[position] == UInt8(ascii: "E") {
            position += 1
            if position < input.count, input[position] == UInt8(ascii: "+") || input[position] == UInt8(ascii: "-") {
                position += 1
            }
            guard position < input.count, isDigit(input[position]) else { throw error("invalid exponent") }
            while position < input.count, isDigit(input[position]) { position += 1 }
        }
        if position - start > 64 { throw error("number literal longer than 64 characters") }
        return String(decoding: UnsafeRawBufferPointer(rebasing: input[start..<position]), as: UTF8.self)
    }

    private func isDigit(_ c: UInt8) -> Bool { c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9") }

    private mutating func parseString() throws(TokenError) -> String {
        position += 1  // opening quote
        let start = position
        // The bytes of a string that has escapes; nil while none was met, when the text is a
        // slice of the input. The runs between escapes are copied whole (a PEM in JSON has an
        // escaped newline every 65 bytes).
        var unescaped: [UInt8]?
        while true {
            let runStart = position
            position = JSONText.plainRunEnd(input, from: position)
            guard position < input.count else { break }
            let run = UnsafeRawBufferPointer(rebasing: input[runStart..<position])
            let c = input[position]
            if c < 0x20 { throw error("unescaped control character in string") }
            if c == UInt8(ascii: "\"") {
                position += 1
                let text: String?
                if var bytes = unescaped.take() {
                    bytes.append(contentsOf: run)
                    text = UTF8Text.validated(bytes)
                } else {
                    text = UTF8Text.validated(run)
                }
                guard let text else { throw TokenError(.invalidJSON, "string is not valid UTF-8 at byte \(start)") }
                return text
            }
            // A backslash: the run so far, then the escape after it (taken out of `unescaped`
            // while it grows, so appending does not copy it).
            var bytes = unescaped.take() ?? []
            bytes.append(contentsOf: run)
            position += 1
            guard position < input.count else { break }
            let e = input[position]
            position += 1
            switch e {
            case UInt8(ascii: "\""): bytes.append(0x22)
            case UInt8(ascii: "\\"): bytes.append(0x5C)
            case UInt8(ascii: "/"): bytes.append(0x2F)
            case UInt8(ascii: "b"): bytes.append(0x08)
            case UInt8(ascii: "f"): bytes.append(0x0C)
            case UInt8(ascii: "n"): bytes.append(0x0A)
            case UInt8(ascii: "r"): bytes.append(0x0D)
            case UInt8(ascii: "t"): bytes.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try parseHex4()
                if (0xD800...0xDBFF).contains(scalar) {
                    guard position + 1 < input.count, input[position] == UInt8(ascii: "\\"),
                        input[position + 1] == UInt8(ascii: "u")
                    else { throw error("unpaired surrogate in \\u escape") }
                    position += 2
                    let low = try parseHex4()
                    guard (0xDC00...0xDFFF).contains(low) else { throw error("unpaired surrogate in \\u escape") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00...0xDFFF).contains(scalar) {
                    throw error("unpaired surrogate in \\u escape")
                }
                guard let u = Unicode.Scalar(scalar) else { throw error("invalid \\u escape") }
                bytes.append(contentsOf: Array(String(Character(u)).utf8))
            default:
                throw error("invalid escape sequence")
            }
            unescaped = bytes
        }
        throw error("unterminated string")
    }

    private mutating func parseHex4() throws(TokenError) -> UInt32 {
        guard position + 4 <= input.count else { throw error("truncated \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let c = input[position]
            let digit: UInt32
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(c - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(c - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(c - UInt8(ascii: "A") + 10)
            default: throw error("invalid hex digit in \\u escape")
            }
            value = value << 4 | digit
            position += 1
        }
        return value
    }

    /// A member name shortened and stripped of control characters, for messages.
    static func printable(_ s: String) -> String {
        let cleaned = String(s.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? "?" : Character($0) })
        return cleaned.count > 40 ? String(cleaned.prefix(40)) + "…" : cleaned
    }
}
