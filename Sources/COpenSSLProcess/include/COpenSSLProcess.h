// OpenSSL's process-wide set-up for every target that calls the system OpenSSL (TokenKit, PeerCA,
// and libjwt through TokenKit). The declaration needs no OpenSSL header; openssl_process.c
// includes it.
#ifndef TOKENTOOL_COPENSSLPROCESS_H
#define TOKENTOOL_COPENSSLPROCESS_H

// OpenSSL 3 frees its global state (its library context, the random generators, the locks) in an
// atexit handler, OPENSSL_cleanup, while the process's other threads still run: a thread that
// leaves during it (its thread-local generators freed a second time: glibc's "double free or
// corruption (fasttop)") or that is inside an OpenSSL call (SIGSEGV) crashes the exiting process.
// Swift's concurrency pool and libdispatch end their threads whenever they like, so no owner of a
// thread can keep its OpenSSL calls out of the way of the exit. A constructor of this target,
// run before main and before anything in the program can first use OpenSSL, initialises it with
// OPENSSL_INIT_NO_ATEXIT: no cleanup at exit (the memory goes back with the process). Returns 1
// when that call succeeded, 0 when it failed or the OpenSSL built against predates the option
// (before 1.1.1b: the cleanup then still runs). A success does not prove the cleanup is off: the
// call also succeeds when something initialised OpenSSL before it (with the cleanup).
int tokentool_openssl_exit_cleanup_skipped(void);

#endif
