import Foundation
import Testing
@testable import TokenKit

/// Builds a token from exact header and payload text, MACed with `key` (HS256), so parsing rules
/// can be tested past the signature check.
func forge(header: String, payload: String, key: JWTKey = hs256Key, algorithm: JWTAlgorithm = .hs256) throws -> String {
    forgeSegments(Base64URL.encode(Array(header.utf8)), Base64URL.encode(Array(payload.utf8)), key: key, algorithm: algorithm)
}

func forgeSegments(_ header: String, _ payload: String, key: JWTKey = hs256Key, algorithm: JWTAlgorithm = .hs256) -> String {
    let input = header + "." + payload
    let signature = (try? NativeSignatures.sign(algorithm, key: key, message: Array(input.utf8))) ?? []
    return input + "." + Base64URL.encode(signature)
}

// Fixed 32-byte test secret: a valid HS256 key. Creation cannot fail; fall back to a trap-free
// default only to keep the global non-throwing.
let hs256Key: JWTKey = {
    do { return try JWTKey.hmac(secret: Array(0..<32)) } catch { fatalError("test key: \(error)") }
}()

func code(_ body: () throws -> Void) -> TokenError.Code? {
    do {
        try body()
        return nil
    } catch let error as TokenError {
        return error.code
    } catch {
        return TokenError.Code(rawValue: "not-a-TokenError")
    }
}

@Suite("Strict parsing")
struct ParsingTests {
    let verifier: JWTVerifier
    let future = "{\"exp\":4102444800}"

    init() throws {
        verifier = try JWTVerifier(key: hs256Key, policy: ClaimsPolicy(), clock: .fixed(referenceTime))
    }

    @Test func validBaseline() throws {
        let token = try forge(header: #"{"alg":"HS256","typ":"JWT"}"#, payload: future)
        #expect(try verifier.verify(token).claims.expiration == 4_102_444_800)
    }

    @Test func sizeCapIsCheckedFirst() throws {
        let big = String(repeating: "A", count: 16 * 1024 + 1)
        #expect(code { _ = try verifier.verify(big) } == .tokenTooLarge)
        let smallCap = try JWTVerifier(key: hs256Key, clock: .fixed(referenceTime), maxTokenBytes: 60)
        let token = try forge(header: #"{"alg":"HS256"}"#, payload: future)
        #expect(token.utf8.count > 60)
        #expect(code { _ = try smallCap.verify(token) } == .tokenTooLarge)
    }

    @Test(arguments: ["", "abc", "a.b", "a.b.c.d", "..", ".e30.", "a..b.c"])
    func segmentCount(token: String) {
        #expect(code { _ = try verifier.verify(token) } == .malformed)
    }

    @Test func base64Strictness() throws {
        let good = try forge(header: #"{"alg":"HS256"}"#, payload: future)
        let parts = good.split(separator: ".").map(String.init)
        // Padding, standard-alphabet characters, whitespace, non-zero trailing bits.
        #expect(code { _ = try verifier.verify(parts[0] + "=." + parts[1] + "." + parts[2]) } == .invalidBase64)
        #expect(code { _ = try verifier.verify(parts[0] + "." + parts[1] + "." + parts[2] + "=") } == .invalidBase64)
        #expect(code { _ = try verifier.verify(parts[0] + " ." + parts[1] + "." + parts[2]) } == .invalidBase64)
        let plus = parts[2].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        if plus != parts[2] { #expect(code { _ = try verifier.verify(parts[0] + "." + parts[1] + "." + plus) } == .invalidBase64) }
        // "e30" is "{}"; "e31" decodes to the same bytes with a non-zero unused bit.
        #expect(Base64URL.decode("e30") == Array("{}".utf8))
        #expect(Base64URL.decode("e31") == nil)
        #expect(Base64URL.decode("e3") == nil)  // trailing bits set
        #expect(Base64URL.decode("A") == nil)  // impossible length
        // A payload with non-zero trailing bits, correctly MACed: still refused.
        let payload = Base64URL.encode(Array((future + " ").utf8))  // 19 bytes: the last character has unused bits
        var bent = Array(payload)
        let last = bent.removeLast()
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        if let i = alphabet.firstIndex(of: last) { bent.append(alphabet[i | 1]) }
        let token = forgeSegments(parts[0], String(bent))
        #expect(String(bent) != payload)
        #expect(code { _ = try verifier.verify(token) } == .invalidBase64)
    }

    @Test func roundTripBase64() {
        for n in 0..<70 {
            let bytes = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            #expect(Base64URL.decode(Base64URL.encode(bytes)) == bytes)
        }
    }

    @Test(arguments: [
        ("not json", TokenError.Code.invalidJSON), ("[1,2]", .invalidJSON), ("\"HS256\"", .invalidJSON),
        (#"{"alg":"HS256",}"#, .invalidJSON), (#"{"alg":"HS256"} x"#, .invalidJSON),
        (#"{"alg":"HS256","alg":"HS256"}"#, .duplicateMember), (#"{"alg":"HS256","typ":"JWT","typ":"JOSE"}"#, .duplicateMember),
        (#"{"alg":"HS256","x":"a\u0000b"}"#, nil), (#"{"alg":"HS256","x":"\uD800"}"#, .invalidJSON),
        (#"{"alg":"HS256","x":01}"#, .invalidJSON), (#"{"alg":"HS256","x":1.}"#, .invalidJSON),
        (#"{"typ":"JWT"}"#, .invalidHeader), (#"{"alg":256}"#, .invalidHeader), (#"{"alg":"HS256","kid":7}"#, .invalidHeader),
        (#"{"alg":"HS256","b64":false,"crit":["b64"]}"#, .invalidHeader),
        (#"{"alg":"HS256","crit":[]}"#, .unsupportedCritical), (#"{"alg":"HS256","crit":"exp"}"#, .unsupportedCritical),
        (#"{"alg":"HS256","crit":["exp"],"exp":1}"#, .unsupportedCritical), (#"{"alg":"HS256","crit":["alg"]}"#, .unsupportedCritical),
        (#"{"alg":"HS256","crit":["ext"]}"#, .unsupportedCritical),
    ])
    func headerRules(header: String, expected: TokenError.Code?) throws {
        let token = try forge(header: header, payload: future)
        #expect(code { _ = try verifier.verify(token) } == expected, "\(header)")
    }

    @Test func rawControlAndInvalidUTF8AreRefused() throws {
        let nulInString = Base64URL.encode(Array(#"{"alg":"HS256","x":"a"#.utf8) + [0] + Array(#""}"#.utf8))
        #expect(code { _ = try verifier.verify(forgeSegments(nulInString, Base64URL.encode(Array(future.utf8)))) } == .invalidJSON)
        let badUTF8 = Base64URL.encode(Array(#"{"alg":"HS256","x":""#.utf8) + [0xC3, 0x28] + Array(#""}"#.utf8))
        #expect(code { _ = try verifier.verify(forgeSegments(badUTF8, Base64URL.encode(Array(future.utf8)))) } == .invalidJSON)
        let overlong = Base64URL.encode(Array(#"{"alg":"HS256","x":""#.utf8) + [0xC0, 0xAF] + Array(#""}"#.utf8))
        #expect(code { _ = try verifier.verify(forgeSegments(overlong, Base64URL.encode(Array(future.utf8)))) } == .invalidJSON)
    }

    @Test func understoodCriticalExtensionIsAccepted() throws {
        let token = try forge(header: #"{"alg":"HS256","crit":["ext"],"ext":1}"#, payload: future)
        let lenient = try JWTVerifier(key: hs256Key, policy: ClaimsPolicy(understoodCriticalHeaders: ["ext"]), clock: .fixed(referenceTime))
        #expect(try lenient.verify(token).header.critical == ["ext"])
        let absent = try forge(header: #"{"alg":"HS256","crit":["ext"]}"#, payload: future)
        #expect(code { _ = try lenient.verify(absent) } == .unsupportedCritical)
    }

    @Test(arguments: ["none", "None", "NONE", "nOnE", " none", "none "])
    func algNoneInEverySpelling(alg: String) throws {
        let header = Base64URL.encode(Array(#"{"alg":"\#(alg)","typ":"JWT"}"#.utf8))
        let payload = Base64URL.encode(Array(future.utf8))
        for token in [header + "." + payload + ".", forgeSegments(header, payload)] {
            #expect(code { _ = try verifier.verify(token) } == .forbiddenAlgorithm)
        }
    }

    @Test(arguments: ["hs256", "Hs256", "HS256 ", "RS1", "ES256K", "HS", "", "EDDSA", "Ed25519"])
    func unknownOrMisspelledAlgorithms(alg: String) throws {
        let token = try forge(header: #"{"alg":"\#(alg)"}"#, payload: future)
        #expect(code { _ = try verifier.verify(token) } == .unsupportedAlgorithm)
    }

    @Test func nestingDepthIsBounded() throws {
        let deep = String(repeating: "[", count: 40) + String(repeating: "]", count: 40)
        let token = try forge(header: #"{"alg":"HS256"}"#, payload: #"{"exp":4102444800,"x":\#(deep)}"#)
        #expect(code { _ = try verifier.verify(token) } == .invalidJSON)
        let ok = String(repeating: "[", count: 20) + String(repeating: "]", count: 20)
        let fine = try forge(header: #"{"alg":"HS256"}"#, payload: #"{"exp":4102444800,"x":\#(ok)}"#)
        #expect(code { _ = try verifier.verify(fine) } == nil)
    }

    @Test(arguments: [
        (#"{"exp":"4102444800"}"#, TokenError.Code.invalidClaim), (#"{"exp":-1}"#, .invalidClaim), (#"{"exp":1e300}"#, .invalidClaim),
        (#"{"exp":253402300800}"#, .invalidClaim), (#"{"exp":true}"#, .invalidClaim), (#"{"exp":null}"#, .invalidClaim),
        (#"{"exp":4102444800.5}"#, nil), (#"{"exp":4102444800,"nbf":"0"}"#, .invalidClaim), (#"{"exp":4102444800,"iat":[1]}"#, .invalidClaim),
        (#"{"exp":4102444800,"iss":7}"#, .invalidClaim), (#"{"exp":4102444800,"sub":{}}"#, .invalidClaim),
        (#"{"exp":4102444800,"aud":[1]}"#, .invalidClaim), (#"{"exp":4102444800,"jti":1}"#, .invalidClaim),
        (#"[{"exp":4102444800}]"#, .invalidJSON), (#"{"exp":4102444800,"sub":"a","sub":"b"}"#, .duplicateMember),
    ])
    func claimTypesAndRanges(payload: String, expected: TokenError.Code?) throws {
        let token = try forge(header: #"{"alg":"HS256"}"#, payload: payload)
        #expect(code { _ = try verifier.verify(token) } == expected, "\(payload)")
    }

    @Test func truncatedAndExtendedSignatures() throws {
        let token = try forge(header: #"{"alg":"HS256"}"#, payload: future)
        let parts = token.split(separator: ".").map(String.init)
        let signature = Base64URL.decode(parts[2]) ?? []
        for variant in [Array(signature.dropLast()), signature + [0], [], Array(signature.prefix(16))] {
            let bad = parts[0] + "." + parts[1] + "." + Base64URL.encode(variant)
            #expect(code { _ = try verifier.verify(bad) } == .badSignature)
        }
    }

    @Test func unverifiedDecodeShowsEverything() throws {
        let token = try forge(header: #"{"alg":"none","typ":"JWT"}"#, payload: #"{"sub":"x"}"#)
        let decoded = try UnverifiedToken(token)
        #expect(decoded.header["alg"] == .string("none"))
        #expect(decoded.payload == .object(["sub": .string("x")]))
    }

    @Test func jsonWriterRoundTrips() throws {
        let text = #"{"a":[1,2.5,-3e2,true,false,null],"b":"q\"\\\n\u0001é😀","c":{}}"#
        let value = try JSONValue.parse(text)
        #expect(try JSONValue.parse(value.compactText) == value)
        #expect(try JSONValue.parse(value.prettyText) == value)
    }

    /// Strings with escapes: the parser copies the runs between escapes whole, so escapes at
    /// either end, back to back, and around long runs must come out exactly; a raw control
    /// character, a bad escape or invalid UTF-8 after an escape is still refused.
    @Test func jsonParserStringsWithEscapes() throws {
        let cases: [(String, String)] = [
            (#""\nabc""#, "\nabc"), (#""abc\n""#, "abc\n"), (#""\n\t\"\\\/""#, "\n\t\"\\/"),
            (#""a\u00e9b\ud83d\ude00c""#, "aéb😀c"), (#""\\""#, "\\"),
        ]
        for (json, expected) in cases {
            #expect(try JSONValue.parse(json) == .string(expected), "\(json)")
        }
        let line = String(repeating: "MIIBkTCB+wIBADA/", count: 4)
        let pem = (0..<12).map { _ in line }.joined(separator: "\n")
        #expect(try JSONValue.parse("\"" + pem.replacingOccurrences(of: "\n", with: "\\n") + "\"") == .string(pem))
        for bad in ["\"a\\nb\u{01}c\"", "\"a\\nb\\qc\"", "\"a\\nbc", "\"a\\nbc\\"] {
            #expect(throws: TokenError.self, "\(bad.debugDescription)") { try JSONValue.parse(bad) }
        }
        // Invalid UTF-8 in a run after an escape, and in one without.
        #expect(throws: TokenError.self) { try JSONValue.parse(Array(#""a\nb"#.utf8) + [0xff, 0x22]) }
        #expect(throws: TokenError.self) { try JSONValue.parse(Array(#""ab"#.utf8) + [0xc3, 0x22]) }
    }

    /// `UTF8Text.validated` (the JSON parser's strings) accepts exactly what the standard
    /// library's `String(validating:as:)` does, and gives the same text: the edges of UTF-8
    /// (overlong forms, surrogates, above U+10FFFF, truncated and stray continuation bytes) and
    /// 60,000 random byte strings biased toward multi-byte sequences.
    @Test func utf8ValidationAgreesWithTheStandardLibrary() {
        let edges: [[UInt8]] = [
            [], [0x41], [0x7f], [0x80], [0xbf], [0xc0, 0x80], [0xc1, 0xbf], [0xc2, 0x80], [0xdf, 0xbf], [0xe0, 0x80, 0x80], [0xe0, 0x9f, 0xbf],
            [0xe0, 0xa0, 0x80], [0xed, 0x9f, 0xbf], [0xed, 0xa0, 0x80], [0xed, 0xbf, 0xbf], [0xee, 0x80, 0x80], [0xef, 0xbf, 0xbd], [0xef, 0xbf, 0xbf],
            [0xf0, 0x8f, 0xbf, 0xbf], [0xf0, 0x90, 0x80, 0x80], [0xf4, 0x8f, 0xbf, 0xbf], [0xf4, 0x90, 0x80, 0x80], [0xf5, 0x80, 0x80, 0x80],
            [0xff], [0xfe], [0xe2, 0x82], [0xf0, 0x9f, 0x98], [0x41, 0xc3], Array("héllo wörld 😀".utf8), Array(repeating: 0x61, count: 15),
            Array(repeating: 0x61, count: 16), Array(repeating: 0x61, count: 15) + [0xc3, 0xa9], Array(repeating: 0x61, count: 300) + [0xed, 0xa0, 0x80],
        ]
        var generator = SystemRandomNumberGenerator()
        let interesting: [UInt8] = [0x00, 0x41, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xff]
        var accepted = 0
        for index in 0..<(edges.count + 60_000) {
            let bytes: [UInt8] =
                index < edges.count
                ? edges[index]
                : (0..<Int.random(in: 0...24, using: &generator)).map { _ in
                    Bool.random(using: &generator) ? interesting.randomElement(using: &generator) ?? 0 : UInt8.random(in: 0...255, using: &generator)
                }
            let reference = String(validating: bytes, as: UTF8.self)
            let fast = UTF8Text.validated(bytes)
            if fast != reference {
                Issue.record("\(bytes): \(String(describing: fast)) vs \(String(describing: reference))")
                return
            }
            if fast != nil { accepted += 1 }
        }
        #expect(accepted > 2_000, "the random strings were almost all invalid; the comparison tested little")
    }

    /// Object members come out sorted by name as `String` sorts them (non-ASCII names too).
    @Test func jsonWriterSortsMembers() throws {
        let names = ["b", "a", "é", "Z", "aa", "e\u{301}x", "😀", "", "A1", "a0"]
        let object = JSONValue.object(Dictionary(uniqueKeysWithValues: names.enumerated().map { ($1, JSONValue.integer($0)) }))
        let expected = "{" + names.sorted().map { name in
            JSONValue.string(name).compactText + ":" + String(names.firstIndex(of: name) ?? -1)
        }.joined(separator: ",") + "}"
        #expect(object.compactText == expected)
    }

    /// ISO8601Text gives exactly the text of `Date.ISO8601FormatStyle()`: whole seconds dropped
    /// toward the past (also before 1970), leap days, the ends of years 1600 and 9999, and dates
    /// outside those years (handed to the format style, whose calendar is Julian before 1582).
    @Test func iso8601TextMatchesTheFormatStyle() {
        let style = Date.ISO8601FormatStyle()
        var dates: [Double] = [
            0, -0.5, -1, -1.5, 0.999, 59.999_999, 86_399.9, 951_782_400, 951_868_799.5, 4_107_542_400, 1_795_567_547.75,
            -11_676_096_000, -11_676_096_000.5, -11_676_096_001, -62_135_596_800, 253_402_300_799.9, 253_402_300_800, 1e15, -1e15,
        ]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 { dates.append(Double.random(in: -13_000_000_000..<253_402_300_800, using: &generator)) }
        for _ in 0..<2_000 { dates.append(Double(Int.random(in: -2_000_000_000...4_000_000_000, using: &generator))) }
        for seconds in dates {
            let date = Date(timeIntervalSince1970: seconds)
            #expect(ISO8601Text.string(date) == style.format(date), "\(seconds)")
            // The bytes appended for a JSON writer are the same text, after what was there.
            var bytes: [UInt8] = [0x22]
            ISO8601Text.append(date, to: &bytes)
            #expect(bytes == [0x22] + Array(style.format(date).utf8), "\(seconds)")
        }
    }

    /// The writer's escapes, exactly: quote, backslash, the short forms, \u00XX for the other
    /// control characters, everything else (DEL, non-ASCII) as is; runs between escapes intact.
    @Test func jsonWriterEscapesExactly() throws {
        #expect(JSONValue.string("").compactText == #""""#)
        #expect(JSONValue.string("plain text").compactText == #""plain text""#)
        #expect(JSONValue.string("a\"b\\c\nd\re\tf\u{08}g\u{0C}h").compactText == #""a\"b\\c\nd\re\tf\bg\fh""#)
        #expect(JSONValue.string("\u{00}\u{01}\u{1F}").compactText == #""\u0000\u0001\u001f""#)
        #expect(JSONValue.string("\u{7F}é😀\n").compactText == "\"\u{7F}é😀\\n\"")
        #expect(JSONValue.string("\"\"").compactText == #""\"\"""#)
        // The bytes an HTTP body gets are the text's, and the indented form is exactly this.
        let nested = JSONValue.object(["a": .array([.integer(1), .string("x\ny")]), "b": .object([:]), "c": .array([])])
        #expect(nested.compactBytes == Array(nested.compactText.utf8))
        #expect(nested.compactText == #"{"a":[1,"x\ny"],"b":{},"c":[]}"#)
        #expect(nested.prettyText == "{\n  \"a\": [\n    1,\n    \"x\\ny\"\n  ],\n  \"b\": {},\n  \"c\": []\n}")
        // Every character from U+0000 to U+00FF, and a PEM-like text, survive a round trip.
        let all = String(decoding: (0...255).map { UInt8($0) }.flatMap { Array(String(UnicodeScalar($0)).utf8) }, as: UTF8.self)
        let pem = "-----BEGIN CERTIFICATE-----\n" + String(repeating: "MIIB+/==", count: 40) + "\n-----END CERTIFICATE-----\n"
        for text in [all, pem] {
            #expect(try JSONValue.parse(JSONValue.string(text).compactText) == .string(text))
            #expect(try JSONValue.parse(JSONValue.object(["k\n": .string(text)]).prettyText) == .object(["k\n": .string(text)]))
        }
    }

    /// The writer scans eight bytes at a time for what needs an escape: random texts of every
    /// length up to 40 from characters around each boundary of that test (0x1F/0x20, the quote
    /// and its neighbours, the backslash and its neighbours, 0x7F, two- and four-byte UTF-8),
    /// each written exactly as a character-by-character escaper writes it, and read back by the
    /// parser, which scans the same way; an unescaped control character or quote at any offset.
    @Test func jsonWriterFindsEveryEscapeAtEveryOffset() throws {
        func reference(_ text: String) -> String {
            var out = "\""
            for scalar in text.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case "\n": out += "\\n"
                case "\r": out += "\\r"
                case "\t": out += "\\t"
                case "\u{08}": out += "\\b"
                case "\u{0C}": out += "\\f"
                case _ where scalar.value < 0x20: out += "\\u00" + (scalar.value < 0x10 ? "0" : "") + String(scalar.value, radix: 16)
                default: out.unicodeScalars.append(scalar)
                }
            }
            return out + "\""
        }
        let pieces: [String] = ["a", "\"", "!", "#", "\\", "[", "]", "\n", "\u{00}", "\u{1F}", " ", "\u{7F}", "é", "😀", "\u{80}", "~"]
        var generator = SystemRandomNumberGenerator()
        for length in 0...40 {
            for _ in 0..<50 {
                let text = (0..<length).map { _ in pieces.randomElement(using: &generator) ?? "a" }.joined()
                #expect(JSONValue.string(text).compactText == reference(text), "\(Array(text.utf8))")
                // The parser scans its strings the same way: it reads the text back.
                #expect(try JSONValue.parse(reference(text)) == .string(text), "\(Array(text.utf8))")
            }
        }
        // A long run with one escape at each position.
        for position in 0..<24 {
            var bytes = [UInt8](repeating: UInt8(ascii: "x"), count: 24)
            bytes[position] = UInt8(ascii: "\"")
            let text = String(decoding: bytes, as: UTF8.self)
            #expect(JSONValue.string(text).compactText == reference(text))
            // Unescaped in a document, a control character is refused wherever it lies, and a
            // quote ends the string there.
            for raw: UInt8 in [0x00, 0x0A, 0x1F] {
                bytes[position] = raw
                #expect(throws: TokenError.self) { try JSONValue.parse(Array("\"".utf8) + bytes + Array("\"".utf8)) }
            }
            bytes[position] = UInt8(ascii: "\"")
            #expect(throws: TokenError.self) { try JSONValue.parse(Array("\"".utf8) + bytes + Array("\"".utf8)) }
            bytes[position] = UInt8(ascii: "x")
            #expect(try JSONValue.parse(Array("\"".utf8) + bytes + Array("\"".utf8)) == .string(String(repeating: "x", count: 24)))
        }
    }
}
