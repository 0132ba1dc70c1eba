import Foundation
import Testing
@testable import TokenKit

/// A differential fuzz check of the hot path's payload reader (``FastPayload``) against the strict
/// parser (`JSONValue.parse` and `RegisteredClaims(payload:)`): on random payloads — valid and
/// not, simple and not — whenever the reader gives claims, the strict parser accepts the same
/// bytes as a JSON object and reads the same claims from it, and the reader's "has the required
/// claims" is the object's. (That it is never looser is the first half; that what it reads is
/// what the parser reads is the second.) Fuzz/Sources/FuzzToken checks the same under libFuzzer.
@Suite("FastPayload against the strict parser")
struct FastPayloadDifferentialTests {
    /// Pieces payloads are made of: the registered names and others, values of every kind and
    /// range the reader meets (escapes, non-ASCII, huge and odd numbers, nested values), and
    /// broken ones.
    static let names = ["iss", "sub", "jti", "aud", "exp", "nbf", "iat", "name", "scope", "x", "", "is", "issuer", "exp2", "\\u0069ss", "ïss"]
    static let values = [
        "\"a\"", "\"\"", "\"https://idp.example\"", "\"a\\\"b\"", "\"\\u00e9\"", "\"é\"", "\"a\\nb\"", "\"\\ud83d\\ude00\"",
        "0", "1", "-1", "1700000000", "1700000000.5", "1e9", "1E+3", "2e20", "253402300799", "253402300800", "-0", "0.0", "1.7e9",
        "01", "1.", ".5", "+1", "NaN", "Infinity", "1e400",
        "true", "false", "null", "tru", "nul",
        "[]", "[\"a\"]", "[\"a\",\"b\"]", "[1,2]", "[\"a\",1]", "[[\"a\"]]", "{}", "{\"a\":1}", "[\"a\",]", "[",
    ]
    static let required: [Set<String>] = [[], ["sub"], ["exp", "iat"], ["jti", "scope"], ["name"], ["iss", "sub", "jti", "nbf"]]

    /// A random payload: mostly well-formed objects of random members, sometimes with a
    /// duplicate, odd spacing, a trailing comma, a missing brace or trailing bytes.
    static func payload(_ generator: inout some RandomNumberGenerator) -> String {
        var members: [String] = []
        for _ in 0..<Int.random(in: 0...9, using: &generator) {
            let name = names.randomElement(using: &generator) ?? "x"
            let value = values.randomElement(using: &generator) ?? "1"
            let space = [" ", "", "\n", "\t"].randomElement(using: &generator) ?? ""
            members.append("\"\(name)\"\(space):\(space)\(value)")
        }
        if !members.isEmpty, Int.random(in: 0..<8, using: &generator) == 0, let first = members.first { members.append(first) }
        var text = "{" + members.joined(separator: Bool.random(using: &generator) ? "," : ", ") + "}"
        switch Int.random(in: 0..<24, using: &generator) {
        case 0: text.removeLast()
        case 1: text.insert(",", at: text.index(before: text.endIndex))
        case 2: text += " x"
        case 3: text = " " + text + "\n"
        case 4: text = "[" + text + "]"
        default: break
        }
        return text
    }

    /// The reader's result for `text`, or nil when it leaves the payload to the strict parser.
    static func fast(_ text: String, required: Set<String>) -> FastPayload.Result? {
        let segment = Base64URL.encode(Array(text.utf8))
        let decoded = Array(segment.utf8).withUnsafeBytes { PayloadBytes.decode($0) }
        guard let decoded else { return nil }
        return FastPayload.scan(decoded, required: FastPayload.Required(required))
    }

    @Test func whatTheReaderReadsIsWhatTheStrictParserReads() throws {
        var generator = SystemRandomNumberGenerator()
        var read = 0, leftToTheParser = 0
        for round in 0..<20_000 {
            let text = Self.payload(&generator)
            let required = Self.required[round % Self.required.count]
            guard let fast = Self.fast(text, required: required) else {
                leftToTheParser += 1
                continue
            }
            read += 1
            let parsed = try? JSONValue.parse(Array(text.utf8))
            guard case .object(let object)? = parsed else {
                Issue.record("the reader read a payload the strict parser refuses: \(text)")
                continue
            }
            guard let strict = try? RegisteredClaims(payload: object) else {
                Issue.record("the reader read claims the strict parser refuses: \(text)")
                continue
            }
            #expect(fast.claims == strict, "\(text)")
            #expect(fast.claims.issuer == strict.issuer && fast.claims.audience == strict.audience, "\(text)")
            #expect(fast.hasRequired == required.isSubset(of: Set(object.keys)), "\(required) in \(text)")
        }
        // Both sides were exercised: the check is not vacuous.
        #expect(read > 2_000 && leftToTheParser > 2_000, "read \(read), left to the parser \(leftToTheParser)")
    }
}
