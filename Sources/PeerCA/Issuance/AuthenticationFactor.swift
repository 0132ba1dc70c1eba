public import Foundation
import TokenKit

/// One way the user proved who they are, and when (OIDC `amr` with `auth_time`).
public struct AuthenticationFactor: Sendable, Hashable, Codable {
    /// The method, e.g. `pwd`, `otp`, `hwk`, or `token` when the token names none.
    public let method: String
    /// When the user signed in with it, if known.
    public let signedInAt: Date?

    public init(method: String, signedInAt: Date?) {
        self.method = method
        self.signedInAt = signedInAt
    }
}
