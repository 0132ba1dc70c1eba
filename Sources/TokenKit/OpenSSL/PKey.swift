internal import COpenSSL

/// Owns one OpenSSL `EVP_PKEY` and frees it.
///
/// `@unchecked Sendable` is safe: the pointer is set once and never mutated, and OpenSSL 3 keys
/// may be used from many threads at once for signing and verification, because every operation
/// creates its own `EVP_PKEY_CTX`/`EVP_MD_CTX` (OpenSSL 3 "threads" documentation).
final class PKey: @unchecked Sendable {
    let pointer: OpaquePointer

    init(taking pointer: OpaquePointer) { self.pointer = pointer }

    deinit { EVP_PKEY_free(pointer) }

    var baseID: Int32 { EVP_PKEY_get_base_id(pointer) }
    var bits: Int { Int(EVP_PKEY_get_bits(pointer)) }

    /// Curve name of an EC key, or nil for explicit parameters / other key types.
    var groupName: String? {
        var buffer = [CChar](repeating: 0, count: 80)
        var length = 0
        guard EVP_PKEY_get_group_name(pointer, &buffer, buffer.count, &length) == 1, length > 0 else {
            OpenSSLError.clear()
            return nil
        }
        return String(decoding: buffer.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// A UTF-8 string parameter, e.g. "encoding" of an EC key ("named_curve" or "explicit").
    func stringParameter(_ name: String) -> String? {
        var buffer = [CChar](repeating: 0, count: 80)
        var length = 0
        guard EVP_PKEY_get_utf8_string_param(pointer, name, &buffer, buffer.count, &length) == 1 else {
            OpenSSLError.clear()
            return nil
        }
        return String(decoding: buffer.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// A BIGNUM parameter ("n", "e", "d", "qx", "priv", …) as big-endian bytes, padded to `length`.
    func bigNumber(_ name: String, length: Int? = nil) -> [UInt8]? {
        var bn: OpaquePointer? = nil
        guard EVP_PKEY_get_bn_param(pointer, name, &bn) == 1, let bn else {
            OpenSSLError.clear()
            return nil
        }
        defer { BN_clear_free(bn) }
        let size = Int((BN_num_bits(bn) + 7) / 8)
        let outLength = max(length ?? size, size)
        var out = [UInt8](repeating: 0, count: outLength)
        let written = out.withUnsafeMutableBufferPointer { buffer -> Int32 in
            guard let base = buffer.baseAddress else { return -1 }
            return BN_bn2binpad(bn, base, Int32(outLength))
        }
        return written == outLength ? out : nil
    }

    /// Remainder of a BIGNUM parameter modulo a small word (used by the ROCA check).
    func bigNumberModWord(_ name: String, _ word: UInt) -> UInt? {
        var bn: OpaquePointer? = nil
        guard EVP_PKEY_get_bn_param(pointer, name, &bn) == 1, let bn else {
            OpenSSLError.clear()
            return nil
        }
        defer { BN_free(bn) }
        let r = BN_mod_word(bn, numericCast(word))
        return r == .max ? nil : UInt(r)
    }

    func rawPublicKey() -> [UInt8]? {
        var length = 0
        guard EVP_PKEY_get_raw_public_key(pointer, nil, &length) == 1 else { OpenSSLError.clear(); return nil }
        var out = [UInt8](repeating: 0, count: length)
        guard EVP_PKEY_get_raw_public_key(pointer, &out, &length) == 1 else { OpenSSLError.clear(); return nil }
        return Array(out.prefix(length))
    }

    func rawPrivateKey() -> [UInt8]? {
        var length = 0
        guard EVP_PKEY_get_raw_private_key(pointer, nil, &length) == 1 else { OpenSSLError.clear(); return nil }
        var out = [UInt8](repeating: 0, count: length)
        guard EVP_PKEY_get_raw_private_key(pointer, &out, &length) == 1 else { OpenSSLError.clear(); return nil }
        return Array(out.prefix(length))
    }

    /// SubjectPublicKeyInfo DER.
    func publicDER() throws(TokenError) -> [UInt8] {
        var out: UnsafeMutablePointer<UInt8>? = nil
        let length = i2d_PUBKEY(pointer, &out)
        guard length > 0, let out else { throw OpenSSLError.take(.cryptoFailure, "cannot encode the public key") }
        defer { tt_openssl_free(out) }
        return Array(UnsafeBufferPointer(start: out, count: Int(length)))
    }

    /// PKCS#8 PrivateKeyInfo DER.
    func privateDER() throws(TokenError) -> [UInt8] {
        guard let info = EVP_PKEY2PKCS8(pointer) else {
            throw OpenSSLError.take(.cryptoFailure, "cannot encode the private key")
        }
        defer { PKCS8_PRIV_KEY_INFO_free(info) }
        return try PKey.der(ofPrivateKeyInfo: info)
    }

    /// The DER of a PKCS8_PRIV_KEY_INFO; OpenSSL's copy is cleansed before it is freed.
    static func der(ofPrivateKeyInfo info: OpaquePointer) throws(TokenError) -> [UInt8] {
        var out: UnsafeMutablePointer<UInt8>? = nil
        let length = i2d_PKCS8_PRIV_KEY_INFO(info, &out)
        guard length > 0, let out else { throw OpenSSLError.take(.cryptoFailure, "cannot encode the private key") }
        defer {
            OPENSSL_cleanse(out, Int(length))
            tt_openssl_free(out)
        }
        return Array(UnsafeBufferPointer(start: out, count: Int(length)))
    }

    /// Runs OpenSSL's public-key validation (EC: point on curve, not infinity).
    func publicCheck() -> Bool {
        guard let ctx = EVP_PKEY_CTX_new_from_pkey(nil, pointer, nil) else { return false }
        defer { EVP_PKEY_CTX_free(ctx) }
        let ok = EVP_PKEY_public_check(ctx) == 1
        if !ok { OpenSSLError.clear() }
        return ok
    }

    /// Checks that a private key matches its public half.
    func pairwiseCheck() -> Bool {
        guard let ctx = EVP_PKEY_CTX_new_from_pkey(nil, pointer, nil) else { return false }
        defer { EVP_PKEY_CTX_free(ctx) }
        let ok = EVP_PKEY_pairwise_check(ctx) == 1
        if !ok { OpenSSLError.clear() }
        return ok
    }
}

/// Owns a secret (an HMAC key) and wipes it when freed.
///
/// `@unchecked Sendable` is safe: the bytes are written once in `init` and only read afterwards.
final class SecretBytes: @unchecked Sendable {
    let buffer: UnsafeMutableRawBufferPointer

    init(_ bytes: [UInt8]) {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(bytes.count, 1), alignment: 16)
        self.buffer = buffer
        bytes.withUnsafeBytes { source in
            if let base = source.baseAddress, let dest = buffer.baseAddress {
                dest.copyMemory(from: base, byteCount: source.count)
            }
        }
        count = bytes.count
    }

    let count: Int

    var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: buffer[0..<count]) }

    var copy: [UInt8] { Array(bytes) }

    deinit {
        OPENSSL_cleanse(buffer.baseAddress, buffer.count)
        buffer.deallocate()
    }
}

/// Turns OpenSSL's thread-local error queue into TokenError values.
enum OpenSSLError {
    /// Drains the queue and returns a TokenError whose message ends with OpenSSL's reason.
    static func take(_ code: TokenError.Code, _ message: String) -> TokenError {
        var reason: String? = nil
        while true {
            let e = ERR_get_error()
            if e == 0 { break }
            if reason == nil, let text = ERR_reason_error_string(e) { reason = String(cString: text) }
        }
        if let reason { return TokenError(code, "\(message) (OpenSSL: \(reason))") }
        return TokenError(code, message)
    }

    static func clear() { ERR_clear_error() }
}
