internal import COpenSSLProcess

/// The system OpenSSL's process-wide state, as TokenKit sets it up.
///
/// OpenSSL 3 frees its global state in an `atexit` handler while the process's other threads
/// still run; a thread that was leaving, or inside an OpenSSL call, then crashed the exiting
/// process (glibc's "double free or corruption", or SIGSEGV). TokenKit's C target
/// `COpenSSLProcess` initialises OpenSSL before `main` with `OPENSSL_INIT_NO_ATEXIT`, so no
/// cleanup runs at exit: every thread may use OpenSSL until the process is gone. That covers
/// every program that links TokenKit (PeerCA, the server, `tokentool`, `tokenbench`).
enum OpenSSLProcess {
    /// Whether the constructor's `OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL)` succeeded
    /// (false with an OpenSSL that lacks the option, or if the call failed). It also succeeds when
    /// something initialised OpenSSL earlier, with the cleanup: only a process that exits can tell
    /// (`OpenSSLExitTests` runs one).
    static var exitCleanupSkipped: Bool { tokentool_openssl_exit_cleanup_skipped() == 1 }
}
