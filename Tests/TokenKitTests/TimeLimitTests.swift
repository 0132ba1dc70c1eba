import Dispatch
import Synchronization
import Testing
@testable import TokenKit

/// TimeLimit.race: the first answer, at once, whether or not the rest ends when cancelled.
@Suite("Time limits")
struct TimeLimitTests {
    /// Work that ignores cancellation: a wait that ends only after 120 s (what a PostgreSQL query
    /// in flight on a stopped server does).
    static func stubborn() async -> String {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().asyncAfter(deadline: .now() + 120) { done.resume() }
        }
        return "late"
    }

    @Test func quickWorkAnswers() async {
        let answer = await TimeLimit.race(.seconds(60), fallback: "fallback") { "work" } timedOut: { "timer" }
        #expect(answer == "work")
    }

    @Test func theTimersAnswerDoesNotWaitForWorkThatIgnoresCancellation() async {
        let start = ContinuousClock.now
        let answer = await TimeLimit.race(.milliseconds(100), fallback: "fallback") { await Self.stubborn() } timedOut: { "timer" }
        #expect(answer == "timer")
        #expect(ContinuousClock.now - start < .seconds(60))
    }

    @Test func aTimerWithoutAnAnswerKeepsWaitingForTheWork() async {
        let reported = Atomic<Int>(0)
        let answer = await TimeLimit.race(.milliseconds(50), fallback: "fallback") {
            try? await Task.sleep(for: .milliseconds(400))
            return "work"
        } timedOut: {
            reported.add(1, ordering: .relaxed)
            return nil
        }
        #expect(answer == "work")
        #expect(reported.load(ordering: .relaxed) == 1)
    }

    /// A caller cancelled while work that ignores cancellation runs gets the fallback at once,
    /// also when it was cancelled before the race began.
    @Test func aCancelledCallerGetsTheFallbackAtOnce() async {
        let start = ContinuousClock.now
        let caller = Task { await TimeLimit.race(.seconds(600), fallback: "fallback") { await Self.stubborn() } timedOut: { "timer" } }
        try? await Task.sleep(for: .milliseconds(100))
        caller.cancel()
        #expect(await caller.value == "fallback")
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await TimeLimit.race(.seconds(600), fallback: "fallback") { await Self.stubborn() } timedOut: { "timer" }
        }
        #expect(await early.value == "fallback")
        #expect(ContinuousClock.now - start < .seconds(60))
    }
}
