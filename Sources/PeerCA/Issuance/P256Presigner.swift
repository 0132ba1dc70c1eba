internal import COpenSSL
import Foundation
import Synchronization

/// ECDSA P-256 signing with each nonce's expensive part computed while the CPU is idle.
///
/// An ECDSA signature is `r = (kG).x mod n`, `s = k⁻¹(z + r·d) mod n` for a fresh random `k`. The
/// point multiplication `kG` and the inverse `k⁻¹` — ≈ 20 µs of a ≈ 21 µs signature here — do not
/// depend on the message `z`, so a thread of Linux's `SCHED_IDLE` class (it runs only on a CPU
/// nothing else wants: while the ledger's flush is waited for, between requests) computes pairs
/// `(k⁻¹, r)` ahead of time with OpenSSL's `ECDSA_sign_setup`, and ``sign(digest:)`` finishes a
/// signature from one in ≈ 0.7 µs (`ECDSA_do_sign_ex`). When no pair is ready it returns nil and
/// the caller signs as before: a busy CPU gives the thread no time and costs nothing.
///
/// Each pair signs one message: ``sign(digest:)`` takes it out of the store under the lock before
/// using it, and it is cleared and freed right after (two signatures with one `k` would give the
/// private key away). The pairs are as secret as the key; they stay in this process's memory as
/// the key does and are cleared when used or when the presigner goes. The thread starts with the
/// first signature and stops when the presigner is released. A process forked from this one
/// (without `exec`) has a copy of the store: it never uses it (the pairs belong to the process
/// that made them, checked by process ID at each signature), so parent and child cannot both sign
/// with one `k`.
package final class P256Presigner: Sendable {
    /// What the presigner has done so far.
    package struct Statistics: Sendable, Equatable {
        /// Pairs computed, signatures made from one, and signatures asked for when none was ready.
        package var presigned = 0
        package var used = 0
        package var missed = 0
        /// Pairs ready now.
        package var ready = 0

        package init() {}
    }

    /// The most pairs kept ready. 128 covers the signatures of a few of the ledger's flushes (one
    /// flush, ≈ 0.4 ms here, computes ≈ 20) and holds ≈ 2.5 ms of work done beforehand.
    package static let defaultCapacity = 128

    private let shared: Shared

    /// nil when `privateKey` (the 32-byte scalar) is not a P-256 private key. `owner`: the process
    /// whose signatures may use the pairs (tests pass another to see a forked child's refusal).
    package init?(privateKey: [UInt8], capacity: Int = P256Presigner.defaultCapacity, owner: Int32 = getpid()) {
        let made: UnsafeMutableRawPointer? = privateKey.withUnsafeBufferPointer { buffer in
            guard buffer.count == 32, let base = buffer.baseAddress else { return nil }
            return tt_p256_signing_key_new(base)
        }
        guard let key = made else { return nil }
        shared = Shared(key: ECSigningKey(taking: key), capacity: max(1, capacity), owner: owner)
    }

    deinit { shared.stop() }

    package var statistics: Statistics {
        shared.state.withLock { state in
            var statistics = state.statistics
            statistics.ready = state.ready.count
            return statistics
        }
    }

    /// The signature (`r ‖ s`, 64 bytes) of a SHA-256 `digest` from a pair computed beforehand, or
    /// nil when none is ready (or the lock is busy: the caller signs at once rather than wait).
    package func sign(digest: UnsafeRawBufferPointer) -> [UInt8]? {
        // A forked child's copy of the store is its parent's: never used (nor its lock, which the
        // parent's thread may have held at the fork).
        guard getpid() == shared.owner else { return nil }
        var start = false, wake = false
        let taken = shared.state.withLockIfAvailable { state -> Nonce? in
            if !state.started {
                state.started = true
                start = true
            }
            guard let nonce = state.ready.popLast() else {
                state.statistics.missed += 1
                return nil
            }
            state.statistics.used += 1
            if state.sleeping, state.ready.count <= shared.capacity / 2 {
                state.sleeping = false
                wake = true
            }
            return nonce
        }
        if start { shared.startThread() }
        if wake { shared.wake.signal() }
        guard let nonce = taken ?? nil, let base = digest.baseAddress else { return nil }
        var signature = [UInt8](repeating: 0, count: 64)
        let ok = signature.withUnsafeMutableBufferPointer { out in
            tt_ecdsa_sign_presigned(shared.key.pointer, base.assumingMemoryBound(to: UInt8.self), Int32(digest.count), nonce.kinv, nonce.r, out.baseAddress)
        }
        return ok == 1 ? signature : nil
    }

    /// Starts the thread now rather than at the first signature (or wakes it, when it sleeps with
    /// fewer than `capacity` pairs ready), and waits until at least `count` pairs are ready or
    /// `timeout` seconds have passed (tests, tokenbench).
    @discardableResult
    package func fill(atLeast count: Int, timeout: Double) -> Bool {
        let (start, wake) = shared.state.withLock { state -> (Bool, Bool) in
            defer { state.started = true }
            let wake = state.sleeping && state.ready.count < shared.capacity
            if wake { state.sleeping = false }
            return (!state.started, wake)
        }
        if start { shared.startThread() }
        if wake { shared.wake.signal() }
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if shared.state.withLock({ $0.ready.count }) >= min(count, shared.capacity) { return true }
            usleep(1_000)
        }
        return false
    }

    /// Whether this presigner's thread runs now (tests): readable after the presigner is released.
    package var threadRunning: @Sendable () -> Bool { { [shared] in shared.running.load(ordering: .acquiring) } }

    /// One `(k⁻¹, r)` pair, cleared and freed with the object.
    fileprivate final class Nonce: @unchecked Sendable {
        let kinv: OpaquePointer
        let r: OpaquePointer

        init?(key: ECSigningKey) {
            var kinv: OpaquePointer?
            var r: OpaquePointer?
            guard tt_ecdsa_presign(key.pointer, &kinv, &r) == 1, let kinv, let r else { return nil }
            self.kinv = kinv
            self.r = r
        }

        deinit {
            tt_bn_clear_free(kinv)
            tt_bn_clear_free(r)
        }
    }

    fileprivate struct State: @unchecked Sendable {
        var ready: [Nonce] = []
        var started = false
        var stopped = false
        var sleeping = false
        var statistics = Statistics()
    }

    /// What the thread and the presigner share; the thread keeps it (and the key) alive until it
    /// has seen `stopped`.
    private final class Shared: Sendable {
        let key: ECSigningKey
        let capacity: Int
        let owner: Int32
        let state = Mutex(State())
        let wake = DispatchSemaphore(value: 0)
        let running = Atomic<Bool>(false)

        init(key: ECSigningKey, capacity: Int, owner: Int32) {
            self.key = key
            self.capacity = capacity
            self.owner = owner
        }

        func startThread() {
            running.store(true, ordering: .releasing)
            let thread = Thread { [self] in
                // Named from inside: the name a debugger, `top -H` and the tests see.
                Thread.current.name = "P256Presigner"
                _ = tt_thread_set_idle_priority()
                run()
                running.store(false, ordering: .releasing)
            }
            thread.start()
        }

        /// Computes pairs until `capacity` are ready, sleeps until half are used, and returns once stopped.
        private func run() {
            while true {
                enum Next { case compute, sleep, stop }
                let next = state.withLock { state -> Next in
                    if state.stopped { return .stop }
                    if state.ready.count >= capacity {
                        state.sleeping = true
                        return .sleep
                    }
                    return .compute
                }
                switch next {
                case .stop: return
                case .sleep: wake.wait()
                case .compute:
                    // A failure (out of memory) leaves the store as it was; signatures are then made at once.
                    guard let nonce = Nonce(key: key) else {
                        usleep(10_000)
                        continue
                    }
                    state.withLock { state in
                        guard !state.stopped else { return }
                        state.ready.append(nonce)
                        state.statistics.presigned += 1
                    }
                }
            }
        }

        /// Clears the pairs and ends the thread.
        func stop() {
            let pairs = state.withLock { state -> [Nonce] in
                state.stopped = true
                state.sleeping = false
                defer { state.ready = [] }
                return state.ready
            }
            _ = pairs  // freed (and cleared) here, outside the lock
            wake.signal()
        }
    }
}

/// Owns an OpenSSL `EC_KEY` (P-256, with its private scalar) and frees it. `@unchecked Sendable`:
/// the key is never changed after it is made, and OpenSSL's signing calls only read it.
final class ECSigningKey: @unchecked Sendable {
    let pointer: UnsafeMutableRawPointer

    init(taking pointer: UnsafeMutableRawPointer) { self.pointer = pointer }

    deinit { tt_ec_key_free(pointer) }
}
