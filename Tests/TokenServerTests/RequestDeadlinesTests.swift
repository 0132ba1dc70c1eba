import Foundation
import PeerCA
import Synchronization
import TestSupport
import Testing
import TokenKit
@testable import TokenServer

/// The request timeout: one watchdog for all requests instead of a timer each.
///
/// The bounds are wide on purpose: the watchdog and the work run on Swift's concurrency pool,
/// which other tests hold for many seconds at a time on a 2-core machine (TestSupport's `run`
/// blocks a pool thread while a child process runs): a fresh-clone CI run saw a 200 ms deadline
/// answered after 25 s. What is asserted is the outcome: work that would take 10 minutes is cut
/// short and answered 503, quick work is answered itself.
@Suite("Request deadlines")
struct RequestDeadlinesTests {
    /// Counts work that saw its cancellation.
    final class Cancellations: Sendable {
        let count = Atomic<Int>(0)
    }

    static func slow(_ cancellations: Cancellations) -> @Sendable () async -> ServiceResponse {
        {
            do {
                try await Task.sleep(for: .seconds(600))
                return .json(200, .string("late"))
            } catch {
                cancellations.count.add(1, ordering: .relaxed)
                return .json(200, .string("cancelled"))
            }
        }
    }

    /// The caller's answer, or nil when none came within `limit`: a regression fails the test
    /// then, instead of holding it until the slow work's 600 s are up (the caller is left to end).
    static func answer(of caller: Task<ServiceResponse, Never>, within limit: Duration = .seconds(120)) async -> ServiceResponse? {
        let answer = Mutex<ServiceResponse?>(nil)
        Task { let reply = await caller.value; answer.withLock { $0 = reply } }
        _ = await eventually(within: limit, every: .milliseconds(10)) { answer.withLock { $0 != nil } }
        return answer.withLock { $0 }
    }

    @Test func workPastItsDeadlineIsCancelledAndAnswers503() async throws {
        let deadlines = RequestDeadlines(.milliseconds(200))
        let cancellations = Cancellations()
        let start = ContinuousClock.now
        let reply = try #require(await Self.answer(of: Task { await deadlines.run(Self.slow(cancellations)) }), "no answer at the deadline")
        let elapsed = ContinuousClock.now - start
        #expect(reply.status == 503)
        #expect(String(decoding: reply.body, as: UTF8.self).contains("\"timeout\""))
        #expect(elapsed >= .milliseconds(200) && elapsed < .seconds(300), "\(elapsed)")
        // The answer does not wait for the work to stop; it stops soon after.
        #expect(await eventually(within: .seconds(60), every: .milliseconds(100)) { cancellations.count.load(ordering: .relaxed) == 1 })
        #expect(deadlines.watched == 0)
    }

    /// Work that does not end on cancellation (a wait on a database that hangs) is still answered
    /// 503 at its deadline, not when it ends (here: 10 minutes later).
    @Test func workThatIgnoresCancellationIsAnsweredAtItsDeadline() async throws {
        let deadlines = RequestDeadlines(.milliseconds(200))
        let start = ContinuousClock.now
        let caller = Task {
            await deadlines.run(timedOut: .json(200, .string("try later"))) {
                await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                    DispatchQueue.global().asyncAfter(deadline: .now() + 600) { done.resume() }
                }
                return .json(200, .string("late"))
            }
        }
        let reply = try #require(await Self.answer(of: caller), "answered only when the work ended")
        #expect(String(decoding: reply.body, as: UTF8.self) == "\"try later\"")
        #expect(ContinuousClock.now - start < .seconds(300))
        #expect(deadlines.watched == 0)
    }

    @Test func workWithinItsDeadlineAnswersAndIsForgotten() async throws {
        let deadlines = RequestDeadlines(.seconds(120))
        for i in 0..<50 {
            let reply = await deadlines.run { .json(200, .integer(i)) }
            #expect(reply.status == 200 && String(decoding: reply.body, as: UTF8.self) == "\(i)")
        }
        #expect(deadlines.watched == 0)
    }

    /// Many at once, quick and slow mixed: each gets its own outcome (a 45 s deadline: room for a
    /// starved pool to run the quick ones in time).
    @Test func concurrentRequestsEachKeepTheirOwnDeadline() async throws {
        let deadlines = RequestDeadlines(.seconds(45))
        let cancellations = Cancellations()
        let statuses = await withTaskGroup(of: (Int, Int).self) { group in
            for i in 0..<200 {
                group.addTask {
                    let quick: @Sendable () async -> ServiceResponse = { .json(200, .integer(i)) }
                    let reply = await deadlines.run(i % 2 == 0 ? quick : Self.slow(cancellations))
                    return (i, reply.status)
                }
            }
            var statuses: [Int: Int] = [:]
            for await (i, status) in group { statuses[i] = status }
            return statuses
        }
        #expect(statuses.count == 200)
        #expect(statuses.allSatisfy { $0.value == ($0.key % 2 == 0 ? 200 : 503) })
        #expect(await eventually(within: .seconds(60), every: .milliseconds(100)) { cancellations.count.load(ordering: .relaxed) == 100 })
        #expect(deadlines.watched == 0)
    }

    /// A request whose caller goes away (the client disconnected) stops its work.
    @Test func cancellingTheCallerCancelsTheWork() async throws {
        let deadlines = RequestDeadlines(.seconds(900))
        let cancellations = Cancellations(), started = Cancellations()  // `started` counts starts
        let slow = Self.slow(cancellations)
        let caller = Task {
            await deadlines.run {
                started.count.add(1, ordering: .relaxed)
                return await slow()
            }
        }
        // Once the work runs (work cancelled before it starts never starts: the test below).
        _ = await eventually(within: .seconds(120), every: .milliseconds(10)) { started.count.load(ordering: .relaxed) == 1 }
        let start = ContinuousClock.now
        caller.cancel()
        let reply = try #require(await Self.answer(of: caller), "the work ran on to its end")
        #expect(ContinuousClock.now - start < .seconds(300))
        #expect(reply.status == 200 && String(decoding: reply.body, as: UTF8.self) == "\"cancelled\"")
        #expect(cancellations.count.load(ordering: .relaxed) == 1)
        #expect(deadlines.watched == 0)
    }

    /// A caller cancelled before its work is stored (here, before `run` is called: the handler
    /// runs at once and finds no work) still has its work cancelled, instead of left to its deadline:
    /// the work either never starts (the answer is the timeout's) or starts and sees its
    /// cancellation, whichever the pool's timing gives.
    @Test func aCallerCancelledBeforeItsWorkStartsCancelsTheWork() async throws {
        let deadlines = RequestDeadlines(.seconds(900))
        let cancellations = Cancellations()
        let start = ContinuousClock.now
        let caller = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await deadlines.run(Self.slow(cancellations))
        }
        let reply = try #require(await Self.answer(of: caller), "the work ran on to its end")
        #expect(ContinuousClock.now - start < .seconds(300))
        let text = String(decoding: reply.body, as: UTF8.self), seen = cancellations.count.load(ordering: .relaxed)
        #expect((reply.status == 200 && text == "\"cancelled\"" && seen == 1) || (reply.status == 503 && seen == 0), "\(reply.status) \(text) \(seen)")
        #expect(deadlines.watched == 0)
    }
}
