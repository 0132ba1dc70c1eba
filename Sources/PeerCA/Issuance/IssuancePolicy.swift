public import Foundation
public import TokenKit

/// How verified tokens become peer identities, and how long certificates live.
public struct IssuancePolicy: Sendable {
    /// How often one token (`iss` + `jti`) may be turned into a certificate.
    public enum TokenReuse: String, Sendable, Hashable {
        /// Once: the ledger refuses a second certificate for the same `jti` (tokens without `jti` are
        /// refused); a retry with the same token and key gets the first certificate again
        /// (``IssuedCertificate/isRepeat``).
        case oncePerTokenID = "once"
        /// Any number of times while the token is valid.
        case unlimited
    }

    /// The SPIFFE trust domain of every certificate.
    public var trustDomain: String
    /// The provider name recorded in identities (e.g. `pda`, `auth0`).
    public var provider: String
    /// Longest certificate validity. Default 24 h.
    public var maximumValidity: TimeInterval = 86_400
    /// How far `notBefore` is set back for clock skew. Default 5 minutes.
    public var backdate: TimeInterval = 300
    /// At least this many authentication factors (from `amr`). Default 0.
    public var requiredFactors = 0
    /// The latest sign-in (`auth_time`, else `iat`) must be at most this old, if set.
    public var maximumSignInAge: TimeInterval?
    /// Claim holding the account's user ID: a claim's name, or a path through nested objects
    /// (`user.id`; a claim named with the dots wins). Default `sub`.
    public var accountClaim = "sub"
    /// Put before the account claim's value to make the account UID, so two providers' users with
    /// the same `sub` stay two accounts (a server's providers use `<provider>:`). Default none.
    public var accountPrefix = ""
    /// Claims copied into ``PeerIdentity/profile`` when they are strings.
    public var profileClaims = ["email", "name", "picture"]
    /// Factors, context and sign-in age the token must show (each refusal with its own code).
    public var factorPolicy = FactorPolicy()
    /// Claim holding permissions (an array of strings, or a space-separated string such as `scope`), if any.
    public var permissionsClaim: String?
    /// Permissions every identity gets.
    public var defaultPermissions: [String] = []
    /// Token reuse per issuer (`iss`); issuers not listed get ``defaultTokenReuse``.
    public var tokenReuse: [String: TokenReuse] = [:]
    /// Default ``TokenReuse``. Default: unlimited.
    public var defaultTokenReuse: TokenReuse = .unlimited
    /// How long the identity of a token without `exp` lasts, counted from now; nil (the default)
    /// refuses such a token. Set only where the verifier was told to accept tokens without `exp`
    /// (Ditto's sample webhook's `defaultExpirationSeconds`).
    public var lifetimeWithoutExpiration: TimeInterval?

    /// A policy whose trust domain is derived from an app ID: lower-cased, and followed by
    /// `.<suffix>` when a suffix is given (`2F4E…` → `2f4e….peers.example`).
    public init(appID: String, trustDomainSuffix: String? = nil, provider: String) throws(PeerCAError) {
        let domain = appID.lowercased() + (trustDomainSuffix.map { "." + $0.lowercased() } ?? "")
        guard SPIFFE.isTrustDomain(domain) else {
            throw PeerCAError(.policyViolation, "\"\(domain.prefix(80))\" is not a SPIFFE trust domain (letters, digits, '.', '-', '_')")
        }
        self.trustDomain = domain
        self.provider = provider
    }

    func reuse(for issuer: String) -> TokenReuse { tokenReuse[issuer] ?? defaultTokenReuse }

    /// The identity a verified token establishes, or a typed error naming what is missing.
    /// How far a token's `auth_time` may lie ahead of this clock (the identity provider's clock
    /// ahead of ours): 300 s, as far as a certificate is backdated.
    public static let signInClockSkew: TimeInterval = 300

    public func identity(for token: VerifiedToken, now: Date) throws(PeerCAError) -> PeerIdentity {
        try identity(for: token, payload: token.payload, now: now)
    }

    /// ``identity(for:now:)`` with the token's payload already parsed (`token.payload` parses on
    /// each access; a caller that reads other claims too parses once and passes it here).
    public func identity(for token: VerifiedToken, payload: [String: JSONValue], now: Date) throws(PeerCAError) -> PeerIdentity {
        guard let issuer = token.claims.issuer, !issuer.isEmpty else { throw PeerCAError(.policyViolation, "the token has no \"iss\"") }
        guard let subject = token.claims.subject, !subject.isEmpty else { throw PeerCAError(.policyViolation, "the token has no \"sub\"") }
        guard let expiration = token.claims.expirationDate ?? lifetimeWithoutExpiration.map({ now.addingTimeInterval($0) }) else {
            throw PeerCAError(.policyViolation, "the token has no \"exp\"")
        }
        guard expiration > now else { throw PeerCAError(.tokenExpired, "the token expired at \(expiration)") }
        guard let claimed = JSONValue.value(atPath: accountClaim, in: payload)?.stringValue, !claimed.isEmpty else {
            throw PeerCAError(.policyViolation, "the token's \"\(accountClaim)\" must be a non-empty string (it names the account)")
        }
        let account = accountPrefix + claimed
        // The account is the certificate's CN, the webhook's userID and a field of log lines: a
        // control character (a newline forged a log line; a NUL went into the CN) or a bidi
        // override (which shows a name reversed) has no place in it.
        if let scalar = account.unicodeScalars.first(where: UnprintableText.isUnprintable) {
            throw PeerCAError(
                .policyViolation,
                "the account UID has a control or bidirectional formatting character (U+\(String(scalar.value, radix: 16, uppercase: true))); it becomes the CN")
        }
        guard account.utf8.count <= 64 else {
            throw PeerCAError(.policyViolation, "the account UID \"\(String(account.prefix(40)))…\" is longer than 64 bytes (it becomes the CN)")
        }
        // OIDC's auth_time is a NumericDate, range-checked like exp, nbf and iat. One that is not
        // (a string: ADFS and others have sent ISO 8601 text; a number out of range, which trapped
        // when an age limit's refusal printed the age) says nothing about the sign-in: not `iat`
        // in its place (later than the sign-in, a stale one would pass an age limit), so an age
        // limit refuses it and without one it is ignored. `null` is no auth_time: `iat` stands in.
        let authTime: Date?
        switch payload["auth_time"] {
        case nil, .null?: authTime = token.claims.issuedAtDate
        case let value?: authTime = value.doubleValue.flatMap { RegisteredClaims.dates.contains($0) ? Date(timeIntervalSince1970: $0) : nil }
        }
        // A sign-in in the future passed any age limit, and a session counted from it (renewal's
        // limit) never ended: refused as a future iat is.
        if let authTime, authTime.timeIntervalSince(now) > Self.signInClockSkew {
            throw PeerCAError(
                .policyViolation,
                "the token's \"auth_time\" (\(ISO8601Text.string(authTime))) is more than \(Int(Self.signInClockSkew)) s in the future")
        }
        var factors: [AuthenticationFactor] = []
        switch payload["amr"] {
        case .array(let methods)?:
            for method in methods {
                guard let name = method.stringValue else { throw PeerCAError(.policyViolation, "\"amr\" must be an array of strings") }
                factors.append(AuthenticationFactor(method: name, signedInAt: authTime))
            }
        case nil, .null?:
            factors.append(AuthenticationFactor(method: "token", signedInAt: authTime))
        case _?:
            // A single string was read as no amr at all, and the refusal then named "token".
            throw PeerCAError(.policyViolation, "\"amr\" must be an array of strings")
        }
        if requiredFactors > 0 {
            let methods = Set(factors.map(\.method)).subtracting(["token"])
            guard methods.count >= requiredFactors else {
                throw PeerCAError(.policyViolation, "\(requiredFactors) authentication factors are required; the token shows \(methods.count)")
            }
        }
        if let maximumSignInAge {
            guard let latest = factors.compactMap(\.signedInAt).max() else {
                // No sign-in time with an auth_time given: it was not a NumericDate.
                if let value = payload["auth_time"], value != .null {
                    throw PeerCAError(
                        .policyViolation,
                        "the token's \"auth_time\" is not a NumericDate (a JSON number of seconds from 0 to \(Int(RegisteredClaims.maximumDate))), so the sign-in's age is unknown")
                }
                throw PeerCAError(.policyViolation, "the token says nothing about when the user signed in (auth_time or iat)")
            }
            guard now.timeIntervalSince(latest) <= maximumSignInAge else {
                throw PeerCAError(
                    .policyViolation,
                    "the latest sign-in was \(FactorPolicy.wholeSeconds(now.timeIntervalSince(latest))) s ago; at most \(FactorPolicy.wholeSeconds(maximumSignInAge)) s is accepted")
            }
        }
        var permissions = defaultPermissions
        if let permissionsClaim, let value = payload[permissionsClaim] {
            switch value {
            case .string(let text): permissions += text.split(separator: " ").map(String.init)
            case .array(let items): permissions += items.compactMap(\.stringValue)
            default: throw PeerCAError(.policyViolation, "\"\(permissionsClaim)\" must be a string or an array of strings")
            }
        }
        var profile: [String: String] = [:]
        for claim in profileClaims { if let value = payload[claim]?.stringValue { profile[claim] = value } }
        let identity = PeerIdentity(
            trustDomain: trustDomain, accountUID: account, provider: provider, issuer: issuer, providerUID: subject,
            displayName: payload["name"]?.stringValue, expiresAt: expiration, factors: factors, permissions: permissions,
            tokenID: token.claims.id, profile: profile, authenticationContext: payload["acr"]?.stringValue,
            issuedAt: token.claims.issuedAtDate)
        try factorPolicy.check(identity, now: now)
        return identity
    }
}
