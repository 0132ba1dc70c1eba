#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A whole file read with an upper bound on its size: the one way keys, secrets, settings and
/// inputs are read from files. Without a bound, a setting that names `/dev/zero` or a disk image by
/// mistake reads until memory runs out; with it, such a file is refused with a message that says
/// which file and why.
package enum BoundedFile {
    /// The most a file is read to by default: keys, secrets, tokens, settings and CSRs are kilobytes.
    package static let defaultLimit = 16 << 20

    /// Why a file could not be read.
    package struct Failure: Error, Sendable, CustomStringConvertible {
        package enum Kind: Sendable, Equatable {
            /// The path names nothing (`ENOENT`).
            case missing
            /// It exists but cannot be opened or read: permissions, a directory, an I/O error.
            case unreadable
            /// It holds more than the limit.
            case tooLarge
        }
        package let kind: Kind
        /// The file's name as the caller gave it.
        package let name: String
        /// Why, in words: "no such file", "permission denied", "it is a directory", or the size.
        package let reason: String

        /// "cannot read NAME: REASON", or "NAME holds more than N MiB" for a file too large.
        package var description: String {
            kind == .tooLarge ? "\(name) \(reason)" : "cannot read \(name): \(reason)"
        }
    }

    /// The bytes of the file at `path`, refused past `limit` bytes. A regular file larger than the
    /// limit is refused from its size, before anything is read.
    package static func read(_ path: String, limit: Int = defaultLimit) throws(Failure) -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            let code = errno
            throw Failure(kind: code == ENOENT ? .missing : .unreadable, name: path, reason: reason(code))
        }
        defer { close(descriptor) }
        var information = stat()
        if fstat(descriptor, &information) == 0 {
            if information.st_mode & S_IFMT == S_IFDIR { throw Failure(kind: .unreadable, name: path, reason: reason(EISDIR)) }
            if information.st_mode & S_IFMT == S_IFREG, Int(information.st_size) > limit { throw tooLarge(path, limit) }
        }
        return try readAll(descriptor, name: path, limit: limit)
    }

    /// The bytes of the file at `path`, or nil when there is no such file; any other failure throws.
    package static func readIfPresent(_ path: String, limit: Int = defaultLimit) throws(Failure) -> [UInt8]? {
        do { return try read(path, limit: limit) } catch where error.kind == .missing { return nil }
    }

    /// Everything `descriptor` gives until its end, refused past `limit` bytes.
    package static func readAll(_ descriptor: Int32, name: String, limit: Int = defaultLimit) throws(Failure) -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                let code = errno
                if code == EINTR { continue }
                throw Failure(kind: .unreadable, name: name, reason: reason(code))
            }
            if count == 0 { return bytes }
            bytes += chunk[0..<count]
            if bytes.count > limit { throw tooLarge(name, limit) }
        }
    }

    /// Why `open` or `read` failed, in words.
    package static func reason(_ code: Int32) -> String {
        switch code {
        case ENOENT: "no such file"
        case EACCES, EPERM: "permission denied"
        case ENOTDIR: "a component of the path is not a directory"
        case EISDIR: "it is a directory"
        default: String(cString: strerror(code))
        }
    }

    private static func tooLarge(_ name: String, _ limit: Int) -> Failure {
        let size = limit >= 1 << 20 ? "\(limit >> 20) MiB" : "\(limit) bytes"
        return Failure(kind: .tooLarge, name: name, reason: "holds more than \(size), more than is read")
    }
}
