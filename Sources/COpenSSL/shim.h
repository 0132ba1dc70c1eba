// The parts of OpenSSL 3 that TokenKit calls. Internal to the package: imported with
// `internal import COpenSSL`, never in a public signature.
#ifndef TOKENTOOL_COPENSSL_SHIM_H
#define TOKENTOOL_COPENSSL_SHIM_H

#define OPENSSL_SUPPRESS_DEPRECATED 1
#include <openssl/opensslv.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/rsa.h>
#include <openssl/ec.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/param_build.h>
#include <openssl/rand.h>
#include <openssl/hmac.h>
#include <openssl/pkcs12.h>

// OPENSSL_free is a macro; Swift cannot call it.
static inline void tt_openssl_free(void *p) { OPENSSL_free(p); }

// Composite selection macros for EVP_PKEY_fromdata.
static inline int tt_select_public_key(void) { return EVP_PKEY_PUBLIC_KEY; }
static inline int tt_select_keypair(void) { return EVP_PKEY_KEYPAIR; }

#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>

// A one-shot SHA-2 digest on a stack context. EVP_Digest allocates a context and a provider
// context per call, and in 3.0 the one-shot SHA256() fetches the algorithm by name each time; the
// low-level Init/Update/Final run the same assembly without either. Returns the digest length,
// 0 for an unsupported length.
static inline int tt_sha2(int hash_length, const unsigned char *data, size_t len, unsigned char *out) {
    int ok;
    if (hash_length == 32) {
        SHA256_CTX c;
        ok = SHA256_Init(&c) && SHA256_Update(&c, data, len) && SHA256_Final(out, &c);
    } else if (hash_length == 48 || hash_length == 64) {
        SHA512_CTX c;
        ok = hash_length == 48 ? (SHA384_Init(&c) && SHA384_Update(&c, data, len) && SHA384_Final(out, &c))
                               : (SHA512_Init(&c) && SHA512_Update(&c, data, len) && SHA512_Final(out, &c));
    } else {
        return 0;
    }
    return ok ? hash_length : 0;
}

// Keyed HMAC (RFC 2104) from SHA-2 states precomputed once per key: the inner state after
// absorbing key XOR ipad, the outer state after key XOR opad. Per message, a copy of each state on
// the stack finishes the two hashes: no allocation, no provider dispatch, no lock (the key object
// is only read). OpenSSL 3.0's HMAC_CTX re-initialisation duplicates a provider context twice per
// message (two mallocs); this is about 20% faster and thread-safe. The low-level SHA-2 functions
// are deprecated in 3.0 but run the same assembly (SHA-NI where present). The digests must match
// OpenSSL's HMAC(): HMACKeyTests compares them for every key-length class, with an RFC 4231
// vector; WycheproofTests runs the Wycheproof HMAC vectors through the verifier.
typedef struct tt_hmac_key {
    int hash_length;  // 32 (SHA-256), 48 (SHA-384) or 64 (SHA-512)
    union {
        struct { SHA256_CTX inner, outer; } sha256;
        struct { SHA512_CTX inner, outer; } sha512;
    } state;
} tt_hmac_key;

// NULL for an unsupported hash length or when out of memory.
static inline void *tt_hmac_key_new(const unsigned char *key, size_t key_len, int hash_length) {
    if (hash_length != 32 && hash_length != 48 && hash_length != 64) return NULL;
    // Whole cache lines: the states are read on every token, possibly next to another thread's
    // objects whose reference counts are written.
    size_t size = (sizeof(tt_hmac_key) + 63) & ~(size_t)63;
    tt_hmac_key *k = (tt_hmac_key *)aligned_alloc(64, size);
    if (k == NULL) return NULL;
    memset(k, 0, size);
    k->hash_length = hash_length;
    size_t block = hash_length == 32 ? 64 : 128;
    unsigned char padded[128] = {0};
    unsigned char pad[128];
    // A key longer than the block is replaced by its hash (RFC 2104 §2).
    if (key_len > block) {
        if (tt_sha2(hash_length, key, key_len, padded) != hash_length) { OPENSSL_cleanse(padded, sizeof(padded)); free(k); return NULL; }
    } else if (key_len > 0) {
        memcpy(padded, key, key_len);
    }
    // The inner state absorbs key XOR 0x36, the outer key XOR 0x5c (RFC 2104 §2).
    const unsigned char bytes[2] = {0x36, 0x5c};
    for (int which = 0; which < 2; which++) {
        for (size_t i = 0; i < block; i++) pad[i] = padded[i] ^ bytes[which];
        if (hash_length == 32) {
            SHA256_CTX *c = which == 0 ? &k->state.sha256.inner : &k->state.sha256.outer;
            SHA256_Init(c);
            SHA256_Update(c, pad, block);
        } else {
            SHA512_CTX *c = which == 0 ? &k->state.sha512.inner : &k->state.sha512.outer;
            if (hash_length == 48) SHA384_Init(c); else SHA512_Init(c);
            SHA512_Update(c, pad, block);
        }
    }
    OPENSSL_cleanse(padded, sizeof(padded));
    OPENSSL_cleanse(pad, sizeof(pad));
    return k;
}

// Writes the MAC of data to out (at least 64 bytes) and returns its length, 0 on failure.
static inline int tt_hmac_key_compute(const void *key, const unsigned char *data, size_t len, unsigned char *out) {
    const tt_hmac_key *k = (const tt_hmac_key *)key;
    unsigned char inner[64];
    int ok;
    if (k->hash_length == 32) {
        SHA256_CTX c = k->state.sha256.inner;
        ok = SHA256_Update(&c, data, len) && SHA256_Final(inner, &c);
        c = k->state.sha256.outer;
        ok = ok && SHA256_Update(&c, inner, 32) && SHA256_Final(out, &c);
        OPENSSL_cleanse(&c, sizeof(c));
    } else {
        SHA512_CTX c = k->state.sha512.inner;
        // SHA384_Final writes 48 bytes, SHA512_Final 64; SHA384_Update is SHA512_Update.
        ok = SHA512_Update(&c, data, len) && (k->hash_length == 48 ? SHA384_Final(inner, &c) : SHA512_Final(inner, &c));
        c = k->state.sha512.outer;
        ok = ok && SHA512_Update(&c, inner, (size_t)k->hash_length)
            && (k->hash_length == 48 ? SHA384_Final(out, &c) : SHA512_Final(out, &c));
        OPENSSL_cleanse(&c, sizeof(c));
    }
    OPENSSL_cleanse(inner, sizeof(inner));
    return ok ? k->hash_length : 0;
}

static inline void tt_hmac_key_free(void *key) {
    if (key == NULL) return;
    OPENSSL_cleanse(key, sizeof(tt_hmac_key));
    free(key);
}

// ECDSA P-256 signing with each nonce's expensive part done before the message is known
// (PeerCA's P256Presigner). An ECDSA signature is r = (kG).x mod n and s = k^-1 (z + r d) mod n:
// kG and k^-1 (≈ 20 µs here) do not depend on the message z, so ECDSA_sign_setup computes them
// for a fresh random k ahead of time and ECDSA_do_sign_ex finishes a signature from them in
// under 1 µs. Each (k^-1, r) pair must sign one message only (two signatures with one k give the
// private key away): the caller takes each pair out of its store before using it and frees it
// with BN_clear_free after (and the key with EC_KEY_free). The EC_KEY calls are deprecated in 3.0 and present in every 3.x.

// A P-256 signing key from its 32-byte private scalar (big-endian); NULL if it is not one.
static inline EC_KEY *tt_p256_signing_key_new(const unsigned char *scalar32) {
    EC_KEY *key = EC_KEY_new_by_curve_name(NID_X9_62_prime256v1);
    BIGNUM *d = BN_bin2bn(scalar32, 32, NULL);
    EC_POINT *q = NULL;
    int ok = key != NULL && d != NULL && !BN_is_zero(d);
    if (ok) {
        const EC_GROUP *group = EC_KEY_get0_group(key);
        q = EC_POINT_new(group);
        ok = q != NULL && EC_POINT_mul(group, q, d, NULL, NULL, NULL) == 1 && EC_KEY_set_private_key(key, d) == 1
            && EC_KEY_set_public_key(key, q) == 1 && EC_KEY_check_key(key) == 1;
    }
    EC_POINT_free(q);
    BN_clear_free(d);
    if (!ok) {
        EC_KEY_free(key);
        ERR_clear_error();
        return NULL;
    }
    return key;
}

// The most pairs tt_ecdsa_presign_batch computes in one call.
enum { TT_PRESIGN_BATCH_MAX = 64 };

// Replaces each of values[0..<count] (non-zero, in `mont`'s Montgomery form, modulo the prime `m`)
// by its inverse, in the same form, with one inversion for the whole batch (Montgomery's trick:
// prefix_i = values_0...values_i, then three multiplications per element on the way back). The
// one inversion is by Fermat's little theorem, with BN_mod_exp_mont_consttime. `prefix` holds
// `count` BIGNUMs the caller owns (scratch). 1, or 0 on failure.
static inline int tt_mont_batch_invert(BIGNUM **values, BIGNUM **prefix, int count, const BIGNUM *m, BN_MONT_CTX *mont, BN_CTX *ctx) {
    BN_CTX_start(ctx);
    BIGNUM *exponent = BN_CTX_get(ctx), *inverse = BN_CTX_get(ctx), *t = BN_CTX_get(ctx);
    int ok = t != NULL;
    for (int i = 0; ok && i < count; i++)
        ok = i == 0 ? BN_copy(prefix[0], values[0]) != NULL : BN_mod_mul_montgomery(prefix[i], prefix[i - 1], values[i], mont, ctx) == 1;
    if (ok)
        ok = BN_copy(exponent, m) != NULL && BN_sub_word(exponent, 2) == 1 && BN_from_montgomery(t, prefix[count - 1], mont, ctx) == 1
            && BN_mod_exp_mont_consttime(inverse, t, exponent, m, ctx, mont) == 1 && BN_to_montgomery(inverse, inverse, mont, ctx) == 1;
    for (int i = count - 1; ok && i >= 0; i--) {
        // t = 1 / values_i, then inverse = 1 / prefix_{i-1}.
        ok = (i == 0 ? BN_copy(t, inverse) != NULL : BN_mod_mul_montgomery(t, inverse, prefix[i - 1], mont, ctx) == 1)
            && (i == 0 || BN_mod_mul_montgomery(inverse, inverse, values[i], mont, ctx) == 1)
            && BN_copy(values[i], t) != NULL;
    }
    if (t != NULL) {
        BN_clear(inverse);
        BN_clear(t);
    }
    BN_CTX_end(ctx);
    return ok;
}

// Computes `count` (1...TT_PRESIGN_BATCH_MAX) fresh nonces for `key` (a P-256 key) at once, each as
// the pair (k^-1 mod n, r = (kG).x mod n) that ECDSA_do_sign_ex finishes a signature from.
//
// One nonce alone (ECDSA_sign_setup) pays a field inversion (kG's affine x) and an inversion
// modulo the order (k^-1) besides the point multiplication; here both inversions are shared by the
// batch (tt_mont_batch_invert), and the random bytes come from one RAND_priv_bytes call.
// - each k: 40 random bytes reduced modulo n (a bias below 2^-64, like FIPS 186-5 A.3.1's
//   extra-bits method); a zero k, a point at infinity or a zero r fails the whole batch;
// - kG: EC_POINT_mul, OpenSSL's constant-time path for P-256, left in Jacobian coordinates;
// - r_i = X_i / Z_i^2 mod p, reduced mod n; k_i^-1 in the order's Montgomery domain.
// On success the new BIGNUMs are in kinvs[0..<count] and rs[0..<count] (the caller clears and
// frees each with BN_clear_free) and it returns 1; on failure it writes nothing and returns 0.
// Every intermediate is cleared before it is freed.
static inline int tt_ecdsa_presign_batch(EC_KEY *key, int count, BIGNUM **kinvs, BIGNUM **rs) {
    if (count < 1 || count > TT_PRESIGN_BATCH_MAX || key == NULL) return 0;
    const EC_GROUP *group = EC_KEY_get0_group(key);
    const BIGNUM *order = group != NULL ? EC_GROUP_get0_order(group) : NULL;
    if (order == NULL) return 0;
    enum { N = TT_PRESIGN_BATCH_MAX, RANDOM_BYTES = 40 };
    unsigned char random[N * RANDOM_BYTES];
    BIGNUM *k[N] = {0}, *x[N] = {0}, *z[N] = {0}, *prefix[N] = {0}, *kinv[N] = {0}, *r[N] = {0};
    BIGNUM *p = BN_new(), *t = BN_new();
    BN_MONT_CTX *montP = BN_MONT_CTX_new(), *montN = BN_MONT_CTX_new();
    BN_CTX *ctx = BN_CTX_new();
    // One point for the whole batch: each kG's coordinates are copied out before the next.
    EC_POINT *point = EC_POINT_new(group);
    int ok = p != NULL && t != NULL && montN != NULL && montP != NULL && ctx != NULL && point != NULL
        && EC_GROUP_get_curve(group, p, NULL, NULL, ctx) == 1 && BN_MONT_CTX_set(montP, p, ctx) == 1
        && BN_MONT_CTX_set(montN, order, ctx) == 1 && RAND_priv_bytes(random, count * RANDOM_BYTES) == 1;
    for (int i = 0; ok && i < count; i++) {
        k[i] = BN_new(); x[i] = BN_new(); z[i] = BN_new(); prefix[i] = BN_new(); kinv[i] = BN_new(); r[i] = BN_new();
        ok = k[i] != NULL && x[i] != NULL && z[i] != NULL && prefix[i] != NULL && kinv[i] != NULL && r[i] != NULL
            && BN_bin2bn(random + i * RANDOM_BYTES, RANDOM_BYTES, k[i]) != NULL && BN_nnmod(k[i], k[i], order, ctx) == 1 && !BN_is_zero(k[i]);
        if (ok) {
            BN_set_flags(k[i], BN_FLG_CONSTTIME);
            ok = EC_POINT_mul(group, point, k[i], NULL, NULL, ctx) == 1
                && EC_POINT_get_Jprojective_coordinates_GFp(group, point, x[i], NULL, z[i], ctx) == 1 && !BN_is_zero(z[i])
                && BN_to_montgomery(z[i], z[i], montP, ctx) == 1;
        }
    }
    // z_i becomes 1 / Z_i (Montgomery form); r_i = X_i / Z_i^2 mod p, reduced mod n.
    ok = ok && tt_mont_batch_invert(z, prefix, count, p, montP, ctx);
    for (int i = 0; ok && i < count; i++)
        ok = BN_mod_mul_montgomery(t, z[i], z[i], montP, ctx) == 1     // 1 / Z_i^2, Montgomery form
            && BN_mod_mul_montgomery(t, t, x[i], montP, ctx) == 1       // X_i / Z_i^2, plain
            && BN_nnmod(r[i], t, order, ctx) == 1 && !BN_is_zero(r[i]);
    // k_i^-1 mod n the same way, in the order's Montgomery domain (z_i now holds k_i there).
    for (int i = 0; ok && i < count; i++) ok = BN_to_montgomery(z[i], k[i], montN, ctx) == 1;
    ok = ok && tt_mont_batch_invert(z, prefix, count, order, montN, ctx);
    for (int i = 0; ok && i < count; i++) ok = BN_from_montgomery(kinv[i], z[i], montN, ctx) == 1 && !BN_is_zero(kinv[i]);
    OPENSSL_cleanse(random, sizeof random);
    EC_POINT_clear_free(point);
    for (int i = 0; i < count; i++) {
        BN_clear_free(k[i]); BN_clear_free(x[i]); BN_clear_free(z[i]); BN_clear_free(prefix[i]);
        if (ok) {
            kinvs[i] = kinv[i];
            rs[i] = r[i];
        } else {
            BN_clear_free(kinv[i]); BN_clear_free(r[i]);
        }
    }
    BN_free(p); BN_clear_free(t);
    BN_MONT_CTX_free(montP); BN_MONT_CTX_free(montN);
    BN_CTX_free(ctx);
    if (!ok) ERR_clear_error();
    return ok;
}

// Signs a digest with a presigned nonce and writes r || s (32 bytes each) to out64: 1, or 0.
static inline int tt_ecdsa_sign_presigned(EC_KEY *key, const unsigned char *digest, int digest_len, const BIGNUM *kinv, const BIGNUM *r,
                                          unsigned char *out64) {
    ECDSA_SIG *sig = ECDSA_do_sign_ex(digest, digest_len, kinv, r, key);
    if (sig == NULL) {
        ERR_clear_error();
        return 0;
    }
    const BIGNUM *sig_r = NULL, *sig_s = NULL;
    ECDSA_SIG_get0(sig, &sig_r, &sig_s);
    int ok = BN_bn2binpad(sig_r, out64, 32) == 32 && BN_bn2binpad(sig_s, out64 + 32, 32) == 32;
    ECDSA_SIG_free(sig);
    return ok;
}

#endif
