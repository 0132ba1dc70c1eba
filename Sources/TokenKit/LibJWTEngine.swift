internal import CLibJWT

/// libjwt's signature step for one key and one algorithm.
///
/// libjwt 1.10 re-parses the PEM key on every call (that is its design, and why it is slow); it is
/// kept as an independent second implementation whose verdicts the tests compare with ours.
///
/// `@unchecked Sendable` is safe: the `jwt_t` is configured once in `init` and afterwards only
/// read by `jwt_verify_sha_pem`/`jwt_verify_sha_hmac`, which allocate their own OpenSSL objects per
/// call and never write to the `jwt_t`.
final class LibJWTHandle: @unchecked Sendable {
    /// The algorithms libjwt 1.10 implements. PS* and EdDSA are not among them.
    static let supported: Set<JWTAlgorithm> = [.hs256, .hs384, .hs512, .rs256, .rs384, .rs512, .es256, .es384, .es512]

    private let jwt: OpaquePointer
    let algorithm: JWTAlgorithm

    init(algorithm: JWTAlgorithm, key: JWTKey) throws(TokenError) {
        guard LibJWTHandle.supported.contains(algorithm) else {
            throw TokenError(.unsupportedAlgorithm, "libjwt 1.10 does not implement \(algorithm)")
        }
        let alg: jwt_alg_t = switch algorithm {
        case .hs256: JWT_ALG_HS256
        case .hs384: JWT_ALG_HS384
        case .hs512: JWT_ALG_HS512
        case .rs256: JWT_ALG_RS256
        case .rs384: JWT_ALG_RS384
        case .rs512: JWT_ALG_RS512
        case .es256: JWT_ALG_ES256
        case .es384: JWT_ALG_ES384
        default: JWT_ALG_ES512
        }
        // libjwt takes the raw secret for HMAC and PEM text for RSA/EC.
        let material: [UInt8]
        switch key.material {
        case .secret(let secret): material = secret.copy
        case .pkey: material = Array(try key.publicKey.publicPEM().utf8)
        }
        guard !material.isEmpty else { throw TokenError(.weakKey, "libjwt must not be given an empty key") }
        var handle: OpaquePointer? = nil
        guard jwt_new(&handle) == 0, let handle else { throw TokenError(.cryptoFailure, "jwt_new failed") }
        let status = material.withUnsafeBufferPointer { jwt_set_alg(handle, alg, $0.baseAddress, Int32($0.count)) }
        guard status == 0 else {
            jwt_free(handle)
            throw TokenError(.cryptoFailure, "jwt_set_alg failed")
        }
        self.jwt = handle
        self.algorithm = algorithm
    }

    deinit { jwt_free(jwt) }

    /// Verifies the base64url signature segment over the signing input. Inputs containing a NUL
    /// byte cannot be passed to libjwt (it takes C strings) and are refused.
    func verify(signingInput: UnsafeRawBufferPointer, signatureSegment: UnsafeRawBufferPointer) -> Bool {
        if signingInput.contains(0) || signatureSegment.contains(0) { return false }
        return withCString(signingInput) { head in
            withCString(signatureSegment) { sig in
                switch algorithm.family {
                case .hmac: jwt_verify_sha_hmac(jwt, head, sig) == 0
                default: jwt_verify_sha_pem(jwt, head, sig) == 0
                }
            }
        }
    }

    private func withCString<R>(_ bytes: UnsafeRawBufferPointer, _ body: (UnsafePointer<CChar>) -> R) -> R {
        var text = bytes.map { CChar(bitPattern: $0) }
        text.append(0)
        return text.withUnsafeBufferPointer { buffer in
            // Never nil: the array holds at least the terminating NUL.
            guard let base = buffer.baseAddress else { return body("") }
            return body(base)
        }
    }
}
