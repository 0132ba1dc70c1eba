internal import COpenSSL

/// The native engine's signature step: OpenSSL 3 called directly on a key parsed once.
enum NativeSignatures {
    /// Verifies `signature` over `message`. The caller has already checked that the algorithm
    /// fits the key; lengths are checked here.
    static func verify(
        _ algorithm: JWTAlgorithm, key: JWTKey.Material, message: UnsafeRawBufferPointer, signature: UnsafeRawBufferPointer
    ) -> Bool {
        switch key {
        case .secret(let secret):
            return verifyHMAC(algorithm, secret: secret, message: message, signature: signature)
        case .pkey(let pkey):
            if algorithm.family == .ecdsa {
                guard let curve = algorithm.curve, signature.count == 2 * curve.coordinateLength,
                    let der = ECDSASignature.derFromRaw(signature, coordinateLength: curve.coordinateLength)
                else { return false }
                return der.withUnsafeBytes { digestVerify(algorithm, pkey: pkey, message: message, signature: $0) }
            }
            if algorithm.family == .eddsa, signature.count != 64 { return false }
            return digestVerify(algorithm, pkey: pkey, message: message, signature: signature)
        }
    }

    static func hmac(_ algorithm: JWTAlgorithm, secret: SecretBytes, message: UnsafeRawBufferPointer, into out: UnsafeMutablePointer<UInt8>) -> Int {
        let md: OpaquePointer? = switch algorithm {
        case .hs256: EVP_sha256()
        case .hs384: EVP_sha384()
        default: EVP_sha512()
        }
        var length: UInt32 = 0
        let keyBytes = secret.bytes
        guard HMAC(md, keyBytes.baseAddress, Int32(keyBytes.count), message.baseAddress?.assumingMemoryBound(to: UInt8.self), message.count, out, &length) != nil else {
            OpenSSLError.clear()
            return 0
        }
        return Int(length)
    }

    private static func verifyHMAC(
        _ algorithm: JWTAlgorithm, secret: SecretBytes, message: UnsafeRawBufferPointer, signature: UnsafeRawBufferPointer
    ) -> Bool {
        guard signature.count == algorithm.hashLength else { return false }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 64) { buffer -> Bool in
            guard let out = buffer.baseAddress else { return false }
            let length = hmac(algorithm, secret: secret, message: message, into: out)
            guard length == signature.count, let sig = signature.baseAddress else { return false }
            return CRYPTO_memcmp(out, sig, length) == 0
        }
    }

    /// Sets up a DigestSign/DigestVerify context for the algorithm (PSS padding and salt length).
    private static func initialise(_ algorithm: JWTAlgorithm, context: OpaquePointer, pkey: PKey, sign: Bool) -> Bool {
        var pctx: OpaquePointer? = nil
        let ok = sign
            ? EVP_DigestSignInit_ex(context, &pctx, algorithm.digestName, nil, nil, pkey.pointer, nil)
            : EVP_DigestVerifyInit_ex(context, &pctx, algorithm.digestName, nil, nil, pkey.pointer, nil)
        guard ok == 1 else { return false }
        if algorithm.family == .rsaPSS {
            guard let pctx, EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1,
                EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST) == 1
            else { return false }
        } else if algorithm.family == .rsa {
            guard let pctx, EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) == 1 else { return false }
        }
        return true
    }

    private static func digestVerify(
        _ algorithm: JWTAlgorithm, pkey: PKey, message: UnsafeRawBufferPointer, signature: UnsafeRawBufferPointer
    ) -> Bool {
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard initialise(algorithm, context: context, pkey: pkey, sign: false) else {
            OpenSSLError.clear()
            return false
        }
        let result = EVP_DigestVerify(
            context, signature.baseAddress?.assumingMemoryBound(to: UInt8.self), signature.count,
            message.baseAddress?.assumingMemoryBound(to: UInt8.self), message.count)
        if result != 1 { OpenSSLError.clear() }
        return result == 1
    }

    /// Signs `message`; ECDSA signatures come out as raw r‖s, as JWS requires.
    static func sign(_ algorithm: JWTAlgorithm, key: JWTKey, message: [UInt8]) throws(TokenError) -> [UInt8] {
        switch key.material {
        case .secret(let secret):
            var out = [UInt8](repeating: 0, count: 64)
            let length = message.withUnsafeBytes { m in
                out.withUnsafeMutableBufferPointer { o in
                    o.baseAddress.map { hmac(algorithm, secret: secret, message: m, into: $0) } ?? 0
                }
            }
            guard length == algorithm.hashLength else { throw OpenSSLError.take(.cryptoFailure, "HMAC failed") }
            return Array(out.prefix(length))
        case .pkey(let pkey):
            guard key.isPrivate else { throw TokenError(.privateKeyRequired, "signing needs a private key; this is a public key") }
            guard let context = EVP_MD_CTX_new() else { throw TokenError(.cryptoFailure, "out of memory") }
            defer { EVP_MD_CTX_free(context) }
            guard initialise(algorithm, context: context, pkey: pkey, sign: true) else {
                throw OpenSSLError.take(.cryptoFailure, "cannot start signing with \(algorithm)")
            }
            var length = 0
            let sized = message.withUnsafeBufferPointer { EVP_DigestSign(context, nil, &length, $0.baseAddress, $0.count) }
            guard sized == 1 else { throw OpenSSLError.take(.cryptoFailure, "signing with \(algorithm) failed") }
            var signature = [UInt8](repeating: 0, count: length)
            let signed = message.withUnsafeBufferPointer { m in
                EVP_DigestSign(context, &signature, &length, m.baseAddress, m.count)
            }
            guard signed == 1 else { throw OpenSSLError.take(.cryptoFailure, "signing with \(algorithm) failed") }
            signature.removeSubrange(length...)
            if algorithm.family == .ecdsa, let curve = algorithm.curve {
                guard let raw = ECDSASignature.rawFromDER(signature, coordinateLength: curve.coordinateLength) else {
                    throw TokenError(.cryptoFailure, "OpenSSL returned a malformed ECDSA signature")
                }
                return raw
            }
            return signature
        }
    }
}

/// Conversion between JWS's raw r‖s ECDSA signatures and X.509's DER Ecdsa-Sig-Value.
enum ECDSASignature {
    /// Canonical DER of SEQUENCE { INTEGER r, INTEGER s } from fixed-length big-endian halves.
    static func derFromRaw(_ raw: UnsafeRawBufferPointer, coordinateLength n: Int) -> [UInt8]? {
        guard raw.count == 2 * n else { return nil }
        func integer(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
            var start = 0
            while start < bytes.count - 1, bytes[start] == 0 { start += 1 }
            var body = Array(bytes[start...])
            if body[0] & 0x80 != 0 { body.insert(0, at: 0) }
            return [0x02] + length(body.count) + body
        }
        let r = integer(UnsafeRawBufferPointer(rebasing: raw[0..<n]))
        let s = integer(UnsafeRawBufferPointer(rebasing: raw[n..<(2 * n)]))
        return [0x30] + length(r.count + s.count) + r + s
    }

    private static func length(_ count: Int) -> [UInt8] {
        count < 0x80 ? [UInt8(count)] : [0x81, UInt8(count)]
    }

    /// Fixed-length r‖s from DER; nil when the DER is not a well-formed pair of integers that fit.
    static func rawFromDER(_ der: [UInt8], coordinateLength n: Int) -> [UInt8]? {
        var i = 0
        func readLength() -> Int? {
            guard i < der.count else { return nil }
            let first = der[i]
            i += 1
            if first < 0x80 { return Int(first) }
            guard first == 0x81, i < der.count else { return nil }
            defer { i += 1 }
            return Int(der[i])
        }
        func readInteger() -> [UInt8]? {
            guard i < der.count, der[i] == 0x02 else { return nil }
            i += 1
            guard let len = readLength(), len > 0, i + len <= der.count else { return nil }
            var body = Array(der[i..<(i + len)])
            i += len
            while body.count > 1, body[0] == 0 { body.removeFirst() }
            guard body.count <= n else { return nil }
            return [UInt8](repeating: 0, count: n - body.count) + body
        }
        guard der.first == 0x30 else { return nil }
        i = 1
        guard let total = readLength(), i + total == der.count, let r = readInteger(), let s = readInteger(), i == der.count else {
            return nil
        }
        return r + s
    }
}
