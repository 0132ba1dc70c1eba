internal import COpenSSL

/// A key that verifies (and, when private, signs) JWS signatures, bound to the algorithms it may
/// be used with.
///
/// The algorithm belongs to the key, never to the token (RFC 8725 §3.1): a verifier accepts a
/// token only when its header `alg` equals one of the key's ``algorithms`` exactly. Keys are parsed
/// once (into an OpenSSL key object or a wiped-on-free secret) and are cheap to copy and share
/// across tasks.
///
/// Refused at creation: RSA under 2048 bits (or over 16384, or with a public exponent below 3 or
/// even, or a ROCA-vulnerable modulus), HMAC secrets shorter than the hash output of any of the
/// key's algorithms, empty keys, EC keys on curves other than P-256/384/521 or with explicit curve
/// parameters, EC points not on the curve.
///
/// ```swift
/// let key = try JWTKey(pem: pemText)                       // RSA → RS256, P-256 → ES256, …
/// let pss = try JWTKey(pem: pemText, algorithms: [.ps256])
/// let hmac = try JWTKey.hmac(secret: secretBytes, algorithms: [.hs256], kid: "k1")
/// let fromJWK = try JWTKey(jwk: #"{"kty":"EC","crv":"P-256","x":"…","y":"…"}"#)
/// ```
public struct JWTKey: Sendable, CustomStringConvertible {
    /// What kind of key this is. Sizes, never material.
    public enum KeyType: Sendable, Hashable, CustomStringConvertible {
        case rsa(bits: Int)
        case ec(ECCurve)
        case ed25519
        case hmac(bytes: Int)

        public var description: String {
            switch self {
            case .rsa(let bits): "RSA-\(bits)"
            case .ec(let curve): "EC \(curve.rawValue)"
            case .ed25519: "Ed25519"
            case .hmac(let bytes): "HMAC secret of \(bytes) bytes"
            }
        }

        var isSymmetric: Bool { if case .hmac = self { true } else { false } }
    }

    /// What to generate with ``generate(_:kid:)``.
    public enum Spec: Sendable, Hashable {
        case rsa(bits: Int)
        case ec(ECCurve)
        case ed25519
        /// A random secret as long as the algorithm's hash output.
        case hmac(JWTAlgorithm)
    }

    enum Material: Sendable {
        case pkey(PKey)
        case secret(SecretBytes)
    }

    let storage: JWTKeyStorage

    public var type: KeyType { storage.type }
    /// True when the key holds private material (or is an HMAC secret) and can sign.
    public var isPrivate: Bool { storage.isPrivate }
    /// The algorithms this key may verify and sign. Never empty.
    public var algorithms: Set<JWTAlgorithm> { storage.algorithms }
    /// Key ID (`kid`), matched exactly against a token header's `kid`.
    public var kid: String? { storage.kid }
    /// JWK `use`, when the key came with one (`sig` or `enc`).
    public var use: String? { storage.use }
    /// JWK `key_ops`, when the key came with them.
    public var keyOperations: [String]? { storage.keyOperations }

    var material: Material { storage.material }

    init(
        material: Material, type: KeyType, isPrivate: Bool, algorithms: Set<JWTAlgorithm>?, kid: String?,
        use: String? = nil, keyOperations: [String]? = nil
    ) throws(TokenError) {
        let chosen = algorithms ?? JWTKey.defaultAlgorithms(for: type)
        guard !chosen.isEmpty else { throw TokenError(.invalidKey, "a key needs at least one algorithm") }
        for algorithm in chosen { try JWTKey.check(algorithm, fits: type) }
        storage = JWTKeyStorage(
            type: type, isPrivate: isPrivate, algorithms: chosen, kid: kid, use: use, keyOperations: keyOperations, material: material)
    }

    private init(storage: JWTKeyStorage) { self.storage = storage }

    /// The same key in a new storage object, for a verifier shard: verified tokens carry their
    /// key, and a storage object shared by threads on two cores would bounce its reference count.
    func copyForShard() -> JWTKey {
        JWTKey(storage: JWTKeyStorage(
            type: storage.type, isPrivate: storage.isPrivate, algorithms: storage.algorithms, kid: storage.kid, use: storage.use,
            keyOperations: storage.keyOperations, material: storage.material))
    }

    public var description: String {
        var text = type.isSymmetric ? "\(type)" : "\(type) \(isPrivate ? "private" : "public") key"
        if let kid { text += " (kid \"\(kid)\")" }
        text += " for " + algorithms.map(\.rawValue).sorted().joined(separator: ", ")
        return text
    }

    /// The algorithms a key of this type verifies when none are given.
    public static func defaultAlgorithms(for type: KeyType) -> Set<JWTAlgorithm> {
        switch type {
        case .rsa: [.rs256]
        case .ec(let curve): [curve.algorithm]
        case .ed25519: [.eddsa]
        case .hmac: [.hs256]
        }
    }

    static func check(_ algorithm: JWTAlgorithm, fits type: KeyType) throws(TokenError) {
        switch (algorithm.family, type) {
        case (.hmac, .hmac(let bytes)):
            if bytes == 0 { throw TokenError(.weakKey, "the HMAC secret is empty") }
            if bytes < algorithm.hashLength {
                throw TokenError(
                    .weakKey,
                    "\(algorithm) needs a secret of at least \(algorithm.hashLength) bytes; this one has \(bytes)")
            }
        case (.rsa, .rsa), (.rsaPSS, .rsa), (.eddsa, .ed25519):
            return
        case (.ecdsa, .ec(let curve)):
            if algorithm.curve != curve {
                throw TokenError(.invalidKey, "\(algorithm) needs a \(algorithm.curve?.rawValue ?? "") key; this key is \(curve.rawValue)")
            }
        default:
            throw TokenError(.invalidKey, "\(algorithm) cannot be used with a \(type) key")
        }
    }

    // MARK: Creating keys

    /// Creates a key from PEM text: SubjectPublicKeyInfo (`PUBLIC KEY`), PKCS#1 (`RSA PUBLIC KEY`),
    /// PKCS#8 (`PRIVATE KEY`), traditional (`RSA PRIVATE KEY`, `EC PRIVATE KEY`) or an X.509
    /// certificate (`CERTIFICATE`, its subject key). The first key-bearing block is used.
    ///
    /// - Parameters:
    ///   - pem: the PEM text.
    ///   - algorithms: what the key may verify; by default RS256 for RSA, the curve's ES* for EC,
    ///     EdDSA for Ed25519.
    ///   - kid: the key ID tokens must name to select this key.
    public init(pem: String, algorithms: Set<JWTAlgorithm>? = nil, kid: String? = nil) throws(TokenError) {
        let blocks = try PEM.parse(pem)
        for block in blocks {
            let kind: KeyCodec.DERKind
            switch block.label {
            case "PUBLIC KEY": kind = .subjectPublicKeyInfo
            case "RSA PUBLIC KEY": kind = .rsaPublicKey
            case "PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY": kind = .privateKey
            case "CERTIFICATE", "TRUSTED CERTIFICATE": kind = .certificate
            case "ENCRYPTED PRIVATE KEY":
                throw TokenError(.unsupportedKey, "encrypted private keys are not supported; decrypt it first (openssl pkey)")
            default: continue
            }
            let key = try KeyCodec.decode(block.der, as: kind)
            try self.init(pkey: key, isPrivate: kind == .privateKey, algorithms: algorithms, kid: kid)
            return
        }
        throw TokenError(.invalidKey, blocks.isEmpty ? "no PEM block found" : "no key in the PEM blocks (labels: \(blocks.map(\.label).joined(separator: ", ")))")
    }

    /// Creates a key from DER: SubjectPublicKeyInfo, PKCS#8 or traditional private key, PKCS#1
    /// RSA public key, or an X.509 certificate, tried in that order.
    public init(der: [UInt8], algorithms: Set<JWTAlgorithm>? = nil, kid: String? = nil) throws(TokenError) {
        guard !der.isEmpty else { throw TokenError(.invalidKey, "the key is empty") }
        for kind in [KeyCodec.DERKind.subjectPublicKeyInfo, .privateKey, .rsaPublicKey, .certificate] {
            if let key = try? KeyCodec.decode(der, as: kind) {
                try self.init(pkey: key, isPrivate: kind == .privateKey, algorithms: algorithms, kid: kid)
                return
            }
        }
        throw TokenError(.invalidKey, "the DER is not a public key, private key or certificate")
    }

    /// Creates a key from PEM or DER bytes, whichever they are (as read from a key file).
    public init(pemOrDER bytes: [UInt8], algorithms: Set<JWTAlgorithm>? = nil, kid: String? = nil) throws(TokenError) {
        if let text = String(validating: bytes, as: UTF8.self), text.contains("-----BEGIN ") {
            try self.init(pem: text, algorithms: algorithms, kid: kid)
        } else {
            try self.init(der: bytes, algorithms: algorithms, kid: kid)
        }
    }

    init(pkey: PKey, isPrivate: Bool, algorithms: Set<JWTAlgorithm>?, kid: String?, use: String? = nil, keyOperations: [String]? = nil) throws(TokenError) {
        let type = try JWTKey.inspect(pkey, isPrivate: isPrivate)
        try self.init(material: .pkey(pkey), type: type, isPrivate: isPrivate, algorithms: algorithms, kid: kid, use: use, keyOperations: keyOperations)
    }

    /// An HMAC key. The secret must be at least as long as the hash output of every algorithm
    /// (32 bytes for HS256, 48 for HS384, 64 for HS512).
    public static func hmac(secret: [UInt8], algorithms: Set<JWTAlgorithm> = [.hs256], kid: String? = nil) throws(TokenError) -> JWTKey {
        if secret.isEmpty { throw TokenError(.weakKey, "the HMAC secret is empty") }
        return try JWTKey(
            material: .secret(SecretBytes(secret)), type: .hmac(bytes: secret.count), isPrivate: true,
            algorithms: algorithms, kid: kid)
    }

    /// Generates a new key.
    public static func generate(_ spec: Spec, kid: String? = nil) throws(TokenError) -> JWTKey {
        switch spec {
        case .rsa(let bits):
            guard (2048...16384).contains(bits) else {
                throw TokenError(.weakKey, "RSA keys must be 2048 to 16384 bits; \(bits) was asked for")
            }
            return try JWTKey(pkey: KeyCodec.generate(rsaBits: bits), isPrivate: true, algorithms: nil, kid: kid)
        case .ec(let curve):
            return try JWTKey(pkey: KeyCodec.generate(curve: curve), isPrivate: true, algorithms: nil, kid: kid)
        case .ed25519:
            return try JWTKey(pkey: KeyCodec.generate(ed25519: true), isPrivate: true, algorithms: nil, kid: kid)
        case .hmac(let algorithm):
            guard algorithm.family == .hmac else { throw TokenError(.invalidKey, "\(algorithm) is not an HMAC algorithm") }
            return try hmac(secret: KeyCodec.randomBytes(algorithm.hashLength), algorithms: [algorithm], kid: kid)
        }
    }

    /// Classifies an OpenSSL key and applies the strength rules.
    static func inspect(_ pkey: PKey, isPrivate: Bool) throws(TokenError) -> KeyType {
        switch pkey.baseID {
        case EVP_PKEY_RSA:
            let bits = pkey.bits
            guard bits >= 2048 else { throw TokenError(.weakKey, "RSA keys under 2048 bits are refused; this one has \(bits)") }
            guard bits <= 16384 else { throw TokenError(.unsupportedKey, "RSA keys over 16384 bits are refused; this one has \(bits)") }
            guard let e = pkey.bigNumber("e"), let last = e.last else { throw TokenError(.invalidKey, "the RSA key has no public exponent") }
            let significant = e.drop(while: { $0 == 0 })
            if last & 1 == 0 || (significant.count == 1 && significant.first ?? 0 < 3) || significant.isEmpty {
                throw TokenError(.weakKey, "the RSA public exponent must be odd and at least 3")
            }
            if RocaCheck.isVulnerable(pkey) {
                throw TokenError(.weakKey, "the RSA modulus has the ROCA fingerprint (CVE-2017-15361)")
            }
            if isPrivate, !pkey.pairwiseCheck() {
                throw TokenError(.invalidKey, "the RSA private key is inconsistent")
            }
            return .rsa(bits: bits)
        case EVP_PKEY_RSA_PSS:
            throw TokenError(.unsupportedKey, "RSASSA-PSS-restricted keys (id-RSASSA-PSS) are not supported; use an rsaEncryption key with PS256/384/512")
        case EVP_PKEY_EC:
            // OpenSSL 3 names the group even for explicit parameters that match a named curve,
            // so the encoding must be checked too.
            guard let name = pkey.groupName, pkey.stringParameter("encoding") != "explicit" else {
                throw TokenError(.unsupportedKey, "EC keys with explicit curve parameters are refused; use a named curve")
            }
            guard let curve = ECCurve(opensslName: name) else {
                throw TokenError(.unsupportedKey, "EC curve \(name) is not supported (P-256, P-384, P-521 are)")
            }
            guard pkey.publicCheck() else { throw TokenError(.invalidKey, "the EC public key is not a valid point on \(curve.rawValue)") }
            if isPrivate, !pkey.pairwiseCheck() { throw TokenError(.invalidKey, "the EC private key does not match its public key") }
            return .ec(curve)
        case EVP_PKEY_ED25519:
            return .ed25519
        default:
            throw TokenError(.unsupportedKey, "this key type is not supported (RSA, EC P-256/384/521 and Ed25519 are)")
        }
    }

    // MARK: Deriving and exporting

    /// The public half (HMAC keys have none and are returned unchanged).
    public var publicKey: JWTKey {
        guard isPrivate, case .pkey(let pkey) = material,
            let der = try? pkey.publicDER(),
            let pub = try? KeyCodec.decode(der, as: .subjectPublicKeyInfo),
            let key = try? JWTKey(material: .pkey(pub), type: type, isPrivate: false, algorithms: algorithms, kid: kid, use: use, keyOperations: keyOperations.map { $0.filter { $0 == "verify" } })
        else { return self }
        return key
    }

    /// The same key with another `kid`.
    public func with(kid: String?) -> JWTKey {
        // Cannot fail: the type and algorithms were already checked together.
        (try? JWTKey(material: material, type: type, isPrivate: isPrivate, algorithms: algorithms, kid: kid, use: use, keyOperations: keyOperations)) ?? self
    }

    /// The same key bound to other algorithms (checked against the key type).
    public func with(algorithms: Set<JWTAlgorithm>) throws(TokenError) -> JWTKey {
        try JWTKey(material: material, type: type, isPrivate: isPrivate, algorithms: algorithms, kid: kid, use: use, keyOperations: keyOperations)
    }

    /// SubjectPublicKeyInfo PEM (`PUBLIC KEY`).
    public func publicPEM() throws(TokenError) -> String {
        guard case .pkey(let pkey) = material else { throw TokenError(.unsupportedKey, "HMAC secrets have no PEM form") }
        return PEM.encode(label: "PUBLIC KEY", der: try pkey.publicDER())
    }

    /// PKCS#8 PEM (`PRIVATE KEY`). Handle the result as a secret.
    public func privatePEM() throws(TokenError) -> String {
        guard case .pkey(let pkey) = material else { throw TokenError(.unsupportedKey, "HMAC secrets have no PEM form") }
        guard isPrivate else { throw TokenError(.privateKeyRequired, "this is a public key") }
        return PEM.encode(label: "PRIVATE KEY", der: try pkey.privateDER())
    }

    /// Whether this key may be used to verify signatures, judged by JWK `use` and `key_ops`.
    var usableForVerification: Bool {
        if let use, use != "sig" { return false }
        if let keyOperations, !keyOperations.contains("verify") { return false }
        return true
    }
}

/// Detects RSA moduli generated by the Infineon library affected by ROCA (CVE-2017-15361):
/// such a modulus N satisfies, for every small prime p below, N mod p ∈ ⟨65537⟩ (mod p).
/// A random modulus passes all these tests with negligible probability.
enum RocaCheck {
    static let primes: [UInt] = [
        3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97,
        101, 103, 107, 109, 113, 127, 131, 137, 139, 149, 151, 157, 163, 167,
    ]

    static let subgroups: [Set<UInt>] = primes.map { p in
        var set: Set<UInt> = [1]
        let g = 65537 % p
        var x = g
        while !set.contains(x) {
            set.insert(x)
            x = x * g % p
        }
        return set
    }

    static func isVulnerable(_ pkey: PKey) -> Bool {
        for (i, p) in primes.enumerated() {
            guard let r = pkey.bigNumberModWord("n", p) else { return false }
            if !subgroups[i].contains(r) { return false }
        }
        return true
    }
}

/// All of a key's fields live in one immutable object, so copying a key (into a verifier entry,
/// a verified token) costs one reference-count operation.
final class JWTKeyStorage: Sendable {
    let type: JWTKey.KeyType
    let isPrivate: Bool
    let algorithms: Set<JWTAlgorithm>
    let kid: String?
    let use: String?
    let keyOperations: [String]?
    // The key object is stored as two optionals rather than as the `Material` enum: a
    // multi-payload enum keeps tag bits inside the pointer, which leak checkers (LeakSanitizer,
    // valgrind) cannot follow, so they would report every HMAC secret as leaked.
    private let pkey: PKey?
    private let secret: SecretBytes?

    var material: JWTKey.Material {
        if let pkey { return .pkey(pkey) }
        if let secret { return .secret(secret) }
        preconditionFailure("a key always holds a PKey or a secret")
    }

    init(
        type: JWTKey.KeyType, isPrivate: Bool, algorithms: Set<JWTAlgorithm>, kid: String?, use: String?,
        keyOperations: [String]?, material: JWTKey.Material
    ) {
        self.type = type
        self.isPrivate = isPrivate
        self.algorithms = algorithms
        self.kid = kid
        self.use = use
        self.keyOperations = keyOperations
        switch material {
        case .pkey(let key):
            pkey = key
            secret = nil
        case .secret(let bytes):
            pkey = nil
            secret = bytes
        }
    }
}
