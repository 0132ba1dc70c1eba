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

// OPENSSL_free is a macro; Swift cannot call it.
static inline void tt_openssl_free(void *p) { OPENSSL_free(p); }

// Composite selection macros for EVP_PKEY_fromdata.
static inline int tt_select_public_key(void) { return EVP_PKEY_PUBLIC_KEY; }
static inline int tt_select_keypair(void) { return EVP_PKEY_KEYPAIR; }

#endif
