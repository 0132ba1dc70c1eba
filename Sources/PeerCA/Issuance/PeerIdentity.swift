public import Foundation
import TokenKit

/// Who a peer certificate is for, modelled on Webcom's authentication state: the account, the
/// provider that authenticated it and the user's ID there, until when, with which factors, and
/// where it sits in the SPIFFE namespace.
public struct PeerIdentity: Sendable, Hashable, Codable {
    /// SPIFFE trust domain (derived from the app ID).
    public let trustDomain: String
    /// The account's user ID; becomes the certificate's CN.
    public let accountUID: String
    /// The provider name (as configured) that authenticated the user.
    public let provider: String
    /// The token's issuer (`iss`).
    public let issuer: String
    /// The user's ID at the provider (`sub`).
    public let providerUID: String
    /// A display name, when the token carries one (`name`).
    public let displayName: String?
    /// When the authentication expires (the token's `exp`).
    public let expiresAt: Date
    /// The factors the user signed in with.
    public let factors: [AuthenticationFactor]
    /// Permissions granted by the policy.
    public let permissions: [String]
    /// The token's `jti`, if any.
    public let tokenID: String?
    /// Profile claims the policy copies (by default `email`, `name`, `picture`), when they are strings.
    public let profile: [String: String]
    /// The authentication context class the provider reports (`acr`), if any.
    public let authenticationContext: String?
    /// When the token was issued (`iat`), if it says.
    public let issuedAt: Date?

    /// `spiffe://<trust domain>/<issuer>/<subject>`, each path segment restricted to SPIFFE's
    /// characters (a segment that needs others is written `_x` + hex of its UTF-8, so distinct
    /// issuers or subjects never share an ID).
    public var spiffeID: String {
        SPIFFE.id(trustDomain: trustDomain, issuer: issuer, subject: providerUID)
    }

    /// The most recent sign-in among the factors.
    public var latestSignIn: Date? { factors.compactMap(\.signedInAt).max() }
}
