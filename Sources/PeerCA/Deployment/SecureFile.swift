public import Foundation
import TokenKit
#if canImport(Glibc)
import Glibc
#endif

/// What went wrong with a file that holds secrets or must not be overwritten: one error for every
/// user of ``SecureFile`` (the CA, the server's configuration, the CLI), which each turn it into
/// their own (``PeerCAError/init(_:)`` here).
public struct SecureFileError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: String, Sendable, Hashable {
        /// The file exists; it is never overwritten.
        case exists = "file_exists"
        /// Group or others can read a file that holds secrets.
        case notPrivate = "not_private"
        /// The file could not be read, created or written.
        case io
    }

    public let code: Code
    /// The file.
    public let path: String
    /// What was wrong, in words (with the path; never the contents).
    public let message: String

    public init(_ code: Code, path: String, _ message: String) {
        self.code = code
        self.path = path
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}

extension PeerCAError {
    /// A ``SecureFileError`` as PeerCA reports it: `exists` is ``Code/fileExists``, `notPrivate`
    /// ``Code/invalidCAMaterial``, `io` ``Code/io``.
    public init(_ error: SecureFileError) {
        switch error.code {
        case .exists: self.init(.fileExists, error.message)
        case .notPrivate: self.init(.invalidCAMaterial, error.message)
        case .io: self.init(.io, error.message)
        }
    }
}

/// Runs `body`, reporting a ``SecureFileError`` as a ``PeerCAError``.
func caFile<T>(_ body: () throws(SecureFileError) -> T) throws(PeerCAError) -> T {
    do { return try body() } catch { throw PeerCAError(error) }
}

/// Files holding secrets: created atomically and never overwritten, checked for permissions.
public enum SecureFile {
    /// Writes a file that must not exist yet: a temporary file with `mode`, fsync'd, then linked
    /// into place (so no half-written file is ever visible and an existing one is never replaced).
    public static func writeNew(_ path: String, _ contents: [UInt8], mode: mode_t) throws(SecureFileError) {
        let directory = (path as NSString).deletingLastPathComponent
        let temporary = (directory.isEmpty ? "." : directory) + "/.tokentool-\(UUID().uuidString).tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL, mode)
        guard fd >= 0 else {
            throw SecureFileError(.io, path: path, "cannot create a file in \(directory.isEmpty ? "." : directory): \(String(cString: strerror(errno)))")
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
        guard ok else { throw SecureFileError(.io, path: path, "cannot write \(path)") }
        guard link(temporary, path) == 0 else {
            if errno == EEXIST { throw SecureFileError(.exists, path: path, "\(path) exists; it is never overwritten") }
            throw SecureFileError(.io, path: path, "cannot create \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// A file for ``writeAllNew(_:)``.
    package struct NewFile: Sendable {
        package let path: String
        package let contents: [UInt8]
        package let mode: mode_t
        package init(path: String, contents: [UInt8], mode: mode_t) {
            self.path = path
            self.contents = contents
            self.mode = mode
        }
    }

    /// ``writeNew(_:_:mode:)`` for each file in order, all or nothing: when one cannot be
    /// written, those written before it are removed again, so that a retry does not find part of
    /// the set and refuse to overwrite it.
    package static func writeAllNew(_ files: [NewFile]) throws(SecureFileError) {
        var written: [String] = []
        do {
            for file in files {
                try writeNew(file.path, file.contents, mode: file.mode)
                written.append(file.path)
            }
        } catch {
            for path in written.reversed() { unlink(path) }
            throw error
        }
    }

    /// Replaces `path` whole: ``writeNew(_:_:mode:)`` to a temporary file beside it, renamed over
    /// the old one, so a reader sees the old contents or the new, never half of either.
    package static func replace(_ path: String, _ contents: [UInt8], mode: mode_t) throws(SecureFileError) {
        let temporary = path + ".\(UUID().uuidString).tmp"
        try writeNew(temporary, contents, mode: mode)
        guard rename(temporary, path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            throw SecureFileError(.io, path: path, "cannot replace \(path): \(reason)")
        }
    }

    /// fsync of a directory: the names created, renamed or removed in it are on disk.
    package static func flushDirectory(_ path: String) throws(SecureFileError) {
        let descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { throw SecureFileError(.io, path: path, "cannot open \(path): \(String(cString: strerror(errno)))") }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw SecureFileError(.io, path: path, "cannot flush \(path): \(String(cString: strerror(errno)))") }
    }

    /// Refuses a secret file that group or others can read.
    public static func checkPrivate(_ path: String) throws(SecureFileError) {
        guard let mode = permissions(path) else { throw SecureFileError(.io, path: path, "cannot read \(path)") }
        if mode & 0o077 != 0 {
            throw SecureFileError(.notPrivate, path: path, "\(path) holds secret key material but is readable by group or others (mode \(String(mode, radix: 8))); chmod 600 it")
        }
    }

    /// A file's permission bits, or nil when it cannot be examined.
    public static func permissions(_ path: String) -> mode_t? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return info.st_mode & 0o777
    }

    static func read(_ path: String) throws(SecureFileError) -> String {
        do throws(BoundedFile.Failure) { return String(decoding: try BoundedFile.read(path), as: UTF8.self) } catch {
            throw SecureFileError(.io, path: path, error.description)
        }
    }
}
