import Foundation

#if canImport(Glibc)
import Glibc
#endif

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
        // Each comparison is written so that a NaN (a leeway, maxAge or clock of NaN) refuses:
        // every comparison with NaN is false, and `now >= exp + leeway` passed an expired token.
        if let exp = claims.expiration {
            if !(now < exp + leeway) {
                throw TokenError(.expired, "the token expired at \(ClaimsPolicy.format(exp)) (\(ClaimsPolicy.seconds(now - exp)) s ago; leeway \(ClaimsPolicy.seconds(leeway)) s)")
            }
        } else if requireExpiration {
            throw TokenError(.missingClaim, "the token has no \"exp\" and this verifier requires one")
        }
        if let nbf = claims.notBefore, !(now + leeway >= nbf) {
            throw TokenError(.notYetValid, "the token is not valid before \(ClaimsPolicy.format(nbf)) (\(ClaimsPolicy.seconds(nbf - now)) s from now)")
        }
        if let iat = claims.issuedAt, !(iat <= now + leeway) {
            throw TokenError(.issuedInFuture, "the token claims to be issued at \(ClaimsPolicy.format(iat)), \(ClaimsPolicy.seconds(iat - now)) s in the future")
        }
        if let maxAge {
            guard let iat = claims.issuedAt else {
                throw TokenError(.missingClaim, "the token has no \"iat\" and this verifier limits token age")
            }
            if !(now - iat <= maxAge + leeway) {
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

    /// Seconds for a refusal's message: whole ones as an integer, others as `String(format:
    /// "%.3f")` gives them — computed from the value × 1000 rounded, as `%.3f` rounds, except where
    /// that product lies too near a half for its own rounding error (there, and past ±1e12 s,
    /// `String(format:)` itself). `String(format:)` costs ≈ 1.2 µs here, and a live refusal's
    /// `now - exp` always has a fraction.
    static func seconds(_ value: Double) -> String {
        if value == value.rounded() && abs(value) < 1e15 { return String(Int(value)) }
        let scaled = abs(value) * 1000
        let fraction = scaled - scaled.rounded(.down)
        guard scaled < 1e15, abs(fraction - 0.5) > 4 * scaled.ulp else { return String(format: "%.3f", value) }
        let milliseconds = Int(scaled.rounded())
        let thousandths = milliseconds % 1000
        let digits = thousandths < 10 ? "00\(thousandths)" : thousandths < 100 ? "0\(thousandths)" : "\(thousandths)"
        return "\(value < 0 ? "-" : "")\(milliseconds / 1000).\(digits)"
    }

    /// A NumericDate as ISO 8601 text for a refusal's message (`2100-01-01T00:00:00Z`; whole
    /// seconds, a fraction dropped), through ``ISO8601Text``: a new `ISO8601DateFormatter` each time
    /// made an expired HS256 token's refusal ≈ 72 µs, about 80 times its verify
    /// (`tokenbench --filter HS256.expired`).
    static func format(_ date: NumericDate) -> String {
        ISO8601Text.string(Date(timeIntervalSince1970: date))
    }
}
