/// The error PeerCA throws: a CSR that cannot be honoured, a token the issuance policy refuses,
/// CA material that cannot be used, or a ledger that cannot record.
///
/// Messages say what was wrong and never contain key material.
public struct PeerCAError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Which rule failed; ``rawValue`` is stable and machine-readable.
    public struct Code: Hashable, Sendable, CustomStringConvertible, RawRepresentable {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The CSR is not a PKCS#10 request (PEM or DER) that can be parsed.
        public static let invalidCSR = Code(rawValue: "invalid_csr")
        /// The CSR's self-signature does not verify: no proof that the requester holds the key.
        public static let badCSRSignature = Code(rawValue: "bad_csr_signature")
        /// The CSR's key is not one of P-256, P-384, Ed25519 or RSA ≥ 2048 (explicit-curve EC keys included).
        public static let unsupportedKey = Code(rawValue: "unsupported_key")
        /// The verified token lacks what the issuance policy needs (subject, factors, a recent sign-in).
        public static let policyViolation = Code(rawValue: "policy_violation")
        /// The sign-in lacks a factor (`amr`) the policy requires.
        public static let factorRequired = Code(rawValue: "factor_required")
        /// The sign-in's authentication context (`acr`) is not one the policy accepts.
        public static let acrNotAccepted = Code(rawValue: "acr_not_accepted")
        /// The latest sign-in (`auth_time`, else `iat`) is older than the policy allows, or unknown.
        public static let signInTooOld = Code(rawValue: "sign_in_too_old")
        /// A renewal would pass the session's limit (its maximum age since the original sign-in).
        public static let sessionExpired = Code(rawValue: "session_expired")
        /// The token was issued before its account's sessions were ended (a logout, a revocation
        /// by account): sign in again (`tokentool ca issue`; `serve` answers `session_ended` too).
        public static let sessionEnded = Code(rawValue: "session_ended")
        /// The token has expired, or would leave no validity for the certificate.
        public static let tokenExpired = Code(rawValue: "token_expired")
        /// The token's `jti` was already used for a certificate and its issuer allows one use.
        public static let tokenReused = Code(rawValue: "token_reused")
        /// CA material (certificate or key) is missing, malformed or inconsistent.
        public static let invalidCAMaterial = Code(rawValue: "invalid_ca_material")
        /// A file that would be written exists already (CA material is never overwritten).
        public static let fileExists = Code(rawValue: "file_exists")
        /// A file could not be read or written.
        public static let io = Code(rawValue: "io")
        /// The issuance ledger failed; nothing was issued.
        public static let ledger = Code(rawValue: "ledger")
        /// A certificate with that serial number is recorded already (the CA draws another).
        public static let serialExists = Code(rawValue: "serial_exists")
        /// CA settings (`ca.json`, a store URL) that cannot be used.
        public static let invalidSettings = Code(rawValue: "invalid_settings")
        /// A request to the CA or its ledger that is malformed (an empty account name, …).
        public static let invalidRequest = Code(rawValue: "invalid_request")
        /// No certificate has that serial number.
        public static let notFound = Code(rawValue: "not_found")
        /// A certificate presented by a peer does not chain to the CA roots or breaks our policy.
        public static let untrustedPeer = Code(rawValue: "untrusted_peer")
        /// The peer's certificate has been revoked.
        public static let revoked = Code(rawValue: "revoked")
        /// An OCSP request or CRL that cannot be parsed or verified.
        public static let invalidRevocationData = Code(rawValue: "invalid_revocation_data")
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
