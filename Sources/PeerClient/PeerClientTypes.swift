public import Foundation
public import PeerCA

/// Why a ``PeerClient`` operation failed. Messages name what was wrong (a path, a status, the
/// service's error code); they never carry a token or a key.
public struct PeerClientError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: String, Sendable, Hashable {
        /// The service could not be reached, or answered with a server error (5xx): worth retrying.
        case unreachable
        /// The service refused the request (4xx); ``PeerClientError/serviceCode`` says why.
        case refused
        /// The service's answer is not what its API promises (not JSON, a certificate for another
        /// key or identity, a chain that does not verify to the roots).
        case invalidReply = "invalid_reply"
        /// The token provider failed to give a token.
        case tokenProvider = "token_provider"
        /// The state directory cannot be read or written.
        case storage
        /// The configuration cannot be used (the URL, the roots).
        case configuration
        /// There is no certificate yet: enroll first.
        case notEnrolled = "not_enrolled"
    }

    public let code: Code
    /// What was wrong, in words.
    public let message: String
    /// The HTTP status of a refusal or a server error.
    public let status: Int?
    /// The service's own error code (`session_ended`, `session_expired`, `revoked`, `bad_signature`…).
    public let serviceCode: String?

    public init(_ code: Code, _ message: String, status: Int? = nil, serviceCode: String? = nil) {
        self.code = code
        self.message = message
        self.status = status
        self.serviceCode = serviceCode
    }

    public var description: String {
        var text = "\(code.rawValue): \(message)"
        if let status { text += " (HTTP \(status)\(serviceCode.map { ", \($0)" } ?? ""))" }
        return text
    }
}

/// What a ``PeerClient`` needs to know: where the service is, what to trust, which provider its
/// tokens are for, and where to keep its key and certificate.
public struct PeerClientConfiguration: Sendable {
    /// The service's base URL, `https://…` (renewal is over mutual TLS, so HTTPS is needed for
    /// it; `http://` works for enrollment and revocation lists only).
    public var serviceURL: String
    /// The CA's root certificates (PEM): they verify the service's TLS certificate (with its host
    /// name) and the certificates of peers.
    public var trustRootsPEM: String
    /// The provider (the service's configuration key) the token provider's tokens are for.
    public var provider: String
    /// Where the key, the certificate chain and the latest revocation list are kept (made with
    /// mode 0700 when missing).
    public var stateDirectory: String
    /// The type of each new key (one per enrollment and per renewal).
    public var keyAlgorithm: CAKeyAlgorithm = .p256
    /// The trust domain peers must be in; nil: the device's own certificate's.
    public var trustDomain: String?
    /// The validity to ask for (the service's policy caps it); nil: the service's maximum.
    public var validitySeconds: Int?
    /// Renewal starts at the reply's `renewAfter` plus a random part of this fraction of the time
    /// left from there to `notAfter`, so that devices enrolled together do not renew together.
    public var renewalJitter: Double = 0.1
    /// `expiringSoon` is published once per certificate when this much of its validity is left
    /// and it has not been renewed; nil: half the time from its `renewAfter` to its `notAfter`
    /// (a sixth of its validity, with the service's `renewAfter` at two thirds).
    public var expiringSoonThreshold: TimeInterval?
    /// The first wait after a failed attempt; each further failure doubles it, up to
    /// ``maximumRetryDelay``, and each wait is drawn from its second half (jitter).
    public var initialRetryDelay: TimeInterval = 1
    /// The longest wait between attempts.
    public var maximumRetryDelay: TimeInterval = 60
    /// How often the revocation list is fetched (sooner when the current one's nextUpdate comes first).
    public var revocationRefreshInterval: TimeInterval = 300
    /// The longest a request to the service may take. AsyncHTTPClient keeps trying to connect
    /// to a service that refuses connections until then, so it is also how long one attempt
    /// waits for a service that is down before the client's own backoff.
    public var requestTimeout: TimeInterval = 30

    public init(serviceURL: String, trustRootsPEM: String, provider: String, stateDirectory: String) {
        self.serviceURL = serviceURL
        self.trustRootsPEM = trustRootsPEM
        self.provider = provider
        self.stateDirectory = stateDirectory
    }
}

/// A device's current certificate, as the app sees it (the private key stays in the state
/// directory: ``keyPath``).
public struct PeerCredential: Sendable, Hashable, CustomStringConvertible {
    /// The identity the certificate carries.
    public let spiffeID: String
    /// The certificate's serial number (hex).
    public let serial: String
    public let notAfter: Date
    /// When the client renews it (before jitter).
    public let renewAfter: Date
    /// The certificate chain, leaf first (PEM).
    public let chainPEM: String
    /// The key's path (`<state>/key.pem`, mode 0600), stable across renewals.
    public let keyPath: String
    /// The chain's path (`<state>/chain.pem`), stable across renewals.
    public let chainPath: String

    public var description: String { "\(spiffeID) serial \(serial) until \(notAfter)" }
}

/// What happens to a device's certificate, for an app to follow (``PeerClient/events()``).
public enum PeerClientEvent: Sendable, Hashable {
    /// A certificate was issued for a new token (first enrollment, or after authenticationRequired).
    case enrolled(PeerCredential)
    /// The certificate was renewed over mutual TLS, without a token.
    case renewed(PeerCredential)
    /// The certificate has this many seconds left and no renewal has succeeded yet (Ditto's
    /// `authenticationExpiringSoon`).
    case expiringSoon(secondsRemaining: Int)
    /// A new token is needed: the renewal was refused (`serviceCode`: the account's sessions were
    /// ended, the session reached its maximum age), the certificate expired or was revoked. The
    /// client asks its token provider next (Ditto's `authenticationRequired`).
    case authenticationRequired(reason: String)
    /// The device's own certificate is on the CA's revocation list.
    case revoked(serial: String)
    /// A new revocation list is in force for peers' certificates.
    case revocationListUpdated(number: Int64?)
    /// An attempt failed; the client retries after a backoff.
    case failed(PeerClientError)
}
