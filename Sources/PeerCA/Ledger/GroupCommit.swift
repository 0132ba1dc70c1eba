import Foundation
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
///
/// A request whose task is cancelled before its batch begins — while it waits for the next one, or
/// before it is submitted — is withdrawn: it fails with ``PeerCAError/Code/ledger`` at once and is
/// never written (a request answered 503 at its deadline leaves no certificate behind, and its
/// token's `jti` stays unused). One already in the batch being written cannot be withdrawn: it
/// waits for that batch and gets its result. A withdrawal costs the same however long the queue
/// (a store that hangs under load lets it grow to the request rate times the deadline).
package final class GroupCommit<Request: Sendable>: Sendable {
    /// Writes a batch durably, in order, and returns one result per request.
    package typealias Write = @Sendable ([Request]) async -> [Result<Void, PeerCAError>]

    private struct Waiting: Sendable {
        let request: Request
        /// Resumed exactly once: by `drain()`, or by the withdrawal that removed it from the queue
        /// (unsafe: a checked one allocates a canary per request).
        let continuation: UnsafeContinuation<Result<Void, PeerCAError>, Never>
    }

    private struct State: Sendable {
        /// The queue, by ticket; `order` holds the tickets in arrival order, and those of withdrawn
        /// requests until `drain()` passes them.
        var waiting: [UInt64: Waiting] = [:]
        var order: [UInt64] = []
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
        /// Requests withdrawn: their tasks were cancelled before their batch began.
        package var withdrawn = 0
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
    private let tickets = Atomic<UInt64>(0)
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
    ///
    /// Cancelling the caller's task before the request's batch begins withdraws it (see the type's
    /// documentation); after that, cancellation changes nothing.
    package func submit(_ request: Request) async throws(PeerCAError) {
        let ticket = tickets.wrappingAdd(1, ordering: .relaxed).oldValue
        let result = await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Result<Void, PeerCAError>, Never>) in
                let starts = state.withLock { state -> Bool? in
                    // The cancellation flag is set before the handler runs, and the handler takes
                    // this lock: a request cancelled before it is queued is refused here, one
                    // cancelled after is found in the queue by the handler.
                    if Task.isCancelled {
                        state.statistics.withdrawn += 1
                        return nil
                    }
                    state.waiting[ticket] = Waiting(request: request, continuation: continuation)
                    state.order.append(ticket)
                    guard !state.writing else { return false }
                    state.writing = true
                    return true
                }
                switch starts {
                case nil: continuation.resume(returning: .failure(Self.withdrawal))
                case true?: Task { await self.drain() }
                case false?: break
                }
            }
        } onCancel: {
            let withdrawn = state.withLock { state -> Waiting? in
                guard let waiting = state.waiting.removeValue(forKey: ticket) else { return nil }  // in a batch already
                state.statistics.withdrawn += 1
                return waiting
            }
            withdrawn?.continuation.resume(returning: .failure(Self.withdrawal))
        }
        try result.get()
    }

    /// What a withdrawn request fails with.
    private static var withdrawal: PeerCAError {
        PeerCAError(.ledger, "the request was cancelled before its batch was written: nothing was recorded")
    }

    /// Writes batches until nothing waits.
    private func drain() async {
        while true {
            let batch = state.withLock { state -> [Waiting] in
                guard !state.waiting.isEmpty else {
                    state.order.removeAll(keepingCapacity: true)  // withdrawn tickets only
                    state.writing = false
                    return []
                }
                var batch: [Waiting] = []
                batch.reserveCapacity(min(state.waiting.count, maximumBatch))
                var passed = 0
                while batch.count < maximumBatch, passed < state.order.count {
                    if let waiting = state.waiting.removeValue(forKey: state.order[passed]) { batch.append(waiting) }
                    passed += 1
                }
                state.order.removeFirst(passed)
                let count = batch.count
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
