import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A fixed set of independently locked values, chosen by hash, for state that many threads touch
/// at once (the verified-token cache). Each stripe is its own heap object, padded so that
/// neighbouring locks do not share a cache line.
struct Striped<Value: ~Copyable>: Sendable {
    final class Stripe: Sendable {
        let lock: Mutex<Value>
        private let padding = CacheLinePadding()
        init(_ value: consuming sending Value) { lock = Mutex(value) }
    }

    /// A power of two.
    static var count: Int { 16 }

    let stripes: [Stripe]

    init(_ make: () -> Value) {
        var stripes: [Stripe] = []
        for _ in 0..<Self.count { stripes.append(Stripe(make())) }
        self.stripes = stripes
    }

    /// The stripe for a hash value.
    func forHash(_ h: UInt64) -> Stripe { stripes[Int(h & UInt64(Self.count - 1))] }
}

/// 64 bytes of nothing, stored last in objects whose lock or reference count threads on different
/// cores write, so that the next object the allocator places does not share their cache line.
struct CacheLinePadding: Sendable {
    private let words: (Int, Int, Int, Int, Int, Int, Int, Int) = (0, 0, 0, 0, 0, 0, 0, 0)
}

/// A number per thread, handed out in order of first use (1, 2, 3, …) and kept for the thread's
/// life, so that the first 16 threads that verify get 16 different verifier shards. (Hashing thread
/// addresses, as before, let two of a pool's threads share a stripe in some runs.)
enum ThreadIndex {
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        // Without a key (the process is out of keys) every call takes a new index: still
        // correct, only without the per-thread placement.
        _ = pthread_key_create(&key, nil)
        return key
    }()
    private static let next = Atomic<Int>(1)

    static var current: Int {
        if let stored = pthread_getspecific(key) { return Int(bitPattern: stored) }
        let index = next.add(1, ordering: .relaxed).oldValue
        _ = pthread_setspecific(key, UnsafeRawPointer(bitPattern: index))
        return index
    }
}
