/// The error PDAKeys throws when an issuer's keys cannot be had: the issuer is not allowed, the
/// URL is unsafe, the server misbehaved, or what it sent is not a usable key.
///
/// Token problems (bad signature, expired, …) stay `TokenError`s; a remote verifier
/// throws one of the two. Messages name the source (host or URL) and what went wrong, never key
/// material.
public struct KeySourceError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Which rule failed; ``rawValue`` is stable and machine-readable.
    public struct Code: Hashable, Sendable, CustomStringConvertible, RawRepresentable {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The token's `iss` is not a plain DNS host name (scheme, userinfo, port, path, IP literal,
        /// or characters a host name cannot have).
        public static let invalidIssuer = Code(rawValue: "invalid_issuer")
        /// The issuer host does not end with any allowed suffix; no request was made.
        public static let issuerNotAllowed = Code(rawValue: "issuer_not_allowed")
        /// The URL is not HTTPS (plain HTTP is allowed only for loopback, when enabled), carries
        /// userinfo, or cannot be parsed.
        public static let insecureURL = Code(rawValue: "insecure_url")
        /// The server answered with a status other than 200 (redirects are never followed).
        public static let httpStatus = Code(rawValue: "http_status")
        /// The response body exceeded the cap (64 KiB by default).
        public static let responseTooLarge = Code(rawValue: "response_too_large")
        /// The connection or the whole request took longer than allowed.
        public static let timeout = Code(rawValue: "timeout")
        /// The connection failed: refused, reset, DNS, or TLS (untrusted certificate, wrong name).
        public static let connection = Code(rawValue: "connection")
        /// The body is not what the source promises (PEM public key, JWK Set, discovery document).
        public static let invalidDocument = Code(rawValue: "invalid_document")
        /// The discovery document's `issuer` differs from the configured issuer.
        public static let issuerMismatch = Code(rawValue: "issuer_mismatch")
        /// The document holds no key that can verify tokens, or the key is of the wrong type or
        /// too weak (a PDA key must be RSA of at least 2048 bits).
        public static let unusableKey = Code(rawValue: "unusable_key")
        /// The fetcher's configuration cannot be used: a timeout that is not more than zero or
        /// is longer than a day, or a body cap that is not more than zero.
        public static let invalidConfiguration = Code(rawValue: "invalid_configuration")
        /// The key fetcher was shut down.
        public static let shutDown = Code(rawValue: "shut_down")
        /// Fetched keys were described but no ``RemoteKeyStore`` was given to fetch them with.
        public static let noKeyStore = Code(rawValue: "no_key_store")
        /// ``KeyStorePolicy/maximumConcurrentFetches`` fetches were running: none was started.
        public static let busy = Code(rawValue: "busy")
    }

    /// Which rule failed.
    public let code: Code
    /// What was wrong, in words.
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
