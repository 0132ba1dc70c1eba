public import Foundation

/// A small tmpfs of its own, mounted for a test and unmounted after it: a disk that fills up.
///
/// Mounting needs root (CI runs as root; so does this machine's session). Where it cannot be
/// mounted, `body` is not run and the reason is returned instead, for the test to report: a
/// test that needs a full disk is not passed silently without one.
public struct Tmpfs: Sendable {
    /// Where it is mounted.
    public let path: URL

    /// Mounts a tmpfs of `mebibytes` MiB, runs `body` with it, and unmounts it (lazily, so a file
    /// still open elsewhere does not keep it mounted). Returns nil when `body` ran, or why it could not.
    public static func with(mebibytes: Int, _ body: (Tmpfs) async throws -> Void) async throws -> String? {
        guard getuid() == 0 else { return "mounting a tmpfs needs root" }
        guard let mount = which("mount"), let umount = which("umount") else { return "no mount(8) on this machine" }
        let dir = try temporaryDirectory()
        let mounted = try run(mount, ["-t", "tmpfs", "-o", "size=\(mebibytes)m,mode=0700", "tmpfs", dir.path])
        guard mounted.status == 0 else { return "mount -t tmpfs failed: \(mounted.err)" }
        do {
            try await body(Tmpfs(path: dir))
        } catch {
            _ = try? run(umount, ["-l", dir.path])
            throw error
        }
        _ = try run(umount, ["-l", dir.path])
        try? FileManager.default.removeItem(at: dir)
        return nil
    }

    /// Writes zeros to `name` until the disk is full (or `limit` bytes): the bytes written.
    @discardableResult
    public func fill(_ name: String, limit: Int = .max) -> Int {
        let file = path.appendingPathComponent(name).path
        let descriptor = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { return 0 }
        defer { close(descriptor) }
        let chunk = [UInt8](repeating: 0, count: 64 * 1024)
        var written = 0
        while written < limit {
            let got = chunk.withUnsafeBytes { write(descriptor, $0.baseAddress, min($0.count, limit - written)) }
            if got <= 0 { break }
            written += got
        }
        return written
    }

    /// Removes `name` (a filler): the disk has room again.
    public func remove(_ name: String) throws {
        try FileManager.default.removeItem(at: path.appendingPathComponent(name))
    }

    /// Bytes free on the file system (`statvfs`).
    public var freeBytes: Int {
        var stats = statvfs()
        guard statvfs(path.path, &stats) == 0 else { return -1 }
        return Int(stats.f_bavail) * Int(stats.f_frsize)
    }
}
