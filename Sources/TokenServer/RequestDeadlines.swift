import PeerCA
import Synchronization

/// Request timeouts without a timer per request.
///
/// Each request's work runs in a task of its own, registered here with its deadline; one watchdog
/// task, alive while anything is registered, wakes every `tick`, and answers every request whose
/// deadline has passed with its timeout response (503 `timeout` unless the endpoint gives another)
/// and cancels its work. The answer does not wait for the work to stop: a ledger that does not
/// answer (a PostgreSQL server that hangs) may not end its await on cancellation, and the request
/// must still be answered in time. The work's own response, if it comes later, is dropped.
///
/// The previous form, a task group racing the work against `Task.sleep`, left one pending
/// dispatch timer per request until its deadline (10 s by default, so tens of thousands under
/// load) and cost a third of the certificate endpoint's throughput (`scripts/load.sh`:
/// 5,200 → 6,750 requests/s with no timeout at all).
final class RequestDeadlines: Sendable {
    /// A request waiting for its answer: its deadline, the answer past it, its work (once
    /// started), and the caller's continuation. Whoever removes it — the work's end or the
    /// watchdog — resumes the caller, exactly once.
    private struct Pending {
        let deadline: ContinuousClock.Instant
        /// The endpoint's own answer past the deadline; nil for ``timeoutAnswer``.
        let timedOut: ServiceResponse?
        var work: Task<Void, Never>?
        let answer: UnsafeContinuation<ServiceResponse, Never>
    }

    private struct State {
        var pending: [UInt64: Pending] = [:]
        var watching = false
    }

    private let state = Mutex(State())
    /// Request IDs, without taking the state's lock.
    private let ids = Atomic<UInt64>(0)
    private let duration: Duration
    private let tick: Duration
    /// 503 `timeout`: the answer past the deadline unless the endpoint gives another (made once,
    /// not for every request).
    private let timeoutAnswer: ServiceResponse

    init(_ duration: Duration) {
        self.duration = duration
        var answer = ServiceResponse.error(503, "timeout", "the request took longer than \(duration)")
        answer.retryAfter = 1  // what took too long may not next time: a client may send it again
        timeoutAnswer = answer
        // A tenth of a second late at most, and finer for short timeouts (tests).
        tick = min(.milliseconds(100), max(.milliseconds(1), duration / 4))
    }

    /// Requests being watched now.
    var watched: Int { state.withLock { $0.pending.count } }

    /// Runs `operation` within the deadline: its response, or `timedOut` (by default 503
    /// `timeout`) as soon as the deadline has passed, whether or not the work has stopped.
    /// Cancelling the caller cancels the work (its response, if it ends so, is the answer). Work
    /// that has not started when it is cancelled — by the deadline or the caller — never starts
    /// (`operation` is not called; the answer is `timedOut`).
    func run(
        timedOut: ServiceResponse? = nil, _ operation: @escaping @Sendable () async -> ServiceResponse
    ) async -> ServiceResponse {
        let id = ids.wrappingAdd(1, ordering: .relaxed).oldValue
        return await withTaskCancellationHandler {
            await withUnsafeContinuation { (answer: UnsafeContinuation<ServiceResponse, Never>) in
                let startWatchdog = state.withLock { state -> Bool in
                    state.pending[id] = Pending(deadline: .now + duration, timedOut: timedOut, work: nil, answer: answer)
                    defer { state.watching = true }
                    return !state.watching
                }
                if startWatchdog { Task.detached { await self.watch() } }
                let work = Task {
                    // Work that starts after its deadline (queued behind other work, under
                    // overload) is not done: its request was answered already.
                    let response = Task.isCancelled ? (timedOut ?? self.timeoutAnswer) : await operation()
                    self.state.withLock { $0.pending.removeValue(forKey: id) }?.answer.resume(returning: response)
                }
                let watched = state.withLock { state -> Bool in
                    guard state.pending[id] != nil else { return false }
                    state.pending[id]?.work = work
                    return true
                }
                // Answered already (the deadline passed before the work was stored, or the work
                // ended), or the caller was cancelled before its handler could find the work (the
                // flag is set before the handler runs): the work is cancelled here.
                if !watched || Task.isCancelled { work.cancel() }
            }
        } onCancel: {
            state.withLock { $0.pending[id]?.work }?.cancel()
        }
    }

    private func watch() async {
        while true {
            try? await Task.sleep(for: tick)
            let now = ContinuousClock.now
            let (expired, keepWatching) = state.withLock { state -> ([Pending], Bool) in
                let expired = state.pending.filter { $0.value.deadline <= now }
                for id in expired.keys { state.pending.removeValue(forKey: id) }
                if state.pending.isEmpty { state.watching = false }
                return (Array(expired.values), state.watching)
            }
            for pending in expired {
                pending.work?.cancel()
                pending.answer.resume(returning: pending.timedOut ?? timeoutAnswer)
            }
            if !keepWatching { return }
        }
    }
}
