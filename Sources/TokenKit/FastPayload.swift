#if canImport(Glibc)
import Glibc
#endif

/// The hot path's payload reader: validates a *simple* JWT payload strictly and extracts the
/// registered claims without building a dictionary.
///
/// "Simple" means: a flat JSON object of at most 32 members whose names and strings are ASCII
/// without escapes, whose values are strings, numbers, literals or arrays of those, whose
/// registered claims have the right types and ranges. Anything else — including anything
/// invalid — returns nil, and the caller runs the full strict parser, which accepts exactly the
/// same valid inputs and produces the precise error for invalid ones. So this reader can only
/// ever be stricter than the parser, never looser.
enum FastPayload {
    static let maxMembers = 32

    struct Result {
        let claims: RegisteredClaims
        /// Whether every name in `required` is a member.
        let hasRequired: Bool
    }

    /// A policy's required claim names, prepared once per verifier: the registered ones as bits,
    /// any others as bytes.
    struct Required: Sendable {
        static let iss: UInt8 = 1, sub: UInt8 = 2, jti: UInt8 = 4, exp: UInt8 = 8, iat: UInt8 = 16, nbf: UInt8 = 32
        let mask: UInt8
        let others: [[UInt8]]

        init(_ names: Set<String>) {
            var mask: UInt8 = 0
            var others: [[UInt8]] = []
            for name in names {
                switch name {
                case "iss": mask |= Required.iss
                case "sub": mask |= Required.sub
                case "jti": mask |= Required.jti
                case "exp": mask |= Required.exp
                case "iat": mask |= Required.iat
                case "nbf": mask |= Required.nbf
                default: others.append(Array(name.utf8))
                }
            }
            self.mask = mask
            self.others = others
        }
    }

    static func scan(_ source: PayloadBytes, required: Required) -> Result? {
        source.withUnsafeBytes { scan($0, source: source, required: required) }
    }

    private static func scan(_ input: UnsafeRawBufferPointer, source: PayloadBytes, required: Required) -> Result? {
        withUnsafeTemporaryAllocation(of: Range<Int>.self, capacity: maxMembers) { names -> Result? in
            var scanner = Scanner(input: input)
            var count = 0
            var iss: Range<Int>? = nil, sub: Range<Int>? = nil, jti: Range<Int>? = nil, aud: Range<Int>? = nil
            var exp: Double? = nil, nbf: Double? = nil, iat: Double? = nil
            var seen: UInt64 = 0
            scanner.skipWhitespace()
            guard scanner.take(UInt8(ascii: "{")) else { return nil }
            scanner.skipWhitespace()
            if !scanner.take(UInt8(ascii: "}")) {
                while true {
                    scanner.skipWhitespace()
                    guard let name = scanner.string(), count < maxMembers else { return nil }
                    // Duplicate names: the parser reports them. A 64-bit filter on (length, first,
                    // last byte) skips the comparisons for names that cannot be equal.
                    let bit: UInt64 = name.isEmpty ? 1 : 1 << ((UInt64(name.count) &* 31 &+ UInt64(input[name.lowerBound]) &* 7 &+ UInt64(input[name.upperBound - 1])) & 63)
                    if seen & bit != 0 {
                        for i in 0..<count where scanner.equal(names[i], name) { return nil }
                    }
                    seen |= bit
                    names[count] = name
                    count += 1
                    scanner.skipWhitespace()
                    guard scanner.take(UInt8(ascii: ":")) else { return nil }
                    scanner.skipWhitespace()
                    guard let kind = scanner.value() else { return nil }
                    if name.count == 3 {
                        switch (input[name.lowerBound], input[name.lowerBound + 1], input[name.lowerBound + 2]) {
                        case (0x69, 0x73, 0x73):  // iss
                            guard case .string(let r) = kind else { return nil }
                            iss = r
                        case (0x73, 0x75, 0x62):  // sub
                            guard case .string(let r) = kind else { return nil }
                            sub = r
                        case (0x6A, 0x74, 0x69):  // jti
                            guard case .string(let r) = kind else { return nil }
                            jti = r
                        case (0x61, 0x75, 0x64):  // aud
                            guard case .string(let r) = kind else { return nil }  // arrays: full parser
                            aud = r
                        case (0x65, 0x78, 0x70):  // exp
                            guard case .number(let r) = kind, let v = scanner.numericDate(r) else { return nil }
                            exp = v
                        case (0x6E, 0x62, 0x66):  // nbf
                            guard case .number(let r) = kind, let v = scanner.numericDate(r) else { return nil }
                            nbf = v
                        case (0x69, 0x61, 0x74):  // iat
                            guard case .number(let r) = kind, let v = scanner.numericDate(r) else { return nil }
                            iat = v
                        default:
                            break
                        }
                    }
                    scanner.skipWhitespace()
                    if scanner.take(UInt8(ascii: "}")) { break }
                    guard scanner.take(UInt8(ascii: ",")) else { return nil }
                }
            }
            scanner.skipWhitespace()
            guard scanner.atEnd else { return nil }
            var present: UInt8 = 0
            if iss != nil { present |= Required.iss }
            if sub != nil { present |= Required.sub }
            if jti != nil { present |= Required.jti }
            if exp != nil { present |= Required.exp }
            if iat != nil { present |= Required.iat }
            if nbf != nil { present |= Required.nbf }
            var hasRequired = present & required.mask == required.mask
            if hasRequired {
                for name in required.others where !(0..<count).contains(where: { scanner.equal(names[$0], name) }) {
                    hasRequired = false
                    break
                }
            }
            let claims = RegisteredClaims(
                source: source, iss: iss, sub: sub, aud: aud, jti: jti, expiration: exp, notBefore: nbf, issuedAt: iat)
            return Result(claims: claims, hasRequired: hasRequired)
        }
    }

    enum Kind {
        case string(Range<Int>)
        case number(Range<Int>)
        case other
    }

    struct Scanner {
        let input: UnsafeRawBufferPointer
        var position = 0

        var atEnd: Bool { position == input.count }

        @inline(__always)
        mutating func skipWhitespace() {
            while position < input.count {
                let c = input[position]
                guard c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09 else { return }
                position += 1
            }
        }

        @inline(__always)
        mutating func take(_ c: UInt8) -> Bool {
            guard position < input.count, input[position] == c else { return false }
            position += 1
            return true
        }

        /// A string of ASCII without escapes or control characters; returns the range inside the
        /// quotes. Eight bytes at a time while no quote, backslash, control or non-ASCII byte shows.
        @inline(__always)
        mutating func string() -> Range<Int>? {
            guard take(UInt8(ascii: "\"")), let base = input.baseAddress else { return nil }
            let start = position
            let n = input.count
            var i = start
            let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
            while i + 8 <= n {
                let w = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: i, as: UInt64.self))
                let quote = w ^ 0x2222_2222_2222_2222, backslash = w ^ 0x5C5C_5C5C_5C5C_5C5C
                let special = (((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash) | ((w &- 0x2020_2020_2020_2020) & ~w) | w) & highs
                if special != 0 {
                    // The lowest flagged byte is the first special one (borrows only flag bytes
                    // above a true hit): a quote ends the string, anything else is refused.
                    let at = i + special.trailingZeroBitCount / 8
                    guard base.load(fromByteOffset: at, as: UInt8.self) == UInt8(ascii: "\"") else { return nil }
                    position = at + 1
                    return start..<at
                }
                i += 8
            }
            while i < n {
                let c = base.load(fromByteOffset: i, as: UInt8.self)
                if c == UInt8(ascii: "\"") {
                    position = i + 1
                    return start..<i
                }
                guard c >= 0x20, c < 0x80, c != UInt8(ascii: "\\") else { return nil }
                i += 1
            }
            return nil
        }

        mutating func number() -> Range<Int>? {
            let start = position
            _ = take(UInt8(ascii: "-"))
            guard position < input.count else { return nil }
            if input[position] == UInt8(ascii: "0") {
                position += 1
            } else {
                guard digits() > 0 else { return nil }
            }
            if take(UInt8(ascii: ".")) { guard digits() > 0 else { return nil } }
            if take(UInt8(ascii: "e")) || take(UInt8(ascii: "E")) {
                if !take(UInt8(ascii: "+")) { _ = take(UInt8(ascii: "-")) }
                guard digits() > 0 else { return nil }
            }
            guard position - start <= 64 else { return nil }
            return start..<position
        }

        private mutating func digits() -> Int {
            let start = position
            while position < input.count, input[position] >= 0x30, input[position] <= 0x39 { position += 1 }
            return position - start
        }

        mutating func literal(_ text: StaticString) -> Bool {
            let n = text.utf8CodeUnitCount
            guard position + n <= input.count else { return false }
            for i in 0..<n where input[position + i] != text.utf8Start[i] { return false }
            position += n
            return true
        }

        mutating func value(allowArray: Bool = true) -> Kind? {
            guard position < input.count else { return nil }
            switch input[position] {
            case UInt8(ascii: "\""): return string().map { .string($0) }
            case UInt8(ascii: "t"): return literal("true") ? .other : nil
            case UInt8(ascii: "f"): return literal("false") ? .other : nil
            case UInt8(ascii: "n"): return literal("null") ? .other : nil
            case UInt8(ascii: "["):
                guard allowArray else { return nil }
                position += 1
                skipWhitespace()
                if take(UInt8(ascii: "]")) { return .other }
                while true {
                    skipWhitespace()
                    guard value(allowArray: false) != nil else { return nil }
                    skipWhitespace()
                    if take(UInt8(ascii: "]")) { return .other }
                    guard take(UInt8(ascii: ",")) else { return nil }
                }
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return number().map { .number($0) }
            default:
                return nil  // objects: full parser
            }
        }

        /// A NumericDate in range; nil for anything the full parser must judge.
        func numericDate(_ range: Range<Int>) -> Double? {
            var value: Double
            var integer: UInt64 = 0
            var integral = range.count <= 15
            if integral {
                for i in range {
                    let digit = input[i] &- 0x30
                    guard digit <= 9 else {
                        integral = false
                        break
                    }
                    integer = integer &* 10 &+ UInt64(digit)
                }
            }
            if integral {
                value = Double(integer)  // exact: at most 15 digits
            } else {
                guard let parsed = Double(text(range)) else { return nil }
                value = parsed
            }
            guard value.isFinite, value >= 0, value <= RegisteredClaims.maximumDate else { return nil }
            return value
        }

        func text(_ range: Range<Int>) -> String {
            String(decoding: UnsafeRawBufferPointer(rebasing: input[range]), as: UTF8.self)
        }

        func equal(_ a: Range<Int>, _ b: Range<Int>) -> Bool {
            guard a.count == b.count else { return false }
            for i in 0..<a.count where input[a.lowerBound + i] != input[b.lowerBound + i] { return false }
            return true
        }

        func equal(_ a: Range<Int>, _ name: [UInt8]) -> Bool {
            guard a.count == name.count else { return false }
            for i in 0..<name.count where input[a.lowerBound + i] != name[i] { return false }
            return true
        }
    }
}
