import Foundation
import PeerCA
import TokenKit
import X509
#if canImport(Glibc)
import Glibc
#endif

/// A device's key and certificate on disk, replaced as a whole.
///
/// The state directory (mode 0700) holds one *generation* per certificate, `gen-<serial>/` with
/// `key.pem` (0600), `chain.pem` and `credential.json`, and a symbolic link `current` to the one
/// in use. A new generation is written complete in a temporary directory (each file fsync'd),
/// renamed into place, and only then made current by renaming a new link over `current`, which
/// is atomic: a process killed at any point leaves either the old generation current or the new
/// one, never a key without its certificate or a half-written file. `key.pem` and `chain.pem` at
/// the top of the directory are links through `current`, for programs (a web server, `--exec`)
/// that read the files by path. Leftovers of an interrupted write are removed when the store is
/// opened; older generations when a new one becomes current.
struct CredentialStore: Sendable {
    let directory: String

    init(directory: String) throws(PeerClientError) {
        self.directory = directory
        if mkdir(directory, 0o700) != 0, errno != EEXIST {
            throw PeerClientError(.storage, "cannot create the state directory \(directory): \(Self.reason())")
        }
        var info = stat()
        guard stat(directory, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
            throw PeerClientError(.storage, "\(directory) is not a directory")
        }
        if info.st_mode & 0o077 != 0 { chmod(directory, 0o700) }
    }

    func path(_ name: String) -> String { (directory as NSString).appendingPathComponent(name) }

    /// The generation `current` names, or nil when there is none yet. A generation that cannot be
    /// read, or whose key does not match its certificate, is an error (it is never written so).
    func load() throws(PeerClientError) -> StoredCredential? {
        removeLeftovers()
        guard let name = currentGeneration() else { return nil }
        let generation = path(name)
        let keyPEM: String, chainPEM: String
        do {
            keyPEM = try String(contentsOfFile: (generation as NSString).appendingPathComponent("key.pem"), encoding: .utf8)
            chainPEM = try String(contentsOfFile: (generation as NSString).appendingPathComponent("chain.pem"), encoding: .utf8)
        } catch {
            throw PeerClientError(.storage, "cannot read the credential in \(generation)")
        }
        let renewAfter = (try? Data(contentsOf: URL(fileURLWithPath: (generation as NSString).appendingPathComponent("credential.json"))))
            .flatMap { try? JSONValue.parse(Array($0)) }?.objectValue?["renewAfter"]?.stringValue.flatMap(ISO8601.parse)
        return try StoredCredential(keyPEM: keyPEM, chainPEM: chainPEM, renewAfter: renewAfter, store: self)
    }

    /// Writes `credential` as a new generation and makes it current; removes the generations
    /// before it.
    func save(_ credential: StoredCredential) throws(PeerClientError) {
        removeLeftovers()
        let name = "gen-\(credential.serial)"
        let temporary = path(".new-\(UUID().uuidString)")
        guard mkdir(temporary, 0o700) == 0 else { throw PeerClientError(.storage, "cannot write in \(directory): \(Self.reason())") }
        let metadata = JSONValue.object([
            "serial": .string(credential.serial), "spiffeID": .string(credential.spiffeID),
            "notAfter": .string(ISO8601Text.string(credential.notAfter)), "renewAfter": .string(ISO8601Text.string(credential.renewAfter)),
        ])
        do throws(SecureFileError) {
            try SecureFile.writeNew((temporary as NSString).appendingPathComponent("key.pem"), Array(credential.keyPEM.utf8), mode: 0o600)
            try SecureFile.writeNew((temporary as NSString).appendingPathComponent("chain.pem"), Array(credential.chainPEM.utf8), mode: 0o644)
            try SecureFile.writeNew((temporary as NSString).appendingPathComponent("credential.json"), Array((metadata.compactText + "\n").utf8), mode: 0o644)
        } catch {
            Self.remove(temporary)
            throw PeerClientError(.storage, error.message)
        }
        let previous = currentGeneration()
        try sync(temporary)
        if previous != name {
            Self.remove(path(name))  // an earlier attempt at the same serial that never became current
            guard rename(temporary, path(name)) == 0 else {
                let reason = Self.reason()
                Self.remove(temporary)
                throw PeerClientError(.storage, "cannot move the new credential into place: \(reason)")
            }
        } else {
            Self.remove(temporary)  // the same certificate again: already current
        }
        let link = path(".current-\(UUID().uuidString)")
        guard symlink(name, link) == 0 else { throw PeerClientError(.storage, "cannot link the new credential: \(Self.reason())") }
        try sync(directory)
        guard rename(link, path("current")) == 0 else {
            unlink(link)
            throw PeerClientError(.storage, "cannot make the new credential current: \(Self.reason())")
        }
        try sync(directory)
        for (top, target) in [("key.pem", "current/key.pem"), ("chain.pem", "current/chain.pem")] where linkTarget(top) != target {
            unlink(path(top))
            symlink(target, path(top))
        }
        removeLeftovers()
    }

    /// The latest revocation list fetched (DER), or nil.
    func loadRevocationList() -> [UInt8]? {
        (try? Data(contentsOf: URL(fileURLWithPath: path("crl.der")))).map(Array.init)
    }

    /// Replaces the stored revocation list (atomically: a new file renamed over the old).
    func saveRevocationList(_ der: [UInt8]) throws(PeerClientError) {
        do throws(SecureFileError) { try SecureFile.replace(path("crl.der"), der, mode: 0o644) } catch {
            throw PeerClientError(.storage, error.message)
        }
    }

    /// The generation `current` links to, when it exists.
    func currentGeneration() -> String? {
        guard let name = linkTarget("current"), name.hasPrefix("gen-"), !name.contains("/"), FileManager.default.fileExists(atPath: path(name)) else {
            return nil
        }
        return name
    }

    /// What the symbolic link `name` in the directory points to, or nil.
    private func linkTarget(_ name: String) -> String? {
        var buffer = [CChar](repeating: 0, count: 256)
        let length = readlink(path(name), &buffer, buffer.count - 1)
        guard length > 0 else { return nil }
        return String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Removes what an interrupted write left (temporary directories and links) and every
    /// generation but the current one.
    func removeLeftovers() {
        let current = currentGeneration()
        for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] {
            if name.hasPrefix(".new-") || name.hasPrefix(".current-") || (name.hasPrefix("crl.der.") && name.hasSuffix(".tmp")) || name.hasPrefix(".tokentool-")
                || (name.hasPrefix("gen-") && name != current)
            {
                Self.remove(path(name))
            }
        }
    }

    private func sync(_ directory: String) throws(PeerClientError) {
        do throws(SecureFileError) { try SecureFile.flushDirectory(directory) } catch { throw PeerClientError(.storage, error.message) }
    }

    private static func remove(_ path: String) {
        if unlink(path) != 0 { try? FileManager.default.removeItem(atPath: path) }
    }

    static func reason() -> String { String(cString: strerror(errno)) }
}

/// A key and the certificate chain issued for it, checked to belong together.
struct StoredCredential: Sendable {
    let keyPEM: String
    let chainPEM: String
    let chain: [Certificate]
    let serial: String
    let spiffeID: String
    let notAfter: Date
    let renewAfter: Date

    /// Checks that the chain parses, that its leaf certifies `keyPEM`'s key and carries one
    /// SPIFFE ID; `renewAfter` defaults to two thirds of the leaf's validity.
    init(keyPEM: String, chainPEM: String, renewAfter: Date?, store: CredentialStore? = nil) throws(PeerClientError) {
        let where_ = store.map { " in \($0.directory)" } ?? ""
        let chain: [Certificate]
        do { chain = try DeviceCSR.certificates(pem: chainPEM) } catch {
            throw PeerClientError(.invalidReply, "the certificate chain\(where_) is not PEM certificates")
        }
        guard let leaf = chain.first else { throw PeerClientError(.invalidReply, "the certificate chain\(where_) is empty") }
        let key: Certificate.PrivateKey
        do { key = try Certificate.PrivateKey(pemEncoded: keyPEM) } catch {
            throw PeerClientError(.storage, "the device key\(where_) is not a PEM private key")
        }
        guard key.publicKey == leaf.publicKey else {
            throw PeerClientError(.invalidReply, "the certificate\(where_) is not for the device's key")
        }
        guard let spiffeID = PeerVerifier.spiffeURI(leaf) else {
            throw PeerClientError(.invalidReply, "the certificate\(where_) does not carry exactly one SPIFFE ID")
        }
        self.keyPEM = keyPEM
        self.chainPEM = chainPEM
        self.chain = chain
        self.serial = SerialNumbers.hex(leaf.serialNumber)
        self.spiffeID = spiffeID
        self.notAfter = leaf.notValidAfter
        let start = leaf.notValidBefore
        self.renewAfter = renewAfter ?? start.addingTimeInterval(leaf.notValidAfter.timeIntervalSince(start) * 2 / 3)
    }

    var leaf: Certificate { chain[0] }

    /// The certificate of the CA that issued the leaf: the next in the chain, else the root
    /// among `roots` whose subject is the leaf's issuer.
    func issuerCertificate(roots: [Certificate]) -> Certificate? {
        if chain.count > 1 { return chain[1] }
        return roots.first { $0.subject == leaf.issuer }
    }
}

/// Reading the service's ISO 8601 times (`2026-11-28T21:00:00Z`).
enum ISO8601 {
    static func parse(_ text: String) -> Date? { try? Date(text, strategy: .iso8601) }
}
