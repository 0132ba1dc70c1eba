import CExitProbe
import Foundation
import TestSupport
import Testing
@testable import TokenKit

/// OpenSSL's state outlives every atexit handler (`COpenSSLProcess`): a thread that leaves, or
/// is inside an OpenSSL call, while the process exits finds it intact. With OpenSSL's own cleanup
/// at exit, a C program whose threads drew random bytes and ended as it exited crashed in 159 and
/// 306 of 3,000 runs here (glibc's "double free or corruption (fasttop)", SIGSEGV;
/// `scripts/openssl_exit_race.sh`); with it skipped, in none.
#if os(Linux)
@Suite("OpenSSL at process exit")
struct OpenSSLExitTests {
    @Test func openSSLIsInitialisedWithoutItsExitCleanup() {
        #expect(OpenSSLProcess.exitCleanupSkipped)
    }

    /// A new process of this test binary, started with `--tokentool-exit-probe`, runs
    /// `CExitProbe`: a constructor (after
    /// `COpenSSLProcess`'s) registers an atexit handler, draws random bytes — the process's first
    /// use of OpenSSL's generator — and exits. The handler runs after any handler registered later,
    /// OpenSSL's cleanup included, and draws again: "exit-probe 1" when the generator still works.
    /// Without `COpenSSLProcess`, that first draw registers the cleanup, and the process crashes.
    @Test func openSSLStillWorksAfterEveryExitHandler() throws {
        // /proc/self/exe as it is: the child execs the same file (resolved, the path would name
        // "… (deleted)" if the binary were relinked during the run). A child killed by a signal
        // reads as that signal's number, never 0.
        let (status, out, _) = try run(URL(fileURLWithPath: "/proc/self/exe"), [String(cString: tokentool_exit_probe_argument())])
        #expect(status == 0, "the probe process ended with status or signal \(status)")
        #expect(out == "exit-probe 1\n")
    }
}
#endif
