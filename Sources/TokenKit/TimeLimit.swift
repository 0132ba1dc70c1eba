/// Work raced against a timer: what PDAKeys' key fetches, TokenServer's OpenWeb calls and the
/// PostgreSQL ledger's preparation each need, written once.
package enum TimeLimit {
    /// `work`'s result, unless `timeout` passes first and `timedOut()` gives an answer instead
    /// (nil: keep waiting for `work`, which is then neither cancelled nor cut short). When `work`
    /// ends first, the timer is cancelled; when `timedOut()` answers, `work` is; `fallback` is the
    /// answer if `work` ended without one (it cannot: it is there for the type checker).
    ///
    /// The race returns once both have ended (a task group's children are awaited): work that
    /// does not end when cancelled holds the answer until it does. Its callers' work ends on
    /// cancellation (AsyncHTTPClient's requests, PostgresNIO's wait for a connection — though a
    /// migration whose connection came just after the limit has a query in flight, which runs on),
    /// or is meant to be awaited anyway (the ended-sessions reload, which `timedOut` only reports,
    /// and which stops being awaited when its caller is cancelled).
    package static func race<T: Sendable>(
        _ timeout: Duration,
        fallback: @autoclosure () -> T,
        _ work: @escaping @Sendable () async -> T,
        timedOut: @escaping @Sendable () -> T?
    ) async -> T {
        await withTaskGroup(of: T?.self) { group in
            group.addTask { await work() }
            group.addTask {
                // nil when cancelled: `work` finished first.
                guard (try? await Task.sleep(for: timeout)) != nil else { return nil }
                return timedOut()
            }
            var first: T?
            while first == nil, let next = await group.next() { first = next }
            group.cancelAll()
            return first ?? fallback()
        }
    }
}
