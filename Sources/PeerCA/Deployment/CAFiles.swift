import Foundation
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
        if !allowInsecureKeyFile { try caFile { () throws(SecureFileError) in try SecureFile.checkPrivate(issuerKey) } }
        return try CertificateAuthority(
            rootPEM: try caFile { () throws(SecureFileError) in try SecureFile.read(rootCertificate) },
            issuerCertificatePEM: try caFile { () throws(SecureFileError) in try SecureFile.read(issuerCertificate) },
            issuerKeyPEM: try caFile { () throws(SecureFileError) in try SecureFile.read(issuerKey) }, passphrase: passphrase)
    }

    /// Writes new material: keys first (0600), then certificates (0644); refuses if any file exists,
    /// before writing anything. All or nothing: when a file cannot be written, those written
    /// before it are removed again (and the directory, when this call made it), so a retry does
    /// not find half a CA that it refuses to overwrite.
    public func create(_ material: CertificateAuthority.Material, passphrase: String?) throws(PeerCAError) {
        try create(material, passphrase: passphrase, then: [])
    }

    /// ``create(_:passphrase:)``, and `more` files after the material, in the same
    /// all-or-nothing write (``SecureFile/writeAllNew(_:)``).
    ///
    /// When the directory does not exist yet, the files are written into a hidden directory beside
    /// it (`.NAME.creating-…`, mode 0700), flushed, and that directory is renamed into place: a
    /// process killed midway (or a machine losing power) leaves no half CA at the directory's
    /// name, only the hidden one, which nothing reads. Into a directory that exists (a mounted
    /// volume, say, that a rename could not replace), the files are written in place and removed
    /// again on an error. `observe`, for tests, sees each staged file once it is written.
    func create(
        _ material: CertificateAuthority.Material, passphrase: String?, then more: [SecureFile.NewFile],
        observe: (String) throws -> Void = { _ in }
    ) throws(PeerCAError) {
        let intermediate = material.intermediateKey != nil
        let paths = [rootCertificate, issuerCertificate, issuerKey] + (intermediate ? [rootKey] : []) + more.map(\.path)
        if let existing = paths.first(where: { FileManager.default.fileExists(atPath: $0) }) {
            throw PeerCAError(.fileExists, "\(existing) exists; CA material is never overwritten")
        }
        let issuerKeyPEM = try material.issuerKeyPEM(passphrase: passphrase)
        let rootKeyPEM = intermediate ? try material.rootKeyPEM(passphrase: passphrase) : nil
        let files =
            [SecureFile.NewFile(path: issuerKey, contents: Array(issuerKeyPEM.utf8), mode: 0o600)]
            + (rootKeyPEM.map { [SecureFile.NewFile(path: rootKey, contents: Array($0.utf8), mode: 0o600)] } ?? [])
            + [
                SecureFile.NewFile(path: rootCertificate, contents: Array(material.authority.root.pemString.utf8), mode: 0o644),
                SecureFile.NewFile(path: issuerCertificate, contents: Array(material.authority.issuer.pemString.utf8), mode: 0o644),
            ] + more
        let own = (path("ca") as NSString).deletingLastPathComponent
        if !FileManager.default.fileExists(atPath: directory), files.allSatisfy({ ($0.path as NSString).deletingLastPathComponent == own }) {
            try createStaged(files, observe: observe)
            return
        }
        let madeDirectory = !FileManager.default.fileExists(atPath: directory)
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch { throw PeerCAError(.io, "cannot create \(directory)") }
        do throws(SecureFileError) { try SecureFile.writeAllNew(files) } catch {
            if madeDirectory { rmdir(directory) }
            throw PeerCAError(error)
        }
    }

    /// The files written into a hidden directory beside ``directory``, which is then renamed to it.
    private func createStaged(_ files: [SecureFile.NewFile], observe: (String) throws -> Void) throws(PeerCAError) {
        let target = (directory as NSString).standardizingPath
        let parentPath = (target as NSString).deletingLastPathComponent
        let parent = parentPath.isEmpty ? "." : parentPath
        do {
            try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch { throw PeerCAError(.io, "cannot create \(parent)") }
        let staging = (parent as NSString).appendingPathComponent(".\((target as NSString).lastPathComponent).creating-\(UUID().uuidString.prefix(8))")
        guard mkdir(staging, 0o700) == 0 else { throw PeerCAError(.io, "cannot create \(staging): \(String(cString: strerror(errno)))") }
        do throws(PeerCAError) {
            for file in files {
                let path = (staging as NSString).appendingPathComponent((file.path as NSString).lastPathComponent)
                try caFile { () throws(SecureFileError) in try SecureFile.writeNew(path, file.contents, mode: file.mode) }
                do { try observe(path) } catch { throw PeerCAError(.io, "\(error)") }
            }
            try Self.flushDirectory(staging)
            guard rename(staging, target) == 0 else {
                let code = errno
                if code == EEXIST || code == ENOTEMPTY { throw PeerCAError(.fileExists, "\(directory) exists; CA material is never overwritten") }
                throw PeerCAError(.io, "cannot move the new CA to \(directory): \(String(cString: strerror(code)))")
            }
        } catch {
            try? FileManager.default.removeItem(atPath: staging)
            throw error
        }
        try Self.flushDirectory(parent)  // the rename, durable
    }

    /// `fsync` of a directory: the names made in it are on disk.
    private static func flushDirectory(_ path: String) throws(PeerCAError) {
        try caFile { () throws(SecureFileError) in try SecureFile.flushDirectory(path) }
    }
}
