import Foundation
import PeerCA
import TestSupport
import Testing

/// The SQLite ledger writes each batch (its transaction and flush) at a raised priority where the
/// process may, and puts the writing thread's priority back afterwards.
@Suite("The ledger writer's priority", .enabled(if: FileManager.default.fileExists(atPath: "/proc/thread-self/stat")))
struct WriterPriorityTests {
    private func threadNice() throws -> Int { try threadScheduling().nice }

    @Test func aBatchRunsTenNiceLevelsHigherAndThePriorityIsPutBack() throws {
        let own = try threadNice()
        let (inside, counters) = try SQLiteLedger.withRaisedPriority { (try threadNice(), SQLiteLedger.writerBoostCounters) }
        #expect(try threadNice() == own, "the thread's priority was not put back")
        switch counters.state {
        case .on: #expect(inside == max(-20, own - 10))
        // TOKENTOOL_WRITER_BOOST=0, or not permitted here (no CAP_SYS_NICE, RLIMIT_NICE): the
        // thread was left as it was.
        case .offByEnvironment, .refused: #expect(inside == own)
        }
    }

    @Test func theLedgersBatchesAreWrittenAtTheRaisedPriority() async throws {
        let path = try temporaryDirectory().appendingPathComponent("ledger.sqlite").path
        let ledger = try SQLiteLedger(path: path)
        let before = SQLiteLedger.writerBoostCounters
        for index in 0..<3 { try await ledger.record(entry(String(format: "7%03x", index)), claiming: nil) }
        let after = SQLiteLedger.writerBoostCounters
        // Each batch asks, whether or not the kernel lets it.
        #expect(after.attempts >= before.attempts + 3)
        if after.state == .on { #expect(after.boosted >= before.boosted + 3) }
    }
}
