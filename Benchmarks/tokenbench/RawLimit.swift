import COpenSSL
import TokenKit

/// The physical limit measured in the same process: OpenSSL with the key parsed once and the
/// signature decoded beforehand, no parsing and no claims. What TokenKit's rows are divided by.
final class RawLimit {
    let algorithm: JWTAlgorithm
    private let pkey: OpaquePointer?
    private let pctx: OpaquePointer?
    private let mdctx: OpaquePointer?
    private let hmac: OpaquePointer?
    private let md: OpaquePointer?
    /// Per token: signing input and signature as the raw primitive wants it (DER for ECDSA).
    private let inputs: [[UInt8]]
    private let signatures: [[UInt8]]

    init(algorithm: JWTAlgorithm, publicKeyPEM: String?, secret: [UInt8]?, tokens: [String]) throws {
        self.algorithm = algorithm
        var inputs: [[UInt8]] = []
        var signatures: [[UInt8]] = []
        for token in tokens {
            let parts = token.split(separator: ".", omittingEmptySubsequences: false)
            inputs.append(Array((parts[0] + "." + parts[1]).utf8))
            guard var signature = Base64URL.decode(String(parts[2])) else { throw BenchError("bad signature encoding") }
            if algorithm == .es256 { signature = RawLimit.derSignature(signature) }
            signatures.append(signature)
        }
        self.inputs = inputs
        self.signatures = signatures
        md = EVP_MD_fetch(nil, "SHA256", nil)
        if let secret {
            let ctx = HMAC_CTX_new()
            secret.withUnsafeBufferPointer { _ = HMAC_Init_ex(ctx, $0.baseAddress, Int32($0.count), EVP_sha256(), nil) }
            hmac = ctx
            pkey = nil
            pctx = nil
            mdctx = nil
            return
        }
        hmac = nil
        guard let pem = publicKeyPEM, let der = try PEM.parse(pem).first?.der else { throw BenchError("no public key") }
        let key = der.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            var cursor = buffer.baseAddress
            return d2i_PUBKEY(nil, &cursor, buffer.count)
        }
        guard let key else { throw BenchError("cannot parse the public key") }
        pkey = key
        if algorithm == .eddsa {
            mdctx = EVP_MD_CTX_new()
            pctx = nil
        } else {
            let ctx = EVP_PKEY_CTX_new_from_pkey(nil, key, nil)
            guard EVP_PKEY_verify_init(ctx) == 1 else { throw BenchError("EVP_PKEY_verify_init failed") }
            if algorithm == .rs256 { _ = EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_PADDING) }
            guard EVP_PKEY_CTX_set_signature_md(ctx, md) == 1 else { throw BenchError("set_signature_md failed") }
            pctx = ctx
            mdctx = nil
        }
    }

    deinit {
        if let pctx { EVP_PKEY_CTX_free(pctx) }
        if let mdctx { EVP_MD_CTX_free(mdctx) }
        if let hmac { HMAC_CTX_free(hmac) }
        if let pkey { EVP_PKEY_free(pkey) }
        if let md { EVP_MD_free(md) }
    }

    var count: Int { inputs.count }

    /// Verifies token `i`'s signature with the raw primitive.
    func verify(_ i: Int) -> Bool {
        inputs[i].withUnsafeBufferPointer { input in
            signatures[i].withUnsafeBufferPointer { sig in
                switch algorithm {
                case .hs256:
                    var out = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
                    var length: UInt32 = 32
                    return withUnsafeMutableBytes(of: &out) { mac -> Bool in
                        let p = mac.baseAddress?.assumingMemoryBound(to: UInt8.self)
                        guard HMAC_Init_ex(hmac, nil, 0, nil, nil) == 1,
                            HMAC_Update(hmac, input.baseAddress, input.count) == 1,
                            HMAC_Final(hmac, p, &length) == 1
                        else { return false }
                        return sig.count == 32 && CRYPTO_memcmp(p, sig.baseAddress, 32) == 0
                    }
                case .eddsa:
                    guard EVP_DigestVerifyInit_ex(mdctx, nil, nil, nil, nil, pkey, nil) == 1 else { return false }
                    return EVP_DigestVerify(mdctx, sig.baseAddress, sig.count, input.baseAddress, input.count) == 1
                default:
                    var digest = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
                    var length: UInt32 = 32
                    return withUnsafeMutableBytes(of: &digest) { d -> Bool in
                        let p = d.baseAddress?.assumingMemoryBound(to: UInt8.self)
                        guard EVP_Digest(input.baseAddress, input.count, p, &length, md, nil) == 1 else { return false }
                        return EVP_PKEY_verify(pctx, sig.baseAddress, sig.count, p, Int(length)) == 1
                    }
                }
            }
        }
    }

    /// DER Ecdsa-Sig-Value from raw r‖s (P-256).
    static func derSignature(_ raw: [UInt8]) -> [UInt8] {
        func integer(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
            var body = Array(bytes.drop(while: { $0 == 0 }))
            if body.isEmpty { body = [0] }
            if body[0] & 0x80 != 0 { body.insert(0, at: 0) }
            return [0x02, UInt8(body.count)] + body
        }
        let r = integer(raw[0..<32]), s = integer(raw[32..<64])
        return [0x30, UInt8(r.count + s.count)] + r + s
    }
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
