internal import CBackgroundThread

/// The process a piece of secret or once-only state belongs to: its ID and its fork generation.
///
/// A child made by `fork` (without `exec`) has a copy of its parent's memory: presigned nonces
/// (``P256Presigner``), buffered random bytes (``KernelRandom``). Used in both processes, one nonce
/// would sign two messages and give the key away. The process ID alone does not tell them apart
/// for sure: a grandchild forked from a child can be given its grandparent's recycled ID. The fork
/// generation does, for children of `fork()`: a `pthread_atfork` handler, registered when the
/// library is loaded, adds one to it in every child (`tokentool_fork_generation`). A child made
/// without the handlers (glibc's `_Fork`, a raw `clone`) keeps its parent's generation but has
/// its own ID; both are compared.
package struct ProcessOwner: Sendable, Equatable {
    package let id: Int32
    package let forkGeneration: UInt

    package init(id: Int32, forkGeneration: UInt) {
        self.id = id
        self.forkGeneration = forkGeneration
    }

    /// The calling process. Its ID comes from `tokentool_process_id`: cached in a page the kernel
    /// zeroes in every child (`MADV_WIPEONFORK`), so no system call after the first in a process
    /// (`getpid` was ≈ 0.3 µs here, two per certificate: 0.4% of the 1-core issuance row's CPU),
    /// and a child — one made by `fork`, `_Fork` or a raw `clone` alike — reads its own ID.
    package static var current: ProcessOwner { ProcessOwner(id: tokentool_process_id(), forkGeneration: currentForkGeneration) }

    /// Whether ``current`` reads the process ID from the page the kernel zeroes in children (false
    /// where it could not be made: every read is then a `getpid`).
    package static var idIsCached: Bool { tokentool_process_id_is_cached() != 0 }

    /// The calling process's fork generation alone: an atomic load, no system call. Should
    /// `pthread_atfork` have failed at load (out of memory), it never changes, and only the ID
    /// tells a child from its parent.
    package static var currentForkGeneration: UInt { UInt(tokentool_fork_generation()) }
}
