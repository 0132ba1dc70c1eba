internal import COpenSSL

/// DER decoding, key generation and construction from components, with OpenSSL.
enum KeyCodec {
    enum DERKind {
        case subjectPublicKeyInfo, rsaPublicKey, privateKey, certificate
    }

    /// Decodes DER of the given kind. Trailing bytes are an error.
    static func decode(_ der: [UInt8], as kind: DERKind) throws(TokenError) -> PKey {
        let result: OpaquePointer? = der.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            guard let base = buffer.baseAddress, buffer.count > 0 else { return nil }
            var cursor: UnsafePointer<UInt8>? = base
            let length = buffer.count
            let key: OpaquePointer?
            switch kind {
            case .subjectPublicKeyInfo:
                key = d2i_PUBKEY(nil, &cursor, length)
            case .rsaPublicKey:
                key = d2i_PublicKey(EVP_PKEY_RSA, nil, &cursor, length)
            case .privateKey:
                key = d2i_AutoPrivateKey(nil, &cursor, length)
            case .certificate:
                guard let x509 = d2i_X509(nil, &cursor, length) else { return nil }
                key = X509_get_pubkey(x509)
                X509_free(x509)
            }
            guard let key else { return nil }
            if cursor != base + length {
                EVP_PKEY_free(key)
                return nil
            }
            return key
        }
        guard let result else {
            throw OpenSSLError.take(.invalidKey, "cannot decode \(describe(kind))")
        }
        OpenSSLError.clear()
        return PKey(taking: result)
    }

    static func describe(_ kind: DERKind) -> String {
        switch kind {
        case .subjectPublicKeyInfo: "the SubjectPublicKeyInfo"
        case .rsaPublicKey: "the PKCS#1 RSA public key"
        case .privateKey: "the private key"
        case .certificate: "the certificate"
        }
    }

    /// Generates a key pair.
    static func generate(rsaBits: Int? = nil, curve: ECCurve? = nil, ed25519: Bool = false) throws(TokenError) -> PKey {
        let name = rsaBits != nil ? "RSA" : curve != nil ? "EC" : "ED25519"
        guard let ctx = EVP_PKEY_CTX_new_from_name(nil, name, nil) else {
            throw OpenSSLError.take(.cryptoFailure, "cannot create a key generator")
        }
        defer { EVP_PKEY_CTX_free(ctx) }
        guard EVP_PKEY_keygen_init(ctx) == 1 else { throw OpenSSLError.take(.cryptoFailure, "cannot start key generation") }
        if let rsaBits, EVP_PKEY_CTX_set_rsa_keygen_bits(ctx, Int32(rsaBits)) != 1 {
            throw OpenSSLError.take(.cryptoFailure, "cannot set the RSA key size")
        }
        if let curve, EVP_PKEY_CTX_set_group_name(ctx, curve.opensslName) != 1 {
            throw OpenSSLError.take(.cryptoFailure, "cannot set the curve")
        }
        var key: OpaquePointer? = nil
        guard EVP_PKEY_generate(ctx, &key) == 1, let key else {
            throw OpenSSLError.take(.cryptoFailure, "key generation failed")
        }
        return PKey(taking: key)
    }

    /// Builds an RSA key from big-endian components (JWK `n`, `e`, and optionally the private ones).
    static func rsa(n: [UInt8], e: [UInt8], privateParts: [(StaticString, [UInt8])]) throws(TokenError) -> PKey {
        var parts: [(StaticString, [UInt8])] = [("n", n), ("e", e)]
        parts += privateParts
        return try fromData(type: "RSA", bignums: parts, isPrivate: !privateParts.isEmpty)
    }

    /// Builds an EC key from coordinates (and optionally the private scalar).
    static func ec(curve: ECCurve, x: [UInt8], y: [UInt8], d: [UInt8]?) throws(TokenError) -> PKey {
        let point = [0x04] + x + y
        return try fromData(
            type: "EC", group: curve.staticName, octets: [("pub", point)],
            bignums: d.map { d -> [(StaticString, [UInt8])] in [("priv", d)] } ?? [], isPrivate: d != nil)
    }

    private static func fromData(
        type: String, group: StaticString? = nil, octets: [(StaticString, [UInt8])] = [], bignums: [(StaticString, [UInt8])],
        isPrivate: Bool
    ) throws(TokenError) -> PKey {
        guard let builder = OSSL_PARAM_BLD_new() else { throw OpenSSLError.take(.cryptoFailure, "out of memory") }
        defer { OSSL_PARAM_BLD_free(builder) }
        var numbers: [OpaquePointer] = []
        defer { for bn in numbers { BN_clear_free(bn) } }
        // The builder keeps pointers to names and octet strings until to_param: keep them alive.
        let keepAlive = octets.map { ($0.0, $0.1) }
        // OSSL_PARAM_BLD keeps the name and value pointers until OSSL_PARAM_BLD_to_param, so
        // names and the group are StaticStrings (static storage), never temporary C strings.
        if let group, OSSL_PARAM_BLD_push_utf8_string(builder, cString("group"), cString(group), 0) != 1 {
            throw OpenSSLError.take(.cryptoFailure, "cannot build key parameters")
        }
        for (name, bytes) in bignums {
            guard let bn = bytes.withUnsafeBufferPointer({ BN_bin2bn($0.baseAddress, Int32($0.count), nil) }) else {
                throw OpenSSLError.take(.cryptoFailure, "cannot build key parameters")
            }
            numbers.append(bn)
            guard OSSL_PARAM_BLD_push_BN(builder, cString(name), bn) == 1 else {
                throw OpenSSLError.take(.cryptoFailure, "cannot build key parameters")
            }
        }
        let params: UnsafeMutablePointer<OSSL_PARAM>? = withExtendedLifetime(keepAlive) { () -> UnsafeMutablePointer<OSSL_PARAM>? in
            for (name, bytes) in keepAlive {
                let ok = bytes.withUnsafeBytes { OSSL_PARAM_BLD_push_octet_string(builder, cString(name), $0.baseAddress, $0.count) }
                if ok != 1 { return nil }
            }
            return OSSL_PARAM_BLD_to_param(builder)
        }
        guard let params else { throw OpenSSLError.take(.cryptoFailure, "cannot build key parameters") }
        defer { OSSL_PARAM_free(params) }
        guard let ctx = EVP_PKEY_CTX_new_from_name(nil, type, nil) else {
            throw OpenSSLError.take(.cryptoFailure, "cannot create a key context")
        }
        defer { EVP_PKEY_CTX_free(ctx) }
        var key: OpaquePointer? = nil
        let selection = isPrivate ? tt_select_keypair() : tt_select_public_key()
        guard EVP_PKEY_fromdata_init(ctx) == 1, EVP_PKEY_fromdata(ctx, &key, selection, params) == 1, let key else {
            throw OpenSSLError.take(.invalidKey, "the key parameters do not form a valid \(type) key")
        }
        return PKey(taking: key)
    }

    private static func cString(_ s: StaticString) -> UnsafePointer<CChar> {
        UnsafeRawPointer(s.utf8Start).assumingMemoryBound(to: CChar.self)
    }

    /// Builds an Ed25519 key from its raw public or private bytes.
    static func ed25519(publicKey: [UInt8]?, privateKey: [UInt8]?) throws(TokenError) -> PKey {
        let key: OpaquePointer?
        if let privateKey {
            key = privateKey.withUnsafeBufferPointer {
                EVP_PKEY_new_raw_private_key_ex(nil, "ED25519", nil, $0.baseAddress, $0.count)
            }
        } else if let publicKey {
            key = publicKey.withUnsafeBufferPointer {
                EVP_PKEY_new_raw_public_key_ex(nil, "ED25519", nil, $0.baseAddress, $0.count)
            }
        } else {
            key = nil
        }
        guard let key else { throw OpenSSLError.take(.invalidKey, "invalid Ed25519 key bytes") }
        return PKey(taking: key)
    }

    static func randomBytes(_ count: Int) throws(TokenError) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        guard RAND_bytes(&out, Int32(count)) == 1 else { throw OpenSSLError.take(.cryptoFailure, "no randomness") }
        return out
    }
}
