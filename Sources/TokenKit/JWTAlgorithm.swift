/// The JWS algorithms TokenKit signs and verifies (RFC 7518 §3, RFC 8037).
///
/// `none` is deliberately absent: no verifier accepts an unsecured token.
public enum JWTAlgorithm: String, Sendable, Hashable, CaseIterable, Codable, CustomStringConvertible {
    case hs256 = "HS256", hs384 = "HS384", hs512 = "HS512"
    case rs256 = "RS256", rs384 = "RS384", rs512 = "RS512"
    case ps256 = "PS256", ps384 = "PS384", ps512 = "PS512"
    case es256 = "ES256", es384 = "ES384", es512 = "ES512"
    case eddsa = "EdDSA"

    public var description: String { rawValue }

    /// The family of key that can verify this algorithm.
    public enum Family: Sendable, Hashable {
        case hmac, rsa, rsaPSS, ecdsa, eddsa
    }

    public var family: Family {
        switch self {
        case .hs256, .hs384, .hs512: .hmac
        case .rs256, .rs384, .rs512: .rsa
        case .ps256, .ps384, .ps512: .rsaPSS
        case .es256, .es384, .es512: .ecdsa
        case .eddsa: .eddsa
        }
    }

    /// Output size of the hash in bytes (for EdDSA: the size of the Ed25519 signature's half).
    var hashLength: Int {
        switch self {
        case .hs256, .rs256, .ps256, .es256: 32
        case .hs384, .rs384, .ps384, .es384: 48
        case .hs512, .rs512, .ps512, .es512: 64
        case .eddsa: 32
        }
    }

    /// OpenSSL's digest name; nil for EdDSA (which hashes internally).
    var digestName: String? {
        switch hashLength {
        case _ where self == .eddsa: nil
        case 32: "SHA256"
        case 48: "SHA384"
        default: "SHA512"
        }
    }

    /// The curve an ES* algorithm requires.
    var curve: ECCurve? {
        switch self {
        case .es256: .p256
        case .es384: .p384
        case .es512: .p521
        default: nil
        }
    }
}

/// The elliptic curves TokenKit uses for ECDSA.
public enum ECCurve: String, Sendable, Hashable, CaseIterable, Codable {
    case p256 = "P-256", p384 = "P-384", p521 = "P-521"

    /// Size of one coordinate or scalar in bytes.
    public var coordinateLength: Int {
        switch self {
        case .p256: 32
        case .p384: 48
        case .p521: 66
        }
    }

    /// The ES* algorithm that uses this curve.
    public var algorithm: JWTAlgorithm {
        switch self {
        case .p256: .es256
        case .p384: .es384
        case .p521: .es512
        }
    }

    /// OpenSSL's group name.
    var opensslName: String {
        switch self {
        case .p256: "prime256v1"
        case .p384: "secp384r1"
        case .p521: "secp521r1"
        }
    }

    var staticName: StaticString {
        switch self {
        case .p256: "prime256v1"
        case .p384: "secp384r1"
        case .p521: "secp521r1"
        }
    }

    init?(opensslName: String) {
        switch opensslName {
        case "prime256v1", "P-256", "secp256r1": self = .p256
        case "secp384r1", "P-384": self = .p384
        case "secp521r1", "P-521": self = .p521
        default: return nil
        }
    }
}
