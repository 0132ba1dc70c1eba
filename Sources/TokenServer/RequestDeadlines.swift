import Synchronization

/// Request timeouts without a timer per request.
///
/// Each request's work runs in a task of its own, registered here with its deadline; one watchdog
/// task, alive while anything is registered, wakes every `tick` and cancels the work whose
/// deadline has passed. The request then answers 503 `timeout` once its work has stopped (every
/// await in the service — key fetches, the ledger — ends on cancellation).
///
/// The previous form, a task group racing the work against `Task.sleep`, left one pending
/// dispatch timer per request until its deadline (10 s by default, so tens of thousands under
/// load) and cost a third of the certificate endpoint's throughput (`scripts/load.sh`:
/// 5,200 → 6,750 requests/s with no timeout at all).
final class RequestDeadlines: Sendable {
    /// A request's work and deadline; the watchdog removes it when it cancels the work, so a
    /// request that no longer finds its entry has expired.
    private struct Pending {
        let deadline: ContinuousClock.Instant
        let work: Task<ServiceResponse, Never>
    }

    private struct State {
        var pending: [UInt64: Pending] = [:]
        var nextID: UInt64 = 0
        var watching = false
    }

    private let state = Mutex(State())
    private let duration: Duration
    private let tick: Duration

    /// - Parameter duration: How long a request's work may take.
    init(_ duration: Duration) {
        self.duration = duration
        // A tenth of a second late at most, and finer for short timeouts (tests).
        tick = min(.milliseconds(100), max(.milliseconds(1), duration / 4))
    }

    /// Requests being watched now.
    var watched: Int { state.withLock { $0.pending.count } }

    /// Runs `operation` within the deadline: its response, or 503 `timeout` when the deadline
    /// passed first. Cancelling the caller cancels the work.
    func run(_ operation: @escaping @Sendable () async -> ServiceResponse) async -> ServiceResponse {
        let work = Task { await operation() }
        let (id, startWatchdog) = state.withLock { state -> (UInt64, Bool) in
            let id = state.nextID
            state.nextID &+= 1
            state.pending[id] = Pending(deadline: .now + duration, work: work)
            let start = !state.watching
            state.watching = true
            return (id, start)
        }
        if startWatchdog { Task.detached { await self.watch() } }
        let response = await withTaskCancellationHandler { await work.value } onCancel: { work.cancel() }
        let expired = state.withLock { $0.pending.removeValue(forKey: id) } == nil
        return expired ? .error(503, "timeout", "the request took longer than \(duration)") : response
    }

    /// Cancels the work past its deadline every `tick`; ends when nothing is registered.
    private func watch() async {
        while true {
            try? await Task.sleep(for: tick)
            let now = ContinuousClock.now
            let keepWatching = state.withLock { state -> Bool in
                let expired = state.pending.filter { $0.value.deadline <= now }
                for (id, pending) in expired {
                    pending.work.cancel()
                    state.pending.removeValue(forKey: id)
                }
                if state.pending.isEmpty { state.watching = false }
                return state.watching
            }
            if !keepWatching { return }
        }
    }
}
