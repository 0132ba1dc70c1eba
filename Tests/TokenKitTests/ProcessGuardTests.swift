import CTestProcess
import Foundation
import TestSupport
import Testing

/// The test binary starts many processes with Foundation's `Process.run()`, which on Linux lists
/// `/proc/self/fd` and, in Swift 6.3, reads up to 256 bytes past a directory record
/// (swift-corelibs-foundation pull request 5472): a SIGSEGV in a CI run of this suite. The
/// `CTestProcess` constructor gives each directory buffer a mapping of its own, with room for that
/// read; this checks it holds on the threads that start processes.
@Suite("Process.run() in the tests")
struct ProcessGuardTests {
    @Test func directoryBuffersHaveRoomForFoundationsOverRead() async throws {
        #expect(tokentool_directory_buffer_is_mapped() == 1, "on a thread of the concurrency pool")
        let onDispatch = try await offThePool { tokentool_directory_buffer_is_mapped() }
        #expect(onDispatch == 1, "on a Dispatch thread (run(_:_:) and runDetached start processes there)")
        // And Process.run() itself, with a few hundred more descriptors open than the test process has.
        let pipes = (0..<200).map { _ in Pipe() }
        defer { for pipe in pipes { try? pipe.fileHandleForReading.close(); try? pipe.fileHandleForWriting.close() } }
        for _ in 0..<20 {
            let result = try await runDetached(URL(fileURLWithPath: "/bin/true"), [])
            #expect(result.status == 0)
        }
    }
}
