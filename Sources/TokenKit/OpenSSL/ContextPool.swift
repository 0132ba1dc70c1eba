internal import COpenSSL
import Synchronization

/// A pre-initialised OpenSSL context for one key and one algorithm, so that per token only the
/// hash and the verification run (no `EVP_DigestVerifyInit`, no HMAC key schedule).
///
/// A verifier has one pool per key, algorithm and shard (stripe of threads), so the slot is
/// normally used by one thread. OpenSSL contexts must not be used by two threads at once: when the
/// slot is busy the call uses a fresh context instead of waiting. HMAC keys need no context: their
/// precomputed states (``HMACKey``) are only read.
final class ContextPool: Sendable {
    private let slot = Mutex(Slot())
    private let padding = CacheLinePadding()
    let algorithm: JWTAlgorithm
    private let key: JWTKeyStorage
    /// For HS*: the key's precomputed HMAC states, shared by all threads (only read), so HMAC
    /// verification takes no lock and no context.
    private let hmac: HMACKey?

    convenience init(algorithm: JWTAlgorithm, key: JWTKey) {
        self.init(algorithm: algorithm, storage: key.storage)
    }

    private init(algorithm: JWTAlgorithm, storage: JWTKeyStorage) {
        self.algorithm = algorithm
        self.key = storage
        if algorithm.family == .hmac, case .secret(let secret) = storage.material {
            hmac = HMACKey(algorithm, secret: secret)
        } else {
            hmac = nil
        }
    }

    /// Verifies `signature` over `message` (signature length already checked by the caller).
    func verify(message: UnsafeRawBufferPointer, signature: UnsafeRawBufferPointer) -> Bool {
        if let hmac { return hmac.verify(message: message, signature: signature) }
        let result = slot.withLockIfAvailable { slot -> Bool? in
            if slot.context == nil { slot.context = VerifyContext(algorithm: algorithm, material: key.material) }
            guard let context = slot.context else { return nil }
            return context.verify(message: message, signature: signature)
        }
        if let result, let result { return result }
        // Busy slot (or context creation failed there): a one-off context.
        guard let context = VerifyContext(algorithm: algorithm, material: key.material) else { return false }
        return context.verify(message: message, signature: signature)
    }

    struct Slot: ~Copyable {
        var context: VerifyContext? = nil
    }

    /// A pool for the same key and algorithm with its own slot and HMAC states (for another shard).
    func copy() -> ContextPool { ContextPool(algorithm: algorithm, storage: key) }
}

/// An HMAC key for HS256/384/512 with its inner and outer SHA-2 states computed once
/// (`tt_hmac_key_new`); each MAC copies them to the stack. The C object is wiped and freed with
/// this object.
///
/// `@unchecked Sendable` is safe: the states are written only in `init` and then only read.
final class HMACKey: @unchecked Sendable {
    private let key: UnsafeMutableRawPointer
    let length: Int
    private let padding = CacheLinePadding()

    init?(_ algorithm: JWTAlgorithm, secret: SecretBytes) {
        guard algorithm.family == .hmac else { return nil }
        let bytes = secret.bytes
        guard let key = tt_hmac_key_new(bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count, Int32(algorithm.hashLength)) else {
            return nil
        }
        self.key = key
        length = algorithm.hashLength
    }

    deinit { tt_hmac_key_free(key) }

    /// Calls `body` with the MAC of `message` (in a stack buffer); nil if hashing failed.
    func withMAC<R>(_ message: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) -> R) -> R? {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 64) { out -> R? in
            guard let base = out.baseAddress else { return nil }
            let produced = tt_hmac_key_compute(key, message.baseAddress?.assumingMemoryBound(to: UInt8.self), message.count, base)
            guard produced == Int32(length) else { return nil }
            return body(UnsafeRawBufferPointer(start: base, count: length))
        }
    }

    /// Constant-time comparison of the MAC of `message` with `signature`.
    func verify(message: UnsafeRawBufferPointer, signature: UnsafeRawBufferPointer) -> Bool {
        guard signature.count == length, let sig = signature.baseAddress else { return false }
        return withMAC(message) { mac in mac.baseAddress.map { CRYPTO_memcmp($0, sig, length) == 0 } ?? false } ?? false
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
    private var pkeyContext: OpaquePointer? = nil  // EVP_PKEY_CTX, verify-initialised (RSA, PSS, ECDSA)
    private var digestContext: OpaquePointer? = nil  // EVP_MD_CTX for EdDSA, re-initialised per call
    private var eddsaKey: PKey? = nil
    private let algorithm: JWTAlgorithm

    init?(algorithm: JWTAlgorithm, material: JWTKey.Material) {
        self.algorithm = algorithm
        switch material {
        case .secret:
            return nil  // HMAC keys use HMACKey
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
        if let pkeyContext { EVP_PKEY_CTX_free(pkeyContext) }
        if let digestContext { EVP_MD_CTX_free(digestContext) }
    }

    func verify(message: UnsafeRawBufferPointer, signature: UnsafeRawBufferPointer) -> Bool {
        let input = message.baseAddress?.assumingMemoryBound(to: UInt8.self)
        let sig = signature.baseAddress?.assumingMemoryBound(to: UInt8.self)
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
                guard let base = digest.baseAddress else { return false }
                let length = tt_sha2(Int32(algorithm.hashLength), input, message.count, base)
                guard length == Int32(algorithm.hashLength) else {
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
