import Synchronization

/// An optional cache of verified tokens for services that see the same token on every request of
/// a session (API gateways, auth webhooks).
///
/// Safety rules, all enforced here:
/// - The key is the token's exact bytes (a hash picks the slot; the full bytes are compared).
/// - Only tokens that passed every check are stored; a cache belongs to one verifier, so new keys
///   (a new verifier) never see old entries.
/// - Every hit runs the claims policy again at the current time: `exp`, `nbf`, `iat` and the
///   maximum age are re-checked, so an entry never outlives its token.
/// - Memory is bounded by an entry count and a byte budget; when either is reached the oldest
///   entries of the stripe are dropped.
public struct VerifiedTokenCache: Sendable {
    /// Most tokens kept. Default 10,000.
    public var capacity: Int
    /// Most bytes of token and payload kept. Default 16 MiB.
    public var byteBudget: Int

    public init(capacity: Int = 10_000, byteBudget: Int = 16 << 20) {
        self.capacity = max(capacity, 16)
        self.byteBudget = max(byteBudget, 64 << 10)
    }
}

final class TokenCache: Sendable {
    private let stripes = Striped { State() }
    /// Limits per stripe.
    private let maxEntries: Int
    private let maxBytes: Int
    private let seed: UInt64

    init(_ configuration: VerifiedTokenCache) {
        maxEntries = max(configuration.capacity / Striped<State>.count, 1)
        maxBytes = max(configuration.byteBudget / Striped<State>.count, 4096)
        seed = UInt64.random(in: .min ... .max)
    }

    struct Entry: Sendable {
        let token: [UInt8]
        let verified: VerifiedToken
        var cost: Int { token.count + verified.bytes.count + 128 }
    }

    struct State: ~Copyable {
        var entries: [UInt64: Entry] = [:]
        var order: [UInt64] = []  // insertion order, for eviction
        var head = 0
        var bytes = 0
    }

    /// A fast keyed hash over 8-byte words. Collisions only cost a miss: hits compare all bytes.
    func hash(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        var h = seed ^ (UInt64(bytes.count) &* 0x9E37_79B9_7F4A_7C15)
        var i = 0
        guard let base = bytes.baseAddress else { return h }
        while i + 8 <= bytes.count {
            let w = base.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            h = (h ^ w) &* 0xFF51_AFD7_ED55_8CCD
            h ^= h >> 32
            i += 8
        }
        var tail: UInt64 = 0
        var shift: UInt64 = 0
        while i < bytes.count {
            tail |= UInt64(bytes[i]) << shift
            shift += 8
            i += 1
        }
        h = (h ^ tail) &* 0xC4CE_B9FE_1A85_EC53
        return h ^ (h >> 29)
    }

    /// The entry for `token`, whose `hash` the caller computed once for lookup, insert and remove.
    func lookup(_ token: UnsafeRawBufferPointer, hash h: UInt64) -> VerifiedToken? {
        stripes.forHash(h).lock.withLock { state -> VerifiedToken? in
            guard let entry = state.entries[h], entry.token.sameBytes(as: token) else { return nil }
            return entry.verified
        }
    }

    func insert(_ token: UnsafeRawBufferPointer, hash h: UInt64, _ verified: VerifiedToken) {
        let entry = Entry(token: Array(token), verified: verified)
        guard entry.cost <= maxBytes else { return }
        stripes.forHash(h).lock.withLock { state in
            if let old = state.entries.updateValue(entry, forKey: h) {
                state.bytes -= old.cost
            } else {
                state.order.append(h)
            }
            state.bytes += entry.cost
            while state.entries.count > maxEntries || state.bytes > maxBytes, state.head < state.order.count {
                let victim = state.order[state.head]
                state.head += 1
                if let removed = state.entries.removeValue(forKey: victim) { state.bytes -= removed.cost }
            }
            if state.head > 1024 && state.head * 2 > state.order.count {
                state.order.removeFirst(state.head)
                state.head = 0
            }
        }
    }

    func remove(hash h: UInt64) {
        stripes.forHash(h).lock.withLock { state in
            if let removed = state.entries.removeValue(forKey: h) { state.bytes -= removed.cost }
        }
    }

    var count: Int { stripes.stripes.reduce(0) { total, stripe in total + stripe.lock.withLock { $0.entries.count } } }
}

#if canImport(Glibc)
import Glibc
#endif
