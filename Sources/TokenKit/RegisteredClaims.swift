public import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A NumericDate (RFC 7519 §2): seconds since the Unix epoch, fractions allowed.
public typealias NumericDate = Double

/// The registered claims of a JWT (RFC 7519 §4.1), type-checked.
public struct RegisteredClaims: Sendable, Hashable {
    /// Latest NumericDate accepted: 9999-12-31T23:59:59Z. Larger values are refused as invalid.
    public static let maximumDate: NumericDate = 253_402_300_799
    /// The NumericDates accepted: 0 through ``maximumDate`` (NaN and infinities are in no range).
    package static let dates: ClosedRange<NumericDate> = 0...maximumDate

    /// A claim string, kept as a range of the payload's bytes until someone asks for it (the
    /// hot path reads `iss`, `sub`, `jti` without allocating). Ranges are used only for
    /// escape-free printable ASCII, so the bytes are the string.
    enum Text: Sendable {
        case string(String)
        case range(Int, Int)
    }

    /// The payload the ranges point into (nil when every string is a `.string`).
    private let source: PayloadBytes?
    private let iss: Text?
    private let sub: Text?
    private let jti: Text?
    private let aud: [Text]?
    public let expiration: NumericDate?
    public let notBefore: NumericDate?
    public let issuedAt: NumericDate?

    public var issuer: String? { iss.map(resolve) }
    public var subject: String? { sub.map(resolve) }
    /// `aud`, normalised to an array (a single string becomes one element).
    public var audience: [String]? { aud.map { $0.map(resolve) } }
    public var id: String? { jti.map(resolve) }

    public var expirationDate: Date? { expiration.map { Date(timeIntervalSince1970: $0) } }
    public var issuedAtDate: Date? { issuedAt.map { Date(timeIntervalSince1970: $0) } }
    public var notBeforeDate: Date? { notBefore.map { Date(timeIntervalSince1970: $0) } }

    private func resolve(_ text: Text) -> String {
        switch text {
        case .string(let s): s
        case .range(let start, let end):
            source?.withUnsafeBytes { String(decoding: $0[start..<end], as: UTF8.self) } ?? ""
        }
    }

    /// Whether a claim equals one of `candidates`, without building a String from a range.
    private func text(_ text: Text, isIn candidates: Set<String>) -> Bool {
        switch text {
        case .string(let s):
            return candidates.contains(s)
        case .range(let start, let end):
            guard let source else { return false }
            return source.withUnsafeBytes { bytes -> Bool in
                guard let base = bytes.baseAddress else { return false }
                for candidate in candidates where candidate.utf8.count == end - start {
                    var c = candidate
                    let same = c.withUTF8 { u in u.baseAddress.map { memcmp($0, base + start, end - start) == 0 } ?? (end == start) }
                    if same { return true }
                }
                return false
            }
        }
    }

    var hasIssuer: Bool { iss != nil }

    func issuer(isIn candidates: Set<String>) -> Bool { iss.map { text($0, isIn: candidates) } ?? false }
    func audience(intersects candidates: Set<String>) -> Bool { aud?.contains { text($0, isIn: candidates) } ?? false }

    public static func == (a: RegisteredClaims, b: RegisteredClaims) -> Bool {
        a.issuer == b.issuer && a.subject == b.subject && a.audience == b.audience && a.id == b.id
            && a.expiration == b.expiration && a.notBefore == b.notBefore && a.issuedAt == b.issuedAt
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(issuer)
        hasher.combine(subject)
        hasher.combine(audience)
        hasher.combine(id)
        hasher.combine(expiration)
        hasher.combine(notBefore)
        hasher.combine(issuedAt)
    }

    /// Claims whose strings are ranges of `source` (the fast payload reader).
    init(
        source: PayloadBytes, iss: Range<Int>?, sub: Range<Int>?, aud: Range<Int>?, jti: Range<Int>?, expiration: NumericDate?,
        notBefore: NumericDate?, issuedAt: NumericDate?
    ) {
        self.source = source
        self.iss = iss.map { .range($0.lowerBound, $0.upperBound) }
        self.sub = sub.map { .range($0.lowerBound, $0.upperBound) }
        self.aud = aud.map { [.range($0.lowerBound, $0.upperBound)] }
        self.jti = jti.map { .range($0.lowerBound, $0.upperBound) }
        self.expiration = expiration
        self.notBefore = notBefore
        self.issuedAt = issuedAt
    }

    /// Reads and type-checks the registered claims of a payload.
    public init(payload: [String: JSONValue]) throws(TokenError) {
        source = nil
        iss = try RegisteredClaims.string(payload, "iss").map { .string($0) }
        sub = try RegisteredClaims.string(payload, "sub").map { .string($0) }
        jti = try RegisteredClaims.string(payload, "jti").map { .string($0) }
        expiration = try RegisteredClaims.date(payload, "exp")
        notBefore = try RegisteredClaims.date(payload, "nbf")
        issuedAt = try RegisteredClaims.date(payload, "iat")
        switch payload["aud"] {
        case nil: aud = nil
        case .string(let s)?: aud = [.string(s)]
        case .array(let items)?:
            var out: [Text] = []
            for item in items {
                guard case .string(let s) = item else { throw TokenError(.invalidClaim, "\"aud\" must be a string or an array of strings") }
                out.append(.string(s))
            }
            aud = out
        default:
            throw TokenError(.invalidClaim, "\"aud\" must be a string or an array of strings")
        }
    }

    static func string(_ payload: [String: JSONValue], _ name: String) throws(TokenError) -> String? {
        guard let value = payload[name] else { return nil }
        guard case .string(let s) = value else { throw TokenError(.invalidClaim, "\"\(name)\" must be a string") }
        return s
    }

    static func date(_ payload: [String: JSONValue], _ name: String) throws(TokenError) -> NumericDate? {
        guard let value = payload[name] else { return nil }
        guard case .number(let text) = value else {
            throw TokenError(.invalidClaim, "\"\(name)\" must be a JSON number (NumericDate)")
        }
        guard let seconds = Double(text), dates.contains(seconds) else {
            throw TokenError(.invalidClaim, "\"\(name)\" is out of range for a NumericDate (0 … \(Int(maximumDate)))")
        }
        return seconds
    }
}
