public import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Files holding secrets: created atomically and never overwritten, checked for permissions.
public enum SecureFile {
    /// Writes a file that must not exist yet: a temporary file with `mode`, fsync'd, then linked
    /// into place (so no half-written file is ever visible and an existing one is never replaced).
    public static func writeNew(_ path: String, _ contents: [UInt8], mode: mode_t) throws(PeerCAError) {
        let directory = (path as NSString).deletingLastPathComponent
        let temporary = (directory.isEmpty ? "." : directory) + "/.tokentool-\(UUID().uuidString).tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL, mode)
        guard fd >= 0 else {
            throw PeerCAError(.io, "cannot create a file in \(directory.isEmpty ? "." : directory): \(String(cString: strerror(errno)))")
        }
        defer { unlink(temporary) }
        var written = 0
        let ok = contents.withUnsafeBytes { buffer -> Bool in
            while written < buffer.count {
                let n = write(fd, buffer.baseAddress.map { $0 + written }, buffer.count - written)
                if n <= 0 { return false }
                written += n
            }
            return fsync(fd) == 0
        }
        close(fd)
        guard ok else { throw PeerCAError(.io, "cannot write \(path)") }
        guard link(temporary, path) == 0 else {
            if errno == EEXIST { throw PeerCAError(.fileExists, "\(path) exists; it is never overwritten") }
            throw PeerCAError(.io, "cannot create \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// Refuses a secret file that group or others can read.
    public static func checkPrivate(_ path: String) throws(PeerCAError) {
        guard let mode = permissions(path) else { throw PeerCAError(.io, "cannot read \(path)") }
        if mode & 0o077 != 0 {
            throw PeerCAError(.invalidCAMaterial, "\(path) holds secret key material but is readable by group or others (mode \(String(mode, radix: 8))); chmod 600 it")
        }
    }

    /// A file's permission bits, or nil when it cannot be examined.
    public static func permissions(_ path: String) -> mode_t? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return info.st_mode & 0o777
    }

    static func read(_ path: String) throws(PeerCAError) -> String {
        guard let data = FileManager.default.contents(atPath: path) else { throw PeerCAError(.io, "cannot read \(path)") }
        return String(decoding: data, as: UTF8.self)
    }
}
