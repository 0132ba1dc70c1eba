import Synchronization

/// Work raced against a timer: what PDAKeys' key fetches, TokenServer's OpenWeb calls, the
/// PostgreSQL ledger's preparation and the ended-sessions reload each need, written once.
package enum TimeLimit {
    /// `work`'s result, unless `timeout` passes first and `timedOut()` gives an answer instead
    /// (nil: keep waiting for `work`), or the caller is cancelled first (then `fallback`).
    ///
    /// The first answer is returned at once, and whatever has not answered is cancelled and left
    /// to end by itself: work that does not end when cancelled — a PostgresNIO query in flight on
    /// a server that hangs — does not hold the answer, nor the caller's cancellation (a service
    /// group shutting down). Its callers' work ends on cancellation anyway (AsyncHTTPClient's
    /// requests, PostgresNIO's wait for a connection), or is a query that may not (the PostgreSQL
    /// ledger's migration, whose connection may come just at the limit; the ended-sessions reload,
    /// which `timedOut` only reports).
    package static func race<T: Sendable>(
        _ timeout: Duration,
        fallback: @autoclosure () -> T,
        _ work: @escaping @Sendable () async -> T,
        timedOut: @escaping @Sendable () -> T?
    ) async -> T {
        let answer = FirstAnswer<T>()
        let worker = Task { answer.give(await work()) }
        let timer = Task {
            // Cancelled: an answer came first.
            guard (try? await Task.sleep(for: timeout)) != nil, let value = timedOut() else { return }
            answer.give(value)
        }
        let first = await withTaskCancellationHandler {
            await answer.wait()
        } onCancel: {
            answer.give(nil)
        }
        worker.cancel()
        timer.cancel()
        return first ?? fallback()
    }

    /// The first of the answers given (nil: the caller was cancelled), for the one waiter.
    private final class FirstAnswer<T: Sendable>: Sendable {
        private enum State {
            case waiting(CheckedContinuation<T?, Never>?)
            case answered(T?)
        }
        private let state = Mutex<State>(.waiting(nil))

        func give(_ value: T?) {
            let waiter = state.withLock { state -> CheckedContinuation<T?, Never>? in
                guard case .waiting(let waiter) = state else { return nil }  // answered already
                state = .answered(value)
                return waiter
            }
            waiter?.resume(returning: value)
        }

        func wait() async -> T? {
            await withCheckedContinuation { (continuation: CheckedContinuation<T?, Never>) in
                let ready = state.withLock { state -> T?? in
                    switch state {
                    case .answered(let value): return .some(value)
                    case .waiting:
                        state = .waiting(continuation)
                        return .none
                    }
                }
                if let ready { continuation.resume(returning: ready) }
            }
        }
    }
}
