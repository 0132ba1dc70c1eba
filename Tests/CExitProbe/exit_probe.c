// See include/CExitProbe.h.
//
// Started with --tokentool-exit-probe as its first argument, a constructor of the test binary (after every program constructor
// with an earlier priority: COpenSSLProcess's runs at 101) registers an atexit handler, uses
// OpenSSL's random generator, and exits. Handlers run in the reverse order of their registration,
// so if that first use of OpenSSL registered OpenSSL's own cleanup, the cleanup runs before the
// probe's handler, which then uses the generator again on freed state (a crash, or a failure).
// The handler writes "exit-probe 1" to standard output when the generator still works.
#include "CExitProbe.h"

#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char argument[] = "--tokentool-exit-probe";

const char *tokentool_exit_probe_argument(void) { return argument; }

static void probe_at_exit(void) {
    unsigned char bytes[16];
    int result = RAND_bytes(bytes, sizeof bytes);
    char line[32];
    int length = snprintf(line, sizeof line, "exit-probe %d\n", result);
    if (length > 0) (void)write(1, line, (size_t)length);
}

// glibc passes the program's arguments to its constructors.
__attribute__((constructor(65000))) static void probe(int argc, char **argv, char **envp) {
    (void)envp;
    if (argc < 2 || strcmp(argv[1], argument) != 0) return;
    if (atexit(probe_at_exit) != 0) _exit(4);
    unsigned char bytes[16];
    if (RAND_bytes(bytes, sizeof bytes) != 1) _exit(3);
    exit(0);
}
