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

#endif
