internal import COpenSSL

/// Signing with OpenSSL 3. (Verification is `VerifyContext`, reached through `ContextPool`.)
enum NativeSignatures {
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

    /// Sets up a DigestSign context for the algorithm (PSS padding and salt length).
    private static func initialise(_ algorithm: JWTAlgorithm, context: OpaquePointer, pkey: PKey) -> Bool {
        var pctx: OpaquePointer? = nil
        guard EVP_DigestSignInit_ex(context, &pctx, algorithm.digestName, nil, nil, pkey.pointer, nil) == 1 else { return false }
        if algorithm.family == .rsaPSS {
            guard let pctx, EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1,
                EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST) == 1
            else { return false }
        } else if algorithm.family == .rsa {
            guard let pctx, EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) == 1 else { return false }
        }
        return true
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
            guard initialise(algorithm, context: context, pkey: pkey) else {
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
