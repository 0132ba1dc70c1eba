// See include/COpenSSLProcess.h.
#include "COpenSSLProcess.h"

#include <openssl/crypto.h>

static int exit_cleanup_skipped = 0;

// Priority 101, the earliest a program may use: before every constructor without a priority, so
// that no other constructor of the program initialises OpenSSL first (that first initialisation
// is the one that registers the cleanup, or not). Shared libraries' constructors run before any
// of the program's; none of the system OpenSSL's users here (libjwt) initialises it in one.
__attribute__((constructor(101))) static void openssl_without_exit_cleanup(void) {
#ifdef OPENSSL_INIT_NO_ATEXIT
    exit_cleanup_skipped = OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL) == 1;
#endif
}

int tokentool_openssl_exit_cleanup_skipped(void) { return exit_cleanup_skipped; }
