/// The one error type TokenKit throws.
///
/// Every rule that can reject a token, a key or an input has its own ``Code``, so callers can
/// branch on *which* rule failed; ``message`` says it in words. Messages describe what was wrong
/// with the input ("the signature does not verify", "exp 1700000000 is 3600 s in the past") and
/// never contain key material or secrets.
///
/// ```swift
/// do {
///     let token = try verifier.verify(jwt)
/// } catch let error where error.code == .expired {
///     // ask the client to refresh
/// }
/// ```
public struct TokenError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Which rule failed. Compare with the static members (`.expired`, `.badSignature`, …).
    public struct Code: Hashable, Sendable, CustomStringConvertible, RawRepresentable {
        /// A stable, machine-readable name, e.g. `"expired"`; used in `--json` output.
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        // Token structure and encoding
        /// The token is longer than the verifier's size cap (checked before any decoding).
        public static let tokenTooLarge = Code(rawValue: "token_too_large")
        /// Not three dot-separated segments, or an empty header or payload segment.
        public static let malformed = Code(rawValue: "malformed")
        /// A segment is not strict base64url (padding, bad characters, non-zero trailing bits).
        public static let invalidBase64 = Code(rawValue: "invalid_base64")
        /// Header or payload is not a JSON object in valid UTF-8, or is nested too deeply.
        public static let invalidJSON = Code(rawValue: "invalid_json")
        /// A JSON object repeats a member name.
        public static let duplicateMember = Code(rawValue: "duplicate_member")
        /// A header member is missing, of the wrong type, or not supported (e.g. `b64`).
        public static let invalidHeader = Code(rawValue: "invalid_header")
        /// `crit` is empty, malformed, or names an extension this verifier does not understand.
        public static let unsupportedCritical = Code(rawValue: "unsupported_critical")

        // Algorithms and keys
        /// `alg` is `none` (in any spelling) or otherwise never acceptable.
        public static let forbiddenAlgorithm = Code(rawValue: "forbidden_algorithm")
        /// `alg` names an algorithm TokenKit does not implement.
        public static let unsupportedAlgorithm = Code(rawValue: "unsupported_algorithm")
        /// `alg` is a supported algorithm, but not one the selected key may verify.
        public static let algorithmNotAllowed = Code(rawValue: "algorithm_not_allowed")
        /// No key has the token's `kid`, or the token has no `kid` and no key (or several) fit.
        public static let unknownKey = Code(rawValue: "unknown_key")
        /// The key exists but may not be used to verify signatures (`use`, `key_ops`).
        public static let keyNotUsable = Code(rawValue: "key_not_usable")
        /// The signature does not verify (or has the wrong length for the algorithm).
        public static let badSignature = Code(rawValue: "bad_signature")

        // Claims
        /// `exp` is in the past (beyond the leeway).
        public static let expired = Code(rawValue: "expired")
        /// `nbf` is in the future (beyond the leeway).
        public static let notYetValid = Code(rawValue: "not_yet_valid")
        /// `iat` is in the future (beyond the leeway).
        public static let issuedInFuture = Code(rawValue: "issued_in_future")
        /// `iat` is older than the policy's maximum age.
        public static let tooOld = Code(rawValue: "too_old")
        /// `iss` is not one of the accepted issuers.
        public static let issuerMismatch = Code(rawValue: "issuer_mismatch")
        /// `aud` names none of the accepted audiences.
        public static let audienceMismatch = Code(rawValue: "audience_mismatch")
        /// A claim the policy requires is absent.
        public static let missingClaim = Code(rawValue: "missing_claim")
        /// A claim has the wrong JSON type or an out-of-range value.
        public static let invalidClaim = Code(rawValue: "invalid_claim")
        /// The header `typ` is not the one the policy expects.
        public static let typeMismatch = Code(rawValue: "type_mismatch")
        /// The payload does not decode into the caller's `Decodable` type.
        public static let payloadDecoding = Code(rawValue: "payload_decoding")

        // Key creation and parsing
        /// A key is too weak: RSA under 2048 bits, HMAC secret shorter than the hash, empty key,
        /// public exponent too small, a ROCA-vulnerable modulus.
        public static let weakKey = Code(rawValue: "weak_key")
        /// Key material could not be parsed or is inconsistent (bad PEM/DER/JWK, point not on curve).
        public static let invalidKey = Code(rawValue: "invalid_key")
        /// A well-formed key of a type or curve TokenKit does not support for JWS.
        public static let unsupportedKey = Code(rawValue: "unsupported_key")
        /// A JWK Set breaks a set-level rule (duplicate `kid`, symmetric mixed with asymmetric keys).
        public static let invalidKeySet = Code(rawValue: "invalid_key_set")
        /// The operation needs a private key (signing) and was given a public one.
        public static let privateKeyRequired = Code(rawValue: "private_key_required")
        /// The input to an encoder (claims to sign) could not be encoded.
        public static let encoding = Code(rawValue: "encoding")
        /// The crypto library reported an internal failure.
        public static let cryptoFailure = Code(rawValue: "crypto_failure")
    }

    /// Which rule failed.
    public let code: Code
    /// What was wrong, in words. Never contains key material.
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
