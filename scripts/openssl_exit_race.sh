#!/usr/bin/env bash
# The system OpenSSL's exit-time cleanup against threads that leave as the process exits (the
# crash COpenSSLProcess prevents; Sources/COpenSSLProcess). A C program
# starts 8 threads that each draw random bytes (OpenSSL 3 gives each thread its own generators,
# freed when the thread ends) and end a few microseconds apart, and exits as they end; run RUNS
# times with OpenSSL's cleanup at exit as it comes, then RUNS times initialised with
# OPENSSL_INIT_NO_ATEXIT, as every program that links TokenKit now is. Prints how many runs of
# each ended otherwise than with status 0, and the messages they left.
# Usage: scripts/openssl_exit_race.sh [RUNS]   (default 3000; needs cc and libssl-dev)
set -euo pipefail
runs="${1:-3000}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/race.c" <<'C'
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
static int delay_us;
static void *worker(void *arg) {
    unsigned char bytes[64];
    RAND_priv_bytes(bytes, sizeof bytes);
    RAND_bytes(bytes, sizeof bytes);
    usleep(delay_us + (int)(long)arg);
    return NULL;
}
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    if (atoi(argv[2])) OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
    unsigned char bytes[16];
    RAND_priv_bytes(bytes, sizeof bytes);
    delay_us = atoi(argv[1]);
    for (long i = 0; i < 8; i++) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, worker, (void *)(i * 3)) == 0) pthread_detach(thread);
    }
    usleep(delay_us + 10);
    exit(0);
}
C
cc -O2 -o "$work/race" "$work/race.c" -lcrypto -lpthread
for skip in 0 1; do
    failed=0
    : > "$work/stderr"
    for i in $(seq 1 "$runs"); do
        "$work/race" $(( (i % 40) * 5 + 100 )) "$skip" 2>>"$work/stderr" || failed=$((failed + 1))
    done 2>/dev/null  # the shell's own "Segmentation fault" lines
    label=$([ "$skip" = 1 ] && echo "OPENSSL_INIT_NO_ATEXIT" || echo "OpenSSL's cleanup at exit")
    echo "$label: $failed of $runs runs failed"
    tr -s '\n' < "$work/stderr" | sort | uniq -c | sed 's/^/  /'
done
echo "OpenSSL: $(openssl version 2>/dev/null || echo unknown)"
