public import Foundation
public import PeerCA
import Synchronization
#if canImport(Glibc)
import Glibc
#endif
public import TokenKit

/// The signing keys of the service's own token issuer (token exchange), kept in one directory
/// that every instance reads — the choice for several instances: a shared (0700) key directory,
/// rather than private keys in the ledger database, so the database never holds a private key and
/// rotation is one command run where the directory lives.
///
/// The directory holds `keys.json` (the manifest) and one PKCS#8 PEM file per key (`<kid>.pem`,
/// mode 0600). Each key is `current` (signs), `next` (published before it signs, so verifiers
/// have it cached when rotation makes it current) or `retired` (no longer signs; published until
/// the last token it signed has expired). ``rotate(directory:retiredKeyLifetime:now:)`` makes the
/// next key current, retires the current one, and makes a new next key: rotation without
/// downtime. Instances reload the directory (``reload(now:)``) to pick up a rotation.
public final class IssuerKeyRing: Sendable {
    /// One key's place in the rotation.
    public struct Entry: Sendable, Codable, Hashable {
        public enum State: String, Sendable, Codable, Hashable { case current, next, retired }
        public var kid: String
        public var state: State
        /// For a retired key: published until then (the expiry of the last token it signed).
        public var publishUntil: Date?
    }

    struct Manifest: Codable {
        var keys: [Entry]
    }

    public let directory: String
    private let loaded = Mutex<(signing: JWTKey, published: [JWTKey])?>(nil)

    init(directory: String) { self.directory = directory }

    /// Opens the key directory, making it (mode 0700) with a current and a next ES256 key when it
    /// does not exist and `createIfMissing`.
    public static func open(directory: String, createIfMissing: Bool) throws(PeerCAError) -> IssuerKeyRing {
        let ring = IssuerKeyRing(directory: directory)
        if !FileManager.default.fileExists(atPath: ring.manifestPath) {
            guard createIfMissing else { throw PeerCAError(.invalidSettings, "\(directory) holds no issuer keys (keys.json)") }
            do {
                try initialize(directory: directory)
            } catch where error.code == .fileExists {
                // Another instance starting beside this one made them first: use those.
            }
        }
        try ring.reload()
        return ring
    }

    var manifestPath: String { (directory as NSString).appendingPathComponent("keys.json") }
    func keyPath(_ kid: String) -> String { (directory as NSString).appendingPathComponent("\(kid).pem") }

    /// Makes a new key directory with a current and a next key; refuses an existing manifest
    /// (`PeerCAError.Code.fileExists`) before it makes a key. All or nothing: keys whose
    /// manifest could not be written are deleted again.
    public static func initialize(directory: String) throws(PeerCAError) {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch { throw PeerCAError(.io, "cannot create \(directory)") }
        let ring = IssuerKeyRing(directory: directory)
        try ring.exclusively { () throws(PeerCAError) in
            // Each refused `issuer init` on a key directory made two private keys that nothing listed.
            if FileManager.default.fileExists(atPath: ring.manifestPath) {
                throw PeerCAError(.fileExists, "\(ring.manifestPath) exists; the issuer keys are never made again (rotate them)")
            }
            let current = try ring.newKey(), next = try ring.newKey()
            let manifest = try ring.manifestBytes(Manifest(keys: [Entry(kid: current.kid, state: .current), Entry(kid: next.kid, state: .next)]))
            do throws(SecureFileError) {
                try SecureFile.writeAllNew([current.file, next.file, SecureFile.NewFile(path: ring.manifestPath, contents: manifest, mode: 0o644)])
            } catch { throw PeerCAError(error) }
        }
    }

    /// The key that signs now (private, with its `kid`).
    public var signingKey: JWTKey {
        get throws(PeerCAError) {
            guard let loaded = loaded.withLock({ $0 }) else { throw PeerCAError(.invalidSettings, "the issuer keys are not loaded") }
            return loaded.signing
        }
    }

    /// The public keys to publish: current, next, and the retired ones still within their time.
    public var publishedKeys: [JWTKey] { loaded.withLock { $0?.published ?? [] } }

    /// Re-reads the manifest and the key files (a rotation made elsewhere takes effect here).
    public func reload(now: Date = Date()) throws(PeerCAError) {
        let manifest = try readManifest()
        guard let current = manifest.keys.first(where: { $0.state == .current }) else {
            throw PeerCAError(.invalidSettings, "\(manifestPath) names no current key")
        }
        let signing = try loadKey(current.kid)
        var published: [JWTKey] = []
        for entry in manifest.keys where entry.state != .retired || (entry.publishUntil ?? .distantPast) > now {
            published.append(entry.kid == current.kid ? signing.publicKey : try loadKey(entry.kid).publicKey)
        }
        loaded.withLock { $0 = (signing, published) }
    }

    /// Rotates the keys in `directory`: next → current, current → retired (published for
    /// `retiredKeyLifetime` more seconds: the longest lifetime of a token it signed), a new next
    /// key; retired keys past their time are deleted. Returns the new manifest.
    @discardableResult
    public static func rotate(directory: String, retiredKeyLifetime: TimeInterval, now: Date = Date()) throws(PeerCAError) -> [Entry] {
        let ring = IssuerKeyRing(directory: directory)
        return try ring.exclusively { () throws(PeerCAError) in try ring.rotate(retiredKeyLifetime: retiredKeyLifetime, now: now) }
    }

    /// ``rotate(directory:retiredKeyLifetime:now:)`` under the directory's lock: two rotations at
    /// once each made a new key, and the manifest renamed last named only its own.
    private func rotate(retiredKeyLifetime: TimeInterval, now: Date) throws(PeerCAError) -> [Entry] {
        var manifest = try readManifest()
        guard let current = manifest.keys.firstIndex(where: { $0.state == .current }),
            let next = manifest.keys.firstIndex(where: { $0.state == .next })
        else { throw PeerCAError(.invalidSettings, "\(manifestPath) needs a current and a next key") }
        manifest.keys[current].state = .retired
        manifest.keys[current].publishUntil = now.addingTimeInterval(retiredKeyLifetime)
        manifest.keys[next].state = .current
        let added = try newKey()
        manifest.keys.append(Entry(kid: added.kid, state: .next))
        let expired = manifest.keys.filter { $0.state == .retired && ($0.publishUntil ?? .distantPast) <= now }
        manifest.keys.removeAll { entry in expired.contains(entry) }
        do throws(SecureFileError) { try SecureFile.writeNew(added.file.path, added.file.contents, mode: added.file.mode) } catch {
            throw PeerCAError(error)
        }
        do { try replaceManifest(manifest) } catch {
            unlink(added.file.path)  // a key the manifest does not name
            throw error
        }
        for entry in expired { unlink(keyPath(entry.kid)) }
        return manifest.keys
    }

    /// The manifest's entries, for listing.
    public static func entries(directory: String) throws(PeerCAError) -> [Entry] {
        try IssuerKeyRing(directory: directory).readManifest().keys
    }

    // MARK: Files

    /// `body` holding the directory's lock (`flock` on `.keys.lock` in it): one initialization or
    /// rotation at a time, across processes.
    private func exclusively<T>(_ body: () throws(PeerCAError) -> T) throws(PeerCAError) -> T {
        let path = (directory as NSString).appendingPathComponent(".keys.lock")
        let descriptor = Glibc.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw PeerCAError(.io, "cannot open \(path): \(String(cString: strerror(errno)))") }
        defer { close(descriptor) }
        guard flock(descriptor, LOCK_EX) == 0 else { throw PeerCAError(.io, "cannot lock \(path): \(String(cString: strerror(errno)))") }
        return try body()
    }

    /// A new ES256 key, named by its thumbprint, and its file (not written yet).
    private func newKey() throws(PeerCAError) -> (kid: String, file: SecureFile.NewFile) {
        let key: JWTKey
        do { key = try JWTKey.generate(.ec(.p256)) } catch { throw PeerCAError(.invalidCAMaterial, "cannot make an issuer key: \(error.message)") }
        let kid: String
        do { kid = try key.thumbprint() } catch { throw PeerCAError(.invalidCAMaterial, "cannot name an issuer key: \(error.message)") }
        let pem: String
        do { pem = try key.privatePEM() } catch { throw PeerCAError(.invalidCAMaterial, "cannot encode an issuer key: \(error.message)") }
        return (kid, SecureFile.NewFile(path: keyPath(kid), contents: Array(pem.utf8), mode: 0o600))
    }

    private func loadKey(_ kid: String) throws(PeerCAError) -> JWTKey {
        guard kid.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
            throw PeerCAError(.invalidSettings, "\(manifestPath) names a key id that is not a file name")
        }
        let path = keyPath(kid)
        do throws(SecureFileError) { try SecureFile.checkPrivate(path) } catch { throw PeerCAError(error) }
        let data = try Self.read(path)
        do { return try JWTKey(pem: String(decoding: data, as: UTF8.self), algorithms: [.es256], kid: kid) } catch {
            throw PeerCAError(.invalidCAMaterial, "\(path): \(error.message)")
        }
    }

    /// A key or manifest file's bytes, at most ``BoundedFile/defaultLimit``.
    private static func read(_ path: String) throws(PeerCAError) -> [UInt8] {
        do throws(BoundedFile.Failure) { return try BoundedFile.read(path) } catch { throw PeerCAError(.io, error.description) }
    }

    private func readManifest() throws(PeerCAError) -> Manifest {
        let data = Data(try Self.read(manifestPath))
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        do { return try decoder.decode(Manifest.self, from: data) } catch {
            throw PeerCAError(.invalidSettings, "\(manifestPath) is not an issuer key manifest")
        }
    }

    /// The manifest's text.
    private func manifestBytes(_ manifest: Manifest) throws(PeerCAError) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        encoder.dateEncodingStrategy = .secondsSince1970
        do { return Array(try encoder.encode(manifest)) + [0x0a] } catch { throw PeerCAError(.io, "cannot encode the issuer key manifest") }
    }

    /// Replaces the manifest (rotation): a temporary file renamed over the old one, so a reader
    /// sees the old or the new manifest, never half of one.
    private func replaceManifest(_ manifest: Manifest) throws(PeerCAError) {
        let bytes = try manifestBytes(manifest)
        do throws(SecureFileError) { try SecureFile.replace(manifestPath, bytes, mode: 0o644) } catch { throw PeerCAError(error) }
    }
}
