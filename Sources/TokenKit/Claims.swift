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
        guard let seconds = Double(text), seconds.isFinite, seconds >= 0, seconds <= maximumDate else {
            throw TokenError(.invalidClaim, "\"\(name)\" is out of range for a NumericDate (0 … \(Int(maximumDate)))")
        }
        return seconds
    }
}

/// What a verifier requires of a token's claims and header `typ`.
///
/// Secure by default: `exp` is required; `nbf` and `iat` are checked when present; once an
/// issuer or audience is configured the claim is required; a token that carries `aud` is refused
/// unless the verifier names an audience it accepts (RFC 7519 §4.1.3).
///
/// ```swift
/// var policy = ClaimsPolicy(issuers: ["https://issuer.example"], audiences: ["my-api"])
/// policy.maxAge = 30 * 24 * 3600   // HAT tokens: at most 30 days after iat
/// ```
public struct ClaimsPolicy: Sendable {
    /// Refuse tokens without `exp`. Default true.
    public var requireExpiration: Bool
    /// Clock-skew allowance in seconds applied to `exp`, `nbf`, `iat` and `maxAge`. Default 60.
    public var leeway: Double
    /// Refuse tokens whose `iat` is older than this many seconds (makes `iat` required).
    public var maxAge: Double?
    /// Accepted `iss` values; empty means any (and `iss` is then optional).
    public var issuers: Set<String>
    /// Accepted `aud` values; the token must name at least one. Empty means the token must carry
    /// no `aud`, unless ``ignoresAudience`` is set.
    public var audiences: Set<String>
    /// Accept tokens with any `aud` when ``audiences`` is empty. Default false.
    public var ignoresAudience: Bool
    /// Claims that must be present (by name), in addition to the rules above.
    public var requiredClaims: Set<String>
    /// Required header `typ` (compared case-insensitively, an `application/` prefix ignored),
    /// e.g. `"JWT"` or `"at+jwt"`. Nil accepts any or none.
    public var expectedType: String?
    /// Header parameters this application understands when a token lists them in `crit`.
    public var understoodCriticalHeaders: Set<String>

    public init(
        requireExpiration: Bool = true, leeway: Double = 60, maxAge: Double? = nil, issuers: Set<String> = [],
        audiences: Set<String> = [], ignoresAudience: Bool = false, requiredClaims: Set<String> = [],
        expectedType: String? = nil, understoodCriticalHeaders: Set<String> = []
    ) {
        self.requireExpiration = requireExpiration
        self.leeway = leeway
        self.maxAge = maxAge
        self.issuers = issuers
        self.audiences = audiences
        self.ignoresAudience = ignoresAudience
        self.requiredClaims = requiredClaims
        self.expectedType = expectedType
        self.understoodCriticalHeaders = understoodCriticalHeaders
    }

    /// Applies the policy to checked claims at time `now`.
    func check(_ claims: RegisteredClaims, missingRequired: () -> String?, header: JOSEHeader, now: Double) throws(TokenError) {
        if let expectedType {
            guard let typ = header.type, ClaimsPolicy.normaliseType(typ) == ClaimsPolicy.normaliseType(expectedType) else {
                throw TokenError(.typeMismatch, "header typ is \(header.type.map { "\"\(JSONParser.printable($0))\"" } ?? "absent"); \"\(expectedType)\" is required")
            }
        }
        if let exp = claims.expiration {
            if now >= exp + leeway {
                throw TokenError(.expired, "the token expired at \(ClaimsPolicy.format(exp)) (\(ClaimsPolicy.seconds(now - exp)) s ago; leeway \(ClaimsPolicy.seconds(leeway)) s)")
            }
        } else if requireExpiration {
            throw TokenError(.missingClaim, "the token has no \"exp\" and this verifier requires one")
        }
        if let nbf = claims.notBefore, now + leeway < nbf {
            throw TokenError(.notYetValid, "the token is not valid before \(ClaimsPolicy.format(nbf)) (\(ClaimsPolicy.seconds(nbf - now)) s from now)")
        }
        if let iat = claims.issuedAt, iat > now + leeway {
            throw TokenError(.issuedInFuture, "the token claims to be issued at \(ClaimsPolicy.format(iat)), \(ClaimsPolicy.seconds(iat - now)) s in the future")
        }
        if let maxAge {
            guard let iat = claims.issuedAt else {
                throw TokenError(.missingClaim, "the token has no \"iat\" and this verifier limits token age")
            }
            if now - iat > maxAge + leeway {
                throw TokenError(.tooOld, "the token was issued \(ClaimsPolicy.seconds(now - iat)) s ago; at most \(ClaimsPolicy.seconds(maxAge)) s is accepted")
            }
        }
        if !issuers.isEmpty {
            guard claims.hasIssuer else { throw TokenError(.missingClaim, "the token has no \"iss\"") }
            guard claims.issuer(isIn: issuers) else {
                throw TokenError(.issuerMismatch, "issuer \"\(JSONParser.printable(claims.issuer ?? ""))\" is not accepted")
            }
        }
        if !audiences.isEmpty {
            guard let aud = claims.audience else { throw TokenError(.missingClaim, "the token has no \"aud\"") }
            guard claims.audience(intersects: audiences) else {
                throw TokenError(.audienceMismatch, "the token's audience \(aud.map { "\"\(JSONParser.printable($0))\"" }.joined(separator: ", ")) names none of the accepted ones")
            }
        } else if let aud = claims.audience, !ignoresAudience {
            throw TokenError(.audienceMismatch, "the token is meant for audience \(aud.map { "\"\(JSONParser.printable($0))\"" }.joined(separator: ", ")) but this verifier accepts no audience (configure one)")
        }
        if let name = missingRequired() {
            throw TokenError(.missingClaim, "the token has no \"\(JSONParser.printable(name))\"")
        }
    }

    /// The same policy with every string and set in new storage, for a verifier shard (the hot
    /// path retains the issuer and audience sets; shared ones would bounce between cores).
    func copyForShard() -> ClaimsPolicy {
        func fresh(_ text: String) -> String { String(decoding: Array(text.utf8), as: UTF8.self) }
        func fresh(_ set: Set<String>) -> Set<String> { Set(set.map(fresh)) }
        var copy = self
        copy.issuers = fresh(issuers)
        copy.audiences = fresh(audiences)
        copy.requiredClaims = fresh(requiredClaims)
        copy.understoodCriticalHeaders = fresh(understoodCriticalHeaders)
        copy.expectedType = expectedType.map(fresh)
        return copy
    }

    static func normaliseType(_ typ: String) -> String {
        let lower = typ.lowercased()
        return lower.hasPrefix("application/") ? String(lower.dropFirst(12)) : lower
    }

    static func seconds(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int(value)) : String(format: "%.3f", value)
    }

    static func format(_ date: NumericDate) -> String {
        let formatter = ISO8601DateFormatter()
        return formatter.string(from: Date(timeIntervalSince1970: date))
    }
}

/// Where a verifier reads the current time from. Inject a fixed clock in tests.
public struct VerificationClock: Sendable {
    let read: @Sendable () -> NumericDate

    /// A clock that returns `read()` seconds since the Unix epoch.
    public init(_ read: @escaping @Sendable () -> NumericDate) { self.read = read }

    /// The system's wall clock.
    public static let system = VerificationClock { Date().timeIntervalSince1970 }

    /// A clock stopped at `seconds` since the Unix epoch.
    public static func fixed(_ seconds: NumericDate) -> VerificationClock { VerificationClock { seconds } }

    public var now: NumericDate { read() }
}
