import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A fixed set of independently locked values, for state that many threads touch at once
/// (pooled OpenSSL contexts, the header cache, the verified-token cache). Each stripe is its own
/// heap object, padded so that neighbouring locks do not share a cache line.
struct Striped<Value: ~Copyable>: Sendable {
    final class Stripe: Sendable {
        let lock: Mutex<Value>
        private let padding: (Int, Int, Int, Int, Int, Int, Int, Int) = (0, 0, 0, 0, 0, 0, 0, 0)
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

    /// The stripe for the calling thread: threads mostly get different stripes, so their locks
    /// stay uncontended and on their own core.
    var forCurrentThread: Stripe {
        let thread = UInt(pthread_self())
        // Thread control blocks are widely spaced; mix the middle bits.
        return stripes[Int(truncatingIfNeeded: (thread >> 12) ^ (thread >> 21) ^ (thread >> 30)) & (Self.count - 1)]
    }

    /// The stripe for a hash value.
    func forHash(_ h: UInt64) -> Stripe { stripes[Int(h & UInt64(Self.count - 1))] }
}
