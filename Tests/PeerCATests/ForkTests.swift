import Crypto
import Foundation
@testable import PeerCA
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// State that must stay with the process that made it — presigned nonces, buffered random bytes —
/// is never used by a child forked from it (without `exec`), even one given its parent's process
/// ID: it belongs to a fork generation (``ProcessOwner``).
#if os(Linux)
@Suite("Forked children and the state their parent made")
struct ForkTests {
    /// A child's fork generation is its parent's plus one; the parent's does not change.
    @Test func aForkedChildReadsTheNextForkGeneration() throws {
        let parent = ProcessOwner.currentForkGeneration
        let answer = try #require(Self.inForkedChild(count: 8) { out in
            out.storeBytes(of: UInt64(ProcessOwner.currentForkGeneration), as: UInt64.self)
        })
        let child = answer.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
        #expect(child == UInt64(parent) + 1)
        #expect(ProcessOwner.currentForkGeneration == parent)
    }

    /// A child reads its own process ID, not the one its parent cached: with `fork`, and with
    /// glibc's `_Fork`, which runs no `pthread_atfork` handler (the cache's page is zeroed by the
    /// kernel in every child, `MADV_WIPEONFORK`).
    @Test(arguments: ["fork", "_Fork"])
    func aChildReadsItsOwnProcessID(_ forker: String) throws {
        #expect(ProcessOwner.idIsCached)
        let parent = ProcessOwner.current.id  // cached now, if it was not already
        #expect(parent == getpid())
        let start: () -> pid_t
        if forker == "fork" {
            start = { fork() }
        } else {
            // _Fork is glibc 2.34's, not in the headers Swift imports (nil: RTLD_DEFAULT).
            let symbol = try #require(dlsym(nil, "_Fork"))
            let call = unsafeBitCast(symbol, to: (@convention(c) () -> pid_t).self)
            start = { call() }
        }
        let answer = try #require(Self.inForkedChild(count: 8, start: start) { out in
            out.storeBytes(of: Int32(ProcessOwner.current.id), as: Int32.self)
            out.storeBytes(of: Int32(getpid()), toByteOffset: 4, as: Int32.self)
        })
        let (childSays, childIs) = answer.withUnsafeBytes { ($0.loadUnaligned(as: Int32.self), $0.loadUnaligned(fromByteOffset: 4, as: Int32.self)) }
        #expect(childSays == childIs)
        #expect(childSays != parent)
        #expect(ProcessOwner.current.id == getpid())
    }

    /// A child does not serve the random bytes left in its parent's buffer: without the
    /// generation it would hand out the very bytes its parent serves next (two certificates, one
    /// serial).
    @Test func aForkedChildDrawsOtherRandomBytesThanItsParent() throws {
        let random = KernelRandom()
        var first = [UInt8](repeating: 0, count: 16)
        first.withUnsafeMutableBytes { random.fill($0) }  // the buffer now holds 4,080 unserved bytes
        let child = try #require(Self.inForkedChild(count: 64) { out in random.fill(out) })
        var parent = [UInt8](repeating: 0, count: 64)
        parent.withUnsafeMutableBytes { random.fill($0) }
        #expect(child != parent)
        #expect(random.statistics.refills == 1, "the parent kept its buffer")
    }

    /// A presigner made in another fork generation — a process with this one's ID, as a
    /// grandchild given a recycled ID would be — never signs from the pairs.
    @Test func aPresignerOfAnotherForkGenerationNeverUsesItsPairs() throws {
        let owner = ProcessOwner(id: getpid(), forkGeneration: ProcessOwner.currentForkGeneration + 1)
        let presigner = try #require(P256Presigner(privateKey: Array(P256.Signing.PrivateKey().rawRepresentation), capacity: 8, owner: owner))
        // No fill needed: with the store empty, a signature of the owner's process would compute
        // a batch and sign from it.
        let digest = SHA256.hash(data: Array("message".utf8))
        #expect(digest.withUnsafeBytes { presigner.sign(digest: $0) } == nil)
        #expect(presigner.statistics.used == 0)
        // The same presigner's owner, this process, does sign.
        let mine = try #require(P256Presigner(privateKey: Array(P256.Signing.PrivateKey().rawRepresentation), capacity: 8))
        #expect(digest.withUnsafeBytes { mine.sign(digest: $0) } != nil)
    }

    /// Runs `child` in a process forked from this one (by `start`: `fork` unless told; no `exec`; only the calling thread goes on
    /// there, so `child` touches nothing another thread could hold) and returns the `count` bytes
    /// it left in its buffer, or nil when it gave no answer within 20 s (it is then killed).
    static func inForkedChild(count: Int, start: () -> pid_t = { fork() }, _ child: (UnsafeMutableRawBufferPointer) -> Void) -> [UInt8]? {
        let out = UnsafeMutableRawBufferPointer.allocate(byteCount: count, alignment: 8)
        defer { out.deallocate() }
        var descriptors: [Int32] = [0, 0]
        guard pipe(&descriptors) == 0 else { return nil }
        let (reading, writing) = (descriptors[0], descriptors[1])
        // Close-on-exec (pipe2 is not imported): a process another test starts does not keep the
        // pipe open.
        _ = fcntl(reading, F_SETFD, FD_CLOEXEC)
        _ = fcntl(writing, F_SETFD, FD_CLOEXEC)
        let pid = start()
        if pid == 0 {
            close(reading)
            child(out)
            var written = 0
            while written < count {
                let wrote = write(writing, out.baseAddress! + written, count - written)
                if wrote <= 0 { _exit(1) }
                written += wrote
            }
            _exit(0)
        }
        close(writing)
        defer { close(reading) }
        guard pid > 0 else { return nil }
        var answer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: count)
        var waiting = pollfd(fd: reading, events: Int16(POLLIN), revents: 0)
        while answer.count < count {
            guard poll(&waiting, 1, 20_000) == 1 else {
                kill(pid, SIGKILL)
                break
            }
            let got = read(reading, &chunk, count - answer.count)
            if got <= 0 { break }
            answer += chunk[0..<got]
        }
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        return answer.count == count ? answer : nil
    }
}
#endif
