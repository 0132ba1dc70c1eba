public import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A CA kept in a directory, the layout `tokentool ca init` writes: `root.pem`, `issuer.pem`,
/// `issuer.key` (mode 0600), and `root.key` (0600) when an intermediate issues.
///
/// ```swift
/// let files = CAFiles(directory: "state/ca")
/// if !files.exists { try files.create(try CertificateAuthority.create(name: "Dev"), passphrase: nil) }
/// let authority = try files.load(passphrase: nil)
/// ```
public struct CAFiles: Sendable {
    public let directory: String
    public init(directory: String) { self.directory = directory }

    public func path(_ name: String) -> String { (directory as NSString).appendingPathComponent(name) }
    public var rootCertificate: String { path("root.pem") }
    public var rootKey: String { path("root.key") }
    public var issuerCertificate: String { path("issuer.pem") }
    public var issuerKey: String { path("issuer.key") }

    /// Whether the directory holds a CA (its issuing key).
    public var exists: Bool { FileManager.default.fileExists(atPath: issuerKey) }

    /// Loads the CA; the issuing key must not be readable by group or others unless
    /// `allowInsecureKeyFile`.
    public func load(passphrase: String?, allowInsecureKeyFile: Bool = false) throws(PeerCAError) -> CertificateAuthority {
        if !allowInsecureKeyFile { try SecureFile.checkPrivate(issuerKey) }
        return try CertificateAuthority(
            rootPEM: try SecureFile.read(rootCertificate), issuerCertificatePEM: try SecureFile.read(issuerCertificate),
            issuerKeyPEM: try SecureFile.read(issuerKey), passphrase: passphrase)
    }

    /// Writes new material: keys first (0600), then certificates (0644); refuses if any file exists,
    /// before writing anything.
    public func create(_ material: CertificateAuthority.Material, passphrase: String?) throws(PeerCAError) {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch { throw PeerCAError(.io, "cannot create \(directory)") }
        let intermediate = material.intermediateKey != nil
        let files = [rootCertificate, issuerCertificate, issuerKey] + (intermediate ? [rootKey] : [])
        if let existing = files.first(where: { FileManager.default.fileExists(atPath: $0) }) {
            throw PeerCAError(.fileExists, "\(existing) exists; CA material is never overwritten")
        }
        try SecureFile.writeNew(issuerKey, Array(try material.issuerKeyPEM(passphrase: passphrase).utf8), mode: 0o600)
        if intermediate { try SecureFile.writeNew(rootKey, Array(try material.rootKeyPEM(passphrase: passphrase).utf8), mode: 0o600) }
        try SecureFile.writeNew(rootCertificate, Array(material.authority.root.pemString.utf8), mode: 0o644)
        try SecureFile.writeNew(issuerCertificate, Array(material.authority.issuer.pemString.utf8), mode: 0o644)
    }
}

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
