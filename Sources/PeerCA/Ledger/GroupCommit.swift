import Synchronization

/// Group commit: concurrent writers share one transaction and one flush to disk.
///
/// A writer ``submit(_:)``s its request and waits. When no batch is being written, the request
/// starts one at once (a lone writer waits for nothing but its own commit); while a batch is being
/// written, the requests that arrive queue up and go together in the next one. So the number of
/// flushes follows the disk's speed, not the request rate, and a batch grows exactly as much as
/// the flush before it took. `write` must make each batch durable before it returns: nobody is
/// answered before its row is on disk, and each request gets its own result (one request's
/// duplicate key fails that request, not its batch).
package final class GroupCommit<Request: Sendable>: Sendable {
    /// Writes a batch durably, in order, and returns one result per request.
    package typealias Write = @Sendable ([Request]) async -> [Result<Void, PeerCAError>]

    private struct Waiting: Sendable {
        let request: Request
        /// Resumed exactly once, by `drain()` (unsafe: a checked one allocates a canary per request).
        let continuation: UnsafeContinuation<Result<Void, PeerCAError>, Never>
    }

    private struct State: Sendable {
        var waiting: [Waiting] = []
        var writing = false
        var statistics = Statistics()
    }

    /// What the group commit has done so far.
    package struct Statistics: Sendable, Equatable {
        /// Batches written (transactions), and requests in them.
        package var batches = 0
        package var requests = 0
        /// Requests waiting for the next batch now.
        package var waiting = 0
        package var largestBatch = 0
    }

    /// Batches and requests so far, and how many wait now.
    package var statistics: Statistics {
        state.withLock { state in
            var statistics = state.statistics
            statistics.waiting = state.waiting.count
            return statistics
        }
    }

    private let state = Mutex(State())
    private let maximumBatch: Int
    private let write: Write

    /// - Parameters:
    ///   - maximumBatch: The most requests one transaction takes.
    ///   - write: Writes a batch durably and returns one result per request, in order.
    package init(maximumBatch: Int = 256, write: @escaping Write) {
        self.maximumBatch = max(1, maximumBatch)
        self.write = write
    }

    /// Writes `request` with whatever else is waiting, and returns once it is durable.
    package func submit(_ request: Request) async throws(PeerCAError) {
        let result = await withUnsafeContinuation { (continuation: UnsafeContinuation<Result<Void, PeerCAError>, Never>) in
            let starts = state.withLock { state -> Bool in
                state.waiting.append(Waiting(request: request, continuation: continuation))
                guard !state.writing else { return false }
                state.writing = true
                return true
            }
            if starts { Task { await self.drain() } }
        }
        try result.get()
    }

    /// Writes batches until nothing waits.
    private func drain() async {
        while true {
            let batch = state.withLock { state -> [Waiting] in
                guard !state.waiting.isEmpty else {
                    state.writing = false
                    return []
                }
                let count = min(state.waiting.count, maximumBatch)
                let batch = Array(state.waiting.prefix(count))
                state.waiting.removeFirst(count)
                state.statistics.batches += 1
                state.statistics.requests += count
                state.statistics.largestBatch = max(state.statistics.largestBatch, count)
                return batch
            }
            if batch.isEmpty { return }
            let results = await write(batch.map(\.request))
            for (index, waiting) in batch.enumerated() {
                // A writer that returns too few results fails the rest rather than leaving them waiting.
                let result = index < results.count ? results[index] : .failure(PeerCAError(.ledger, "the batch write returned no result for this request"))
                waiting.continuation.resume(returning: result)
            }
        }
    }
}

/// A certificate to record and the token use it claims: what a ledger's group commit batches.
package struct LedgerRecord: Sendable {
    package let entry: LedgerEntry
    package let use: TokenUse?

    package init(entry: LedgerEntry, use: TokenUse?) {
        self.entry = entry
        self.use = use
    }

    /// The error for a record refused by a unique key: its token use, or its serial.
    package func duplicate(tokenUse: Bool) -> PeerCAError {
        tokenUse
            ? PeerCAError(.tokenReused, "this token (jti) was already used for a certificate")
            : PeerCAError(.serialExists, "serial \(entry.serial) is recorded already")
    }
}
