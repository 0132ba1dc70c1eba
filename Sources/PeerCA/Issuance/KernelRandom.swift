import Glibc
import Synchronization

/// Random bytes from the kernel's CSPRNG (`/dev/urandom`, the source of `getrandom`), read 4 KiB
/// at a time and handed out in order, each byte once.
///
/// `SystemRandomNumberGenerator` makes a `getrandom` system call for every 8 bytes: two per
/// certificate serial, ≈ 0.6 µs of a one-core issuance. The bytes here are the kernel's own
/// output, kept in this process's memory until used (as OpenSSL and BoringSSL keep their
/// generators' state); a child made by `fork` would share what is left of the buffer, and
/// tokentool does not fork. When `/dev/urandom` cannot be read, the standard library's generator
/// fills the request instead.
package final class KernelRandom: Sendable {
    package static let shared = KernelRandom()

    private struct State {
        var buffer = [UInt8](repeating: 0, count: 4096)
        /// The next unused byte of `buffer` (`buffer.count`: none left).
        var next = 4096
        var descriptor: Int32 = -1
    }
    private let state = Mutex(State())

    /// Fills `out` with random bytes.
    package func fill(_ out: UnsafeMutableRawBufferPointer) {
        guard out.count <= 512 else { return fallback(out) }
        let served = state.withLock { state -> Bool in
            if state.buffer.count - state.next < out.count {
                guard Self.refill(&state) else { return false }
            }
            state.buffer.withUnsafeBytes { buffer in
                out.copyMemory(from: UnsafeRawBufferPointer(rebasing: buffer[state.next..<(state.next + out.count)]))
            }
            // Each byte is handed out once: overwrite what was served.
            for index in state.next..<(state.next + out.count) { state.buffer[index] = 0 }
            state.next += out.count
            return true
        }
        if !served { fallback(out) }
    }

    private static func refill(_ state: inout State) -> Bool {
        if state.descriptor < 0 {
            state.descriptor = open("/dev/urandom", O_RDONLY | O_CLOEXEC)
            guard state.descriptor >= 0 else { return false }
        }
        var filled = 0
        let count = state.buffer.count
        let descriptor = state.descriptor
        while filled < count {
            let got = state.buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress.map { $0 + filled }, count - filled) }
            if got < 0, errno == EINTR { continue }
            guard got > 0 else { return false }
            filled += got
        }
        state.next = 0
        return true
    }

    private func fallback(_ out: UnsafeMutableRawBufferPointer) {
        var generator = SystemRandomNumberGenerator()
        for index in out.indices { out[index] = UInt8.random(in: 0...255, using: &generator) }
    }
}
