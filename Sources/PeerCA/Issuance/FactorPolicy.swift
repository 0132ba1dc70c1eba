public import Foundation

/// What a sign-in must have shown: factors (OIDC `amr` values such as `mfa`, `otp`, `hwk`), an
/// authentication context class (`acr`), and how recent it must be (`auth_time`, else `iat`).
/// Each refusal has its own ``PeerCAError/Code``: ``PeerCAError/Code/factorRequired``,
/// ``PeerCAError/Code/acrNotAccepted``, ``PeerCAError/Code/signInTooOld``.
///
/// ```swift
/// let policy = FactorPolicy(requiredFactors: ["mfa"], maximumSignInAge: 900)
/// try policy.check(identity, now: Date())
/// ```
public struct FactorPolicy: Sendable, Hashable, Codable {
    /// Every one of these must be among the identity's factors (`amr`).
    public var requiredFactors: Set<String>
    /// When not empty, the identity's `acr` must be one of these.
    public var acceptedContexts: Set<String>
    /// The latest sign-in must be at most this many seconds old.
    public var maximumSignInAge: TimeInterval?

    public init(requiredFactors: Set<String> = [], acceptedContexts: Set<String> = [], maximumSignInAge: TimeInterval? = nil) {
        self.requiredFactors = requiredFactors
        self.acceptedContexts = acceptedContexts
        self.maximumSignInAge = maximumSignInAge
    }

    /// Whether the policy asks for anything.
    public var isEmpty: Bool { requiredFactors.isEmpty && acceptedContexts.isEmpty && maximumSignInAge == nil }

    /// Refuses an identity whose sign-in does not meet the policy.
    public func check(_ identity: PeerIdentity, now: Date) throws(PeerCAError) {
        let shown = Set(identity.factors.map(\.method))
        let missing = requiredFactors.subtracting(shown).sorted()
        if !missing.isEmpty {
            throw PeerCAError(
                .factorRequired,
                "the sign-in must show \(missing.joined(separator: ", ")) (amr); it shows \(shown.isEmpty ? "none" : shown.sorted().joined(separator: ", "))")
        }
        if !acceptedContexts.isEmpty {
            guard let context = identity.authenticationContext, acceptedContexts.contains(context) else {
                let said = identity.authenticationContext.map { "\"\(String($0.prefix(80)))\"" } ?? "none"
                throw PeerCAError(.acrNotAccepted, "the authentication context (acr) must be one of \(acceptedContexts.sorted().joined(separator: ", ")); it is \(said)")
            }
        }
        if let maximumSignInAge {
            guard let latest = identity.latestSignIn else {
                throw PeerCAError(.signInTooOld, "the token says nothing about when the user signed in (auth_time or iat)")
            }
            let age = now.timeIntervalSince(latest)
            guard age <= maximumSignInAge else {
                throw PeerCAError(.signInTooOld, "the latest sign-in was \(Self.wholeSeconds(age)) s ago; at most \(Self.wholeSeconds(maximumSignInAge)) s is accepted")
            }
        }
    }

    /// Seconds as a whole number for a message; a value no `Int` holds (a limit of NaN or 1e300
    /// set in code) as it is, instead of trapping in the conversion.
    static func wholeSeconds(_ seconds: Double) -> String {
        Int(exactly: seconds.rounded(.towardZero)).map(String.init) ?? "\(seconds)"
    }
}
