import Synchronization

/// Remembers, per verifier, the outcome of parsing a header segment and selecting its key.
///
/// Tokens from one issuer carry byte-identical headers, so after the first token the header costs
/// a comparison instead of base64 decoding and JSON parsing. The cache is safe because the result
/// depends only on the exact segment bytes and on the verifier, which is immutable: the same bytes
/// always give the same header and key. Only successes are cached; segments longer than 512 bytes
/// are not cached. Each of a verifier's shards (one per stripe of threads) has its own cache of at
/// most 4 entries.
final class HeaderCache: Sendable {
    static let entriesPerShard = 4
    static let maxSegment = 512

    struct Item: Sendable {
        let segment: [UInt8]
        let header: JOSEHeader
        let entry: Int
    }

    struct Items: ~Copyable {
        var items: [Item] = []
        var next = 0
    }

    private let state = Mutex(Items())
    private let padding = CacheLinePadding()

    func lookup(_ segment: UnsafeRawBufferPointer) -> (JOSEHeader, Int)? {
        guard segment.count <= HeaderCache.maxSegment else { return nil }
        return state.withLock { state -> (JOSEHeader, Int)? in
            for item in state.items where item.segment.sameBytes(as: segment) { return (item.header, item.entry) }
            return nil
        }
    }

    func insert(_ segment: UnsafeRawBufferPointer, header: JOSEHeader, entry: Int) {
        guard segment.count <= HeaderCache.maxSegment else { return }
        let item = Item(segment: Array(segment), header: header, entry: entry)
        state.withLock { state in
            if state.items.count < HeaderCache.entriesPerShard {
                state.items.append(item)
            } else {
                state.items[state.next] = item
                state.next = (state.next + 1) % HeaderCache.entriesPerShard
            }
        }
    }
}

