internal import COpenSSL
import Synchronization

/// Pre-initialised OpenSSL contexts for one key and one algorithm, so that per token only the
/// hash and the verification run (no `EVP_DigestVerifyInit`, no HMAC key schedule).
///
/// OpenSSL contexts must not be used by two threads at once. The pool has one lazily created
/// context per stripe of a ``Striped`` lock set, chosen by the calling thread. When a stripe is
/// busy the call uses a fresh context instead of waiting.
final class ContextPool: Sendable {
    private let stripes = Striped { Slot() }
    let algorithm: JWTAlgorithm
    private let key: JWTKeyStorage

    init(algorithm: JWTAlgorithm, key: JWTKey) {
        self.algorithm = algorithm
        self.key = key.storage
    }

    /// Verifies `signature` over `message` (signature length already checked by the caller).
    func verify(message: UnsafeRawBufferPointer, signature: UnsafeRawBufferPointer) -> Bool {
        let result = stripes.forCurrentThread.lock.withLockIfAvailable { slot -> Bool? in
            if slot.context == nil { slot.context = VerifyContext(algorithm: algorithm, material: key.material) }
            guard let context = slot.context else { return nil }
            return context.verify(message: message, signature: signature)
        }
        if let result, let result { return result }
        // Busy stripe (or context creation failed there): a one-off context.
        guard let context = VerifyContext(algorithm: algorithm, material: key.material) else { return false }
        return context.verify(message: message, signature: signature)
    }

    struct Slot: ~Copyable {
        var context: VerifyContext? = nil
    }
}

/// Digests fetched once per process (an implicit fetch on every call costs a lookup).
enum Digests {
    // `@unchecked Sendable`-free: OpaquePointer values are only passed to OpenSSL, which treats
    // fetched EVP_MD objects as immutable and thread-safe.
    nonisolated(unsafe) static let sha256 = EVP_MD_fetch(nil, "SHA256", nil)
    nonisolated(unsafe) static let sha384 = EVP_MD_fetch(nil, "SHA384", nil)
    nonisolated(unsafe) static let sha512 = EVP_MD_fetch(nil, "SHA512", nil)

    static func forAlgorithm(_ algorithm: JWTAlgorithm) -> OpaquePointer? {
        switch algorithm.hashLength {
        case 32: sha256
        case 48: sha384
        default: sha512
        }
    }
}

/// One ready-to-use verification context.
///
/// `@unchecked Sendable` is safe: a context is only ever used by the thread that holds its
/// stripe's mutex, or by the one call that created it as a one-off.
final class VerifyContext: @unchecked Sendable {
    // Exactly one of these is set. Plain optionals, not an enum with payloads, so that leak
    // checkers can follow the pointers (see JWTKeyStorage).
    private var hmac: UnsafeMutableRawPointer? = nil  // HMAC_CTX, pre-keyed
    private var pkeyContext: OpaquePointer? = nil  // EVP_PKEY_CTX, verify-initialised (RSA, PSS, ECDSA)
    private var digestContext: OpaquePointer? = nil  // EVP_MD_CTX for EdDSA, re-initialised per call
    private var eddsaKey: PKey? = nil
    private let algorithm: JWTAlgorithm

    init?(algorithm: JWTAlgorithm, material: JWTKey.Material) {
        self.algorithm = algorithm
        switch material {
        case .secret(let secret):
            guard algorithm.family == .hmac, let md = Digests.forAlgorithm(algorithm) else { return nil }
            guard let ctx = tt_hmac_new(secret.bytes.baseAddress, Int32(secret.count), md) else {
                OpenSSLError.clear()
                return nil
            }
            hmac = ctx
        case .pkey(let pkey):
            if algorithm == .eddsa {
                guard let ctx = EVP_MD_CTX_new() else { return nil }
                digestContext = ctx
                eddsaKey = pkey
                return
            }
            guard let ctx = EVP_PKEY_CTX_new_from_pkey(nil, pkey.pointer, nil) else { return nil }
            var ok = EVP_PKEY_verify_init(ctx) == 1
            switch algorithm.family {
            case .rsa:
                ok = ok && EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_PADDING) == 1
            case .rsaPSS:
                ok = ok && EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_PSS_PADDING) == 1
                    && EVP_PKEY_CTX_set_rsa_pss_saltlen(ctx, RSA_PSS_SALTLEN_DIGEST) == 1
            default:
                break
            }
            ok = ok && EVP_PKEY_CTX_set_signature_md(ctx, Digests.forAlgorithm(algorithm)) == 1
            if algorithm.family == .rsaPSS {
                ok = ok && EVP_PKEY_CTX_set_rsa_mgf1_md(ctx, Digests.forAlgorithm(algorithm)) == 1
            }
            guard ok else {
                EVP_PKEY_CTX_free(ctx)
                OpenSSLError.clear()
                return nil
            }
            pkeyContext = ctx
        }
    }

    deinit {
        if let hmac { tt_hmac_free(hmac) }
        if let pkeyContext { EVP_PKEY_CTX_free(pkeyContext) }
        if let digestContext { EVP_MD_CTX_free(digestContext) }
    }

    func verify(message: UnsafeRawBufferPointer, signature: UnsafeRawBufferPointer) -> Bool {
        let input = message.baseAddress?.assumingMemoryBound(to: UInt8.self)
        let sig = signature.baseAddress?.assumingMemoryBound(to: UInt8.self)
        if let ctx = hmac {
            return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 64) { out -> Bool in
                var length: UInt32 = 0
                guard let base = out.baseAddress, tt_hmac_compute(ctx, input, message.count, base, &length) == 1,
                    Int(length) == signature.count, let sig
                else {
                    OpenSSLError.clear()
                    return false
                }
                return CRYPTO_memcmp(base, sig, Int(length)) == 0
            }
        }
        if let ctx = digestContext, let pkey = eddsaKey {
            guard EVP_DigestVerifyInit_ex(ctx, nil, nil, nil, nil, pkey.pointer, nil) == 1 else {
                OpenSSLError.clear()
                return false
            }
            let ok = EVP_DigestVerify(ctx, sig, signature.count, input, message.count) == 1
            if !ok { OpenSSLError.clear() }
            return ok
        }
        guard let ctx = pkeyContext else { return false }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 64) { digest -> Bool in
                var length: UInt32 = 0
                guard let base = digest.baseAddress,
                    EVP_Digest(input, message.count, base, &length, Digests.forAlgorithm(algorithm), nil) == 1
                else {
                    OpenSSLError.clear()
                    return false
                }
                let ok: Bool
                if algorithm.family == .ecdsa, let curve = algorithm.curve {
                    guard let der = ECDSASignature.derFromRaw(signature, coordinateLength: curve.coordinateLength) else { return false }
                    ok = der.withUnsafeBufferPointer { EVP_PKEY_verify(ctx, $0.baseAddress, $0.count, base, Int(length)) } == 1
                } else {
                    ok = EVP_PKEY_verify(ctx, sig, signature.count, base, Int(length)) == 1
                }
                if !ok { OpenSSLError.clear() }
                return ok
            }
    }
}
