internal import COpenSSL

/// Private keys encrypted with a passphrase: PKCS#8 `ENCRYPTED PRIVATE KEY` (PBES2 with
/// PBKDF2-HMAC-SHA256 and AES-256-CBC), the form `openssl pkcs8 -topk8 -v2 aes-256-cbc` writes and
/// `openssl pkey -passin` reads.
///
/// ```swift
/// let sealed = try EncryptedPrivateKey.encrypt(privateKeyPEM: keyPEM, passphrase: "correct horse")
/// let opened = try EncryptedPrivateKey.decrypt(sealed, passphrase: "correct horse")   // "PRIVATE KEY" PEM
/// ```
public enum EncryptedPrivateKey {
    /// PBKDF2 iterations used when encrypting.
    public static let iterations: Int32 = 200_000

    /// Whether `pem` holds an `ENCRYPTED PRIVATE KEY` block.
    public static func isEncrypted(_ pem: String) -> Bool { pem.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") }

    /// Encrypts a private key given as PEM (PKCS#8, or traditional RSA/EC) under `passphrase`.
    public static func encrypt(privateKeyPEM: String, passphrase: String) throws(TokenError) -> String {
        let secret = try checked(passphrase)
        let blocks = try PEM.parse(privateKeyPEM)
        guard blocks.count == 1, let block = blocks.first, block.label.hasSuffix("PRIVATE KEY"), block.label != "ENCRYPTED PRIVATE KEY" else {
            throw TokenError(.invalidKey, "expected one unencrypted PEM private key")
        }
        let key = try KeyCodec.decode(block.der, as: .privateKey)
        guard let info = EVP_PKEY2PKCS8(key.pointer) else { throw OpenSSLError.take(.cryptoFailure, "cannot encode the private key") }
        defer { PKCS8_PRIV_KEY_INFO_free(info) }
        let sealed: OpaquePointer? = secret.withUnsafeBufferPointer { pass in
            PKCS8_encrypt(-1, EVP_aes_256_cbc(), pass.baseAddress, Int32(pass.count - 1), nil, 0, iterations, info)
        }
        guard let sealed else { throw OpenSSLError.take(.cryptoFailure, "cannot encrypt the private key") }
        defer { X509_SIG_free(sealed) }
        var out: UnsafeMutablePointer<UInt8>? = nil
        let length = i2d_X509_SIG(sealed, &out)
        guard length > 0, let out else { throw OpenSSLError.take(.cryptoFailure, "cannot encode the encrypted key") }
        defer { tt_openssl_free(out) }
        return PEM.encode(label: "ENCRYPTED PRIVATE KEY", der: Array(UnsafeBufferPointer(start: out, count: Int(length))))
    }

    /// Decrypts an `ENCRYPTED PRIVATE KEY` PEM block; returns the key as unencrypted PKCS#8 PEM.
    /// A wrong passphrase is ``TokenError/Code/invalidKey`` ("wrong passphrase or damaged key").
    public static func decrypt(_ pem: String, passphrase: String) throws(TokenError) -> String {
        let secret = try checked(passphrase)
        let blocks = try PEM.parse(pem)
        guard blocks.count == 1, let block = blocks.first, block.label == "ENCRYPTED PRIVATE KEY" else {
            throw TokenError(.invalidKey, "expected one PEM \"ENCRYPTED PRIVATE KEY\" block")
        }
        let sealed: OpaquePointer? = block.der.withUnsafeBufferPointer { buffer in
            var cursor = buffer.baseAddress
            return d2i_X509_SIG(nil, &cursor, buffer.count)
        }
        guard let sealed else { throw OpenSSLError.take(.invalidKey, "the encrypted key is malformed") }
        defer { X509_SIG_free(sealed) }
        let info: OpaquePointer? = secret.withUnsafeBufferPointer { pass in PKCS8_decrypt(sealed, pass.baseAddress, Int32(pass.count - 1)) }
        guard let info else {
            OpenSSLError.clear()
            throw TokenError(.invalidKey, "wrong passphrase or damaged key")
        }
        defer { PKCS8_PRIV_KEY_INFO_free(info) }
        return PEM.encode(label: "PRIVATE KEY", der: try PKey.der(ofPrivateKeyInfo: info))
    }

    /// The passphrase as a NUL-terminated C string; empty or NUL-containing passphrases are refused.
    private static func checked(_ passphrase: String) throws(TokenError) -> [CChar] {
        guard !passphrase.isEmpty else { throw TokenError(.weakKey, "the passphrase is empty") }
        guard !passphrase.utf8.contains(0) else { throw TokenError(.invalidKey, "the passphrase contains a NUL byte") }
        return passphrase.utf8CString.map { $0 }
    }
}
