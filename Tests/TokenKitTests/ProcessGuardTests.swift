import CTestProcess
import Foundation
import TestSupport
import Testing

/// The test binary starts many processes with Foundation's `Process.run()`, which on Linux lists
/// `/proc/self/fd` and, in Swift 6.3, copies 256 bytes from each record's name wherever the record
/// ends (swift-corelibs-foundation pull request 5472): past glibc's buffer with ≈ 1,350
/// descriptors open, a SIGSEGV in a CI run of this suite. The test binary's own `readdir`
/// (`Tests/CTestProcess`) returns a whole-size copy of a record whose name field would end past
/// its page; this checks that it is the `readdir` the process uses, on the threads that start
/// processes, and that Process.run() works with more descriptors open than the crash had.
@Suite("Process.run() in the tests")
struct ProcessGuardTests {
    @Test func readdirHandsOutWholeRecordsAtPageEnds() async throws {
        // 1,400 more descriptors than the test process has: /proc/self/fd fills glibc's buffer.
        let pipes = (0..<700).map { _ in Pipe() }
        defer {
            for pipe in pipes {
                try? pipe.fileHandleForReading.close()
                try? pipe.fileHandleForWriting.close()
            }
        }
        #expect(tokentool_readdir_copies_records_at_page_ends() == 1, "on a thread of the concurrency pool")
        let onDispatch = try await offThePool { tokentool_readdir_copies_records_at_page_ends() }
        #expect(onDispatch == 1, "on a Dispatch thread (run(_:_:) and runDetached start processes there)")
        for _ in 0..<20 {
            let result = try await runDetached(URL(fileURLWithPath: "/bin/true"), [])
            #expect(result.status == 0)
        }
    }
}
