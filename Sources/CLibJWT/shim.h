// libjwt 1.10 (Debian 12's libjwt-dev). Internal to the package.
#ifndef TOKENTOOL_CLIBJWT_SHIM_H
#define TOKENTOOL_CLIBJWT_SHIM_H

#include <jwt.h>

// libjwt 1.10's signature step. These functions are exported by libjwt.so.0 but declared only
// in its private header (libjwt/jwt-private.h of 1.10.x); jwt_decode() calls them after parsing
// the token with jansson. TokenKit's libjwt engine calls them directly so that libjwt checks the
// signature over the exact signing input our strict parser accepted, with the algorithm pinned by
// the key (jwt_set_alg), instead of letting jwt_decode take the algorithm from the token header.
//   head: the NUL-terminated signing input (strlen is used for its length)
//   sig:  the base64url signature segment, NUL-terminated
// They return 0 when the signature verifies, an errno value otherwise.
int jwt_verify_sha_hmac(jwt_t *jwt, const char *head, const char *sig);
int jwt_verify_sha_pem(jwt_t *jwt, const char *head, const char *sig_b64);

#endif
