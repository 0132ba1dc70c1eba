#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// Random bytes from the kernel's CSPRNG, read 4 KiB at a time from `/dev/random` and handed out
/// in order, each byte once.
///
/// `SystemRandomNumberGenerator` makes a `getrandom` system call for every 8 bytes: two per
/// certificate serial, ≈ 0.6 µs of a one-core issuance. (`getrandom` itself is not importable
/// from Swift here.) `/dev/random` waits, as `getrandom` does, until the kernel's generator is
/// seeded (Linux 5.6 and later; `/dev/urandom` does not wait), then never blocks. The file is
/// opened for each refill, so no descriptor is kept that other code could close. The bytes are
/// the kernel's own output, kept in this process's memory until used (as OpenSSL and BoringSSL
/// keep their generators' state). A child made by `fork` (without `exec`) would otherwise hand out
/// the same bytes as its parent: the buffer belongs to the process that made this object (its ID
/// and fork generation, ``ProcessOwner``), and another process is served by the standard
/// library's generator without touching the buffer or its lock (which a parent's thread may have
/// held at the fork). When the file cannot be read, that generator fills the request too.
package final class KernelRandom: Sendable {
    package static let shared = KernelRandom()

    /// Refills from `/dev/random`, and requests the standard library's generator served instead.
    package struct Statistics: Sendable {
        package var refills = 0
        package var fallbacks = 0
    }

    private struct State {
        var buffer = [UInt8](repeating: 0, count: 4096)
        /// The next unused byte of `buffer` (`buffer.count`: none left).
        var next = 4096
        var statistics = Statistics()
    }
    private let state = Mutex(State())
    /// The process whose buffer this is.
    private let owner = ProcessOwner.current

    package var statistics: Statistics { state.withLock { $0.statistics } }

    /// Fills `out` with random bytes.
    package func fill(_ out: UnsafeMutableRawBufferPointer) {
        guard ProcessOwner.current == owner else {
            // A forked child: its parent may serve the buffered bytes too.
            Self.fallback(out)
            return
        }
        let served = state.withLock { state -> Bool in
            guard out.count <= 512 else {
                state.statistics.fallbacks += 1
                return false
            }
            if state.buffer.count - state.next < out.count {
                guard Self.refill(&state) else {
                    state.statistics.fallbacks += 1
                    return false
                }
            }
            state.buffer.withUnsafeBytes { buffer in
                out.copyMemory(from: UnsafeRawBufferPointer(rebasing: buffer[state.next..<(state.next + out.count)]))
            }
            // Each byte is handed out once: overwrite what was served.
            for index in state.next..<(state.next + out.count) { state.buffer[index] = 0 }
            state.next += out.count
            return true
        }
        if !served { Self.fallback(out) }
    }

    private static func refill(_ state: inout State) -> Bool {
        let descriptor = open("/dev/random", O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var filled = 0
        let count = state.buffer.count
        while filled < count {
            let got = state.buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress.map { $0 + filled }, count - filled) }
            if got < 0, errno == EINTR { continue }
            guard got > 0 else { return false }
            filled += got
        }
        state.next = 0
        state.statistics.refills += 1
        return true
    }

    /// The standard library's generator, 8 bytes a call.
    private static func fallback(_ out: UnsafeMutableRawBufferPointer) {
        var generator = SystemRandomNumberGenerator()
        var index = 0
        while index < out.count {
            let word = generator.next() as UInt64
            for shift in 0..<min(8, out.count - index) { out[index + shift] = UInt8(truncatingIfNeeded: word >> (8 * shift)) }
            index += 8
        }
    }
}
