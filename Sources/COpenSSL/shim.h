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

// Pre-keyed HMAC contexts: HMAC_CTX re-initialised with HMAC_Init_ex(ctx, NULL, 0, NULL, NULL)
// is the fastest keyed HMAC in OpenSSL 3.0 (about 2x EVP_MAC_CTX_dup). The API is deprecated
// but supported throughout 3.x; these wrappers keep the deprecation in one place.
static inline void *tt_hmac_new(const void *key, int key_len, const EVP_MD *md) {
    HMAC_CTX *ctx = HMAC_CTX_new();
    if (ctx == NULL) return NULL;
    if (HMAC_Init_ex(ctx, key, key_len, md, NULL) != 1) { HMAC_CTX_free(ctx); return NULL; }
    return ctx;
}
static inline int tt_hmac_compute(void *ctx, const unsigned char *data, size_t len, unsigned char *out, unsigned int *out_len) {
    HMAC_CTX *c = (HMAC_CTX *)ctx;
    if (HMAC_Init_ex(c, NULL, 0, NULL, NULL) != 1) return 0;
    if (HMAC_Update(c, data, len) != 1) return 0;
    return HMAC_Final(c, out, out_len);
}
static inline void tt_hmac_free(void *ctx) { HMAC_CTX_free((HMAC_CTX *)ctx); }

#endif
