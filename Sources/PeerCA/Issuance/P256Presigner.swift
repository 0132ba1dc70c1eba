internal import COpenSSL
internal import CBackgroundThread
import Foundation
import Synchronization

/// ECDSA P-256 signing with each nonce's expensive part computed while the CPU is idle.
///
/// An ECDSA signature is `r = (kG).x mod n`, `s = k⁻¹(z + r·d) mod n` for a fresh random `k`. The
/// point multiplication `kG` and the inverses (`kG`'s affine `x`, and `k⁻¹`) do not depend on the
/// message `z`, so pairs `(k⁻¹, r)` are computed ahead of time, ``batchSize`` at once
/// (`tt_ecdsa_presign_batch`: the two inversions shared by the batch, ≈ 13 µs a pair here against
/// ≈ 24 for OpenSSL's `ECDSA_sign_setup` and ≈ 33 for a whole signature), and ``sign(digest:)``
/// finishes a signature from one in ≈ 0.7 µs (`ECDSA_do_sign_ex`).
///
/// A thread of Linux's `SCHED_IDLE` class (it runs only on a CPU nothing else wants: while the
/// ledger's flush is waited for, between requests) keeps the store filled. When a signature finds
/// it empty — a CPU busy with requests gives that thread little time — the signer computes a batch
/// itself, uses one pair and stores the rest: one signature in ``batchSize`` then waits ≈ 0.4 ms,
/// and each costs ≈ 14 µs instead of ≈ 33.
///
/// Each pair signs one message: ``sign(digest:)`` takes it out of the store under the lock before
/// using it, and it is cleared and freed right after (two signatures with one `k` would give the
/// private key away). The pairs are as secret as the key; they stay in this process's memory as
/// the key does and are cleared when used or when the presigner goes. The thread starts with the
/// first signature and stops when the presigner is released. A process forked from this one
/// (without `exec`) has a copy of the store: it never uses it (the pairs belong to the process
/// that made them, checked at each signature by process ID and fork generation — a recycled ID
/// does not pass: ``ProcessOwner``), so parent and child cannot both sign with one `k`.
package final class P256Presigner: Sendable {
    /// What the presigner has done so far.
    package struct Statistics: Sendable, Equatable {
        /// Pairs computed (by the thread and by signers), and signatures made from one.
        package var presigned = 0
        package var used = 0
        /// Batches computed by a signature that found the store empty (its signature counts in
        /// `used`).
        package var refills = 0
        /// Signatures made whole: no pair was ready and none could be computed, or the store's lock
        /// was held at that moment by the thread or another signer (a signer does not wait for it).
        package var missed = 0
        package var busy = 0

        package init() {}

        /// Signatures asked for.
        package var signatures: Int { used + missed + busy }
    }

    /// The pairs kept ready (up to a batch more: ``batchSize``; ≈ 13 ms of work done beforehand,
    /// ≈ 200 KB). The thread only gets
    /// the CPU's idle moments, which come in bursts (a flush waited for, a lull between requests):
    /// a larger store banks more of each burst. With 128, signers computed 23–34% of the pairs
    /// themselves in the 2-core issuance row (each such signature waits ≈ 0.4 ms for its batch);
    /// with 1,024, 5–12%. The row's rate: ahead in 4 of 6 alternated runs, inside this VM's noise
    /// (tokenbench --issuance-child peerca.issuance.2core --seconds 5).
    package static let defaultCapacity = 1024

    /// The pairs computed at once (at most `TT_PRESIGN_BATCH_MAX`, 64): past 32 the shared
    /// inversions (≈ 60 µs a batch) no longer matter (a pair ≈ 12.8 µs at 32, 12.6 at 64, 15.2 at
    /// 16, 78 alone).
    package static let batchSize = 32

    private let shared: Shared

    /// nil when `privateKey` (the 32-byte scalar) is not a P-256 private key. `owner`: the process
    /// whose signatures may use the pairs, nil for this one (tests pass another to see a forked
    /// child's refusal).
    package init?(privateKey: [UInt8], capacity: Int = P256Presigner.defaultCapacity, owner: ProcessOwner? = nil) {
        let made: OpaquePointer? = privateKey.withUnsafeBufferPointer { buffer in
            guard buffer.count == 32, let base = buffer.baseAddress else { return nil }
            return tt_p256_signing_key_new(base)
        }
        guard let key = made else { return nil }
        shared = Shared(key: ECSigningKey(taking: key), capacity: max(1, capacity), owner: owner ?? .current)
    }

    /// Ends the thread, which clears the pairs as it goes (without taking the store's lock here:
    /// the thread, of the lowest class, may hold it and not be given a CPU for a while).
    deinit { shared.stop() }

    /// Read without the store's lock (for the same reason): a `/metrics` scrape never waits.
    package var statistics: Statistics {
        var statistics = Statistics()
        statistics.presigned = shared.presigned.load(ordering: .relaxed)
        statistics.used = shared.used.load(ordering: .relaxed)
        statistics.refills = shared.refills.load(ordering: .relaxed)
        statistics.missed = shared.missed.load(ordering: .relaxed)
        statistics.busy = shared.busy.load(ordering: .relaxed)
        return statistics
    }

    /// The signature (`r ‖ s`, 64 bytes) of a SHA-256 `digest` from a pair computed beforehand —
    /// or, when none is ready, from a batch computed now (the rest of it stored) — or nil when the
    /// store's lock is held (by the thread or another signer) or no batch could be computed (the
    /// caller then signs whole rather than wait for a thread that may not get a CPU soon).
    package func sign(digest: UnsafeRawBufferPointer) -> [UInt8]? {
        // A forked child's copy of the store is its parent's: never used (nor its lock, which the
        // parent's thread may have held at the fork).
        guard ProcessOwner.current == shared.owner, let base = digest.baseAddress else { return nil }
        var start = false, wake = false
        let taken = shared.state.withLockIfAvailable { state -> Nonce? in
            start = state.claimStart()
            guard let nonce = state.ready.popLast() else { return nil }
            wake = state.wake(if: state.ready.count <= shared.capacity / 2)
            return nonce
        }
        shared.kick(start: start, wake: wake)
        guard let taken else {
            shared.busy.add(1, ordering: .relaxed)
            return nil
        }
        guard let nonce = taken ?? refill() else {
            shared.missed.add(1, ordering: .relaxed)
            return nil
        }
        var signature = [UInt8](repeating: 0, count: 64)
        // The pair's BIGNUMs are cleared and freed with `nonce`: it lives until the call returns.
        let ok = withExtendedLifetime(nonce) {
            signature.withUnsafeMutableBufferPointer { out in
                tt_ecdsa_sign_presigned(shared.key.pointer, base.assumingMemoryBound(to: UInt8.self), Int32(digest.count), nonce.kinv, nonce.r, out.baseAddress)
            }
        }
        guard ok == 1 else {
            shared.missed.add(1, ordering: .relaxed)
            return nil
        }
        shared.used.add(1, ordering: .relaxed)
        return signature
    }

    /// The store was empty: computes a batch, keeps one pair for the caller and stores the rest (as
    /// many as fit), or nil when the batch fails.
    private func refill() -> Nonce? {
        guard var batch = shared.computeBatch(), let mine = batch.popLast() else { return nil }
        shared.refills.add(1, ordering: .relaxed)
        shared.presigned.add(batch.count + 1, ordering: .relaxed)
        // Never waits for the lock (the thread holding it may be given no CPU for a while): when it
        // is held, the other pairs are dropped. Pairs not stored are cleared and freed here, after
        // the lock is let go.
        _ = shared.state.withLockIfAvailable { state in state.store(batch, capacity: shared.capacity) }
        return mine
    }

    /// Starts the thread now rather than at the first signature (or wakes it, when it sleeps with
    /// fewer than `capacity` pairs ready), and waits until at least `count` pairs are ready — for
    /// `count` ≥ `capacity`, until the thread has gone to sleep on a full store, so it does not
    /// hold the lock when the caller signs next — or `timeout` seconds have passed (tests,
    /// tokenbench). It waits by suspending, not by blocking its thread: a thread of Swift's
    /// cooperative pool blocked here (for as long as the idle-class thread gets no CPU) was one
    /// the process's other work lacked.
    @discardableResult
    package func fill(atLeast count: Int, timeout: Double) async -> Bool {
        let (start, wake) = shared.state.withLock { state in (state.claimStart(), state.wake(if: state.ready.count < shared.capacity)) }
        shared.kick(start: start, wake: wake)
        let target = min(count, shared.capacity)
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let done = shared.state.withLock { state in state.ready.count >= target && (target < shared.capacity || state.sleeping) }
            if done { return true }
            try? await Task.sleep(for: .milliseconds(1))
        }
        return false
    }

    /// Whether this presigner's thread runs now (tests): readable after the presigner is released.
    package var threadRunning: @Sendable () -> Bool { { [shared] in shared.threadID.load(ordering: .acquiring) != 0 } }

    /// The thread's Linux thread ID while it runs (tests read its scheduling class in /proc), else nil.
    package var threadID: Int32? {
        let id = shared.threadID.load(ordering: .acquiring)
        return id > 0 ? id : nil
    }

    /// One `(k⁻¹, r)` pair, cleared and freed with the object.
    fileprivate final class Nonce: @unchecked Sendable {
        let kinv: OpaquePointer
        let r: OpaquePointer

        private init(kinv: OpaquePointer, r: OpaquePointer) {
            self.kinv = kinv
            self.r = r
        }

        /// `count` fresh pairs computed together, or nil when the computation fails.
        static func batch(key: ECSigningKey, count wanted: Int) -> [Nonce]? {
            let count = min(wanted, Int(TT_PRESIGN_BATCH_MAX))
            var kinvs = [OpaquePointer?](repeating: nil, count: count)
            var rs = [OpaquePointer?](repeating: nil, count: count)
            let ok = kinvs.withUnsafeMutableBufferPointer { kinvs in
                rs.withUnsafeMutableBufferPointer { rs in
                    tt_ecdsa_presign_batch(key.pointer, Int32(count), kinvs.baseAddress, rs.baseAddress)
                }
            }
            guard ok == 1 else { return nil }
            var pairs: [Nonce] = []
            pairs.reserveCapacity(count)
            for (kinv, r) in zip(kinvs, rs) {
                // All set on success; never nil here, but a pair is only made of two.
                guard let kinv, let r else {
                    BN_clear_free(kinv)
                    BN_clear_free(r)
                    continue
                }
                pairs.append(Nonce(kinv: kinv, r: r))
            }
            return pairs
        }

        deinit {
            BN_clear_free(kinv)
            BN_clear_free(r)
        }
    }

    fileprivate struct State {
        var ready: [Nonce] = []
        var started = false
        var sleeping = false

        /// Marks the thread started: true the first time (the caller then starts it).
        mutating func claimStart() -> Bool {
            defer { started = true }
            return !started
        }

        /// Ends the thread's sleep when it sleeps and `condition` holds: true when the caller must
        /// signal it.
        mutating func wake(if condition: Bool) -> Bool {
            guard sleeping, condition else { return false }
            sleeping = false
            return true
        }

        /// Stores the whole `batch` while fewer than `capacity` pairs are ready (so the store may
        /// pass `capacity` by less than a batch), or none of it; true when stored. Pairs not stored
        /// are freed by the caller, outside the lock.
        mutating func store(_ batch: [Nonce], capacity: Int) -> Bool {
            guard ready.count < capacity else { return false }
            ready.append(contentsOf: batch)
            return true
        }
    }

    /// What the thread and the presigner share; the thread keeps it (and the key) alive until it
    /// has seen `stopped`.
    private final class Shared: Sendable {
        let key: ECSigningKey
        let capacity: Int
        let owner: ProcessOwner
        let state = Mutex(State())
        let wake = DispatchSemaphore(value: 0)
        let stopped = Atomic<Bool>(false)
        /// The thread's ID while it runs, 0 before and after.
        let threadID = Atomic<Int32>(0)
        let presigned = Atomic<Int>(0)
        let used = Atomic<Int>(0)
        let refills = Atomic<Int>(0)
        let missed = Atomic<Int>(0)
        let busy = Atomic<Int>(0)

        init(key: ECSigningKey, capacity: Int, owner: ProcessOwner) {
            self.key = key
            self.capacity = capacity
            self.owner = owner
        }

        /// Starts the thread (`start`, once) and ends its sleep (`wake`), as decided under the lock.
        func kick(start: Bool, wake: Bool) {
            if start {
                // The thread's reference. Once stopped, the thread clears the pairs left and drops
                // it: when it is the last, the key is freed there too.
                let retained = Unmanaged.passRetained(self)
                Thread {
                    retained.takeUnretainedValue().runThread()
                    retained.takeUnretainedValue().clearPairs()
                    retained.release()
                }.start()
            }
            if wake { self.wake.signal() }
        }

        /// The thread's body: its scheduling class first, then the name a debugger, `top -H` and
        /// the tests see, then `run()`.
        private func runThread() {
            _ = tokentool_thread_set_idle_priority()
            Thread.current.name = "P256Presigner"
            threadID.store(tokentool_thread_id(), ordering: .releasing)
            run()
            threadID.store(0, ordering: .releasing)
        }

        /// A batch of fresh pairs, for the thread and for a signer that found the store empty:
        /// ``P256Presigner/batchSize`` of them (the capacity, when smaller), always whole — a few
        /// pairs alone cost almost what 32 do (the shared inversions). A process may exit while a
        /// batch is being computed: OpenSSL keeps its state through the exit (TokenKit's
        /// `COpenSSLProcess`).
        func computeBatch() -> [Nonce]? {
            Nonce.batch(key: key, count: min(P256Presigner.batchSize, capacity))
        }

        /// Computes pairs (``computeBatch()``) until `capacity` or more are ready, sleeps until half
        /// are used, and returns once stopped.
        private func run() {
            while !stopped.load(ordering: .acquiring) {
                enum Next { case compute, sleep }
                let next = state.withLock { state -> Next in
                    if state.ready.count >= capacity {
                        state.sleeping = true
                        return .sleep
                    }
                    return .compute
                }
                switch next {
                case .sleep: wake.wait()
                case .compute:
                    // A failure (out of memory) leaves the store as it was; signers then compute
                    // their own batch, or sign whole.
                    guard let batch = computeBatch() else {
                        usleep(10_000)
                        continue
                    }
                    presigned.add(batch.count, ordering: .relaxed)
                    // Signers may have refilled meanwhile: what does not fit is freed outside the lock.
                    _ = state.withLock { state in state.store(batch, capacity: capacity) }
                }
            }
        }

        /// Clears and frees the pairs left (the thread, once stopped), outside the store's lock.
        func clearPairs() {
            var left = state.withLock { state -> [Nonce] in
                defer { state.ready = [] }
                return state.ready
            }
            left.removeAll()
        }

        /// Ends the thread (it clears the pairs); without the lock, see `deinit`.
        func stop() {
            stopped.store(true, ordering: .releasing)
            wake.signal()
        }
    }
}

/// Owns an OpenSSL `EC_KEY` (P-256, with its private scalar) and frees it. `@unchecked Sendable`:
/// the key is never changed after it is made, and OpenSSL's signing calls only read it.
final class ECSigningKey: @unchecked Sendable {
    let pointer: OpaquePointer

    init(taking pointer: OpaquePointer) { self.pointer = pointer }

    deinit { EC_KEY_free(pointer) }
}
