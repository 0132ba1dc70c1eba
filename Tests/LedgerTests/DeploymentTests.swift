import Foundation
@testable import PeerCA
import TestSupport
import Testing

/// A CA deployment: ca.json's defaults and types, the file modes, and never overwriting.
@Suite("CA deployment")
struct DeploymentTests {
    @Test func settingsTakeTheirDefaultsAndRefuseBadValues() throws {
        let minimal = try CASettings.decode(Array(#"{"appID": "My-App"}"#.utf8), from: "ca.json")
        #expect(minimal == CASettings(appID: "My-App"))
        #expect(minimal.provider == CASettings.defaultProvider)
        #expect(minimal.maximumValidity == CASettings.defaultMaximumValidity)
        #expect(minimal.tokenReuse == .unlimited)
        #expect(try minimal.issuancePolicy().trustDomain == "my-app")
        let once = try CASettings.decode(Array(#"{"appID": "a", "tokenReuse": "once", "store": "sqlite:/x/l.sqlite"}"#.utf8), from: "ca.json")
        #expect(once.tokenReuse == .oncePerTokenID)
        #expect(once.store == .sqlite(path: "/x/l.sqlite"))
        for (json, fragment) in [
            (#"{"provider": "x"}"#, "\"appID\" is required"), (#"{"appID": "a", "tokenReuse": "twice"}"#, "once or unlimited"),
            (#"{"appID": "a", "store": "mysql://x"}"#, "sqlite:PATH"), (#"{"appID": 7}"#, "appID"), ("not json", "ca.json"),
        ] {
            let error = #expect(throws: PeerCAError.self) { _ = try CASettings.decode(Array(json.utf8), from: "ca.json") }
            #expect(error?.code == .invalidSettings)
            #expect(error?.message.contains(fragment) == true, "\(error?.message ?? "")")
        }
        for validity in [10, .infinity, .nan] as [Double] {
            let refused = #expect(throws: PeerCAError.self, "\(validity)") { _ = try CASettings(appID: "a", maximumValidity: validity).issuancePolicy() }
            #expect(refused?.code == .invalidSettings)
        }
    }

    /// Creation is all or nothing: settings that cannot be used leave no file (an infinite
    /// maximum validity was refused only when ca.json was encoded, after the keys and
    /// certificates were written), and a file that cannot be written removes those written
    /// before it, and the directory the creation made, so that a retry finds nothing to refuse.
    @Test func aCreationThatFailsLeavesNothing() throws {
        let parent = try temporaryDirectory()
        let dir = parent.appendingPathComponent("ca").path
        let deployment = CADeployment(directory: dir)
        let material = try CertificateAuthority.create(name: "Test", withIntermediate: true)
        let infinite = #expect(throws: PeerCAError.self) {
            try deployment.create(material, settings: CASettings(appID: "app", maximumValidity: .infinity), passphrase: nil)
        }
        #expect(infinite?.code == .invalidSettings)
        #expect(!FileManager.default.fileExists(atPath: dir))

        // root.pem cannot be written (a dangling link is in its place, which the check for
        // existing files does not see): the two keys written before it go again.
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: deployment.files.rootCertificate, withDestinationPath: "/nonexistent/root.pem")
        let blocked = #expect(throws: PeerCAError.self) { try deployment.create(material, settings: CASettings(appID: "app"), passphrase: nil) }
        #expect(blocked?.message.contains("root.pem") == true, "\(String(describing: blocked))")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["root.pem"])
        #expect(FileManager.default.fileExists(atPath: dir), "a directory the creation did not make stays")

        try FileManager.default.removeItem(atPath: deployment.files.rootCertificate)
        try deployment.create(material, settings: CASettings(appID: "app"), passphrase: nil)
        #expect(Set(try FileManager.default.contentsOfDirectory(atPath: dir)) == ["ca.json", "issuer.key", "issuer.pem", "root.key", "root.pem"])

        // ca.json is the last file: when it cannot be written, the CA's files go too.
        let other = CADeployment(directory: parent.appendingPathComponent("other").path)
        try FileManager.default.createDirectory(atPath: other.directory, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: other.settingsPath, withDestinationPath: "/nonexistent/ca.json")
        #expect(throws: PeerCAError.self) { try other.create(material, settings: CASettings(appID: "app"), passphrase: nil) }
        #expect(try FileManager.default.contentsOfDirectory(atPath: other.directory) == ["ca.json"])
    }

    /// A new CA directory appears whole or not at all: its files are written into a hidden
    /// directory beside it and that is renamed into place, so a process killed midway (which no
    /// rollback can follow) leaves nothing at the CA's name that a retry would refuse to overwrite
    /// or a server would half load. An error midway removes the hidden directory too.
    @Test func aNewCADirectoryAppearsWholeOrNotAtAll() throws {
        let parent = try temporaryDirectory()
        let dir = parent.appendingPathComponent("state/ca").path
        let deployment = CADeployment(directory: dir)
        let material = try CertificateAuthority.create(name: "Test", withIntermediate: true)
        let settings = CASettings(appID: "app")
        var seen: [String] = []
        try deployment.files.create(material, passphrase: nil, then: [try deployment.settingsFile(settings)]) { path in
            // At every point a crash could come, the CA's name holds nothing.
            #expect(!FileManager.default.fileExists(atPath: dir), "\(path) written while \(dir) already exists")
            #expect((path as NSString).deletingLastPathComponent.hasPrefix(parent.appendingPathComponent("state/.ca.creating-").path), "\(path)")
            seen.append((path as NSString).lastPathComponent)
        }
        #expect(seen == ["issuer.key", "root.key", "root.pem", "issuer.pem", "ca.json"])
        #expect(deployment.exists)
        #expect(try deployment.settings() == settings)
        #expect(Set(try FileManager.default.contentsOfDirectory(atPath: dir)) == Set(seen))
        #expect(try FileManager.default.contentsOfDirectory(atPath: parent.appendingPathComponent("state").path) == ["ca"], "no hidden directory left")
        #expect(SecureFile.permissions(dir) == 0o700)
        #expect(SecureFile.permissions(deployment.files.issuerKey) == 0o600)
        _ = try deployment.files.load(passphrase: nil)

        // A failure after the keys (here the third file): nothing at the name, no hidden directory.
        let other = CADeployment(directory: parent.appendingPathComponent("other").path)
        struct Stop: Error {}
        var count = 0
        #expect(throws: PeerCAError.self) {
            try other.files.create(material, passphrase: nil, then: []) { _ in
                count += 1
                if count == 3 { throw Stop() }
            }
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: parent.path).sorted() == ["state"])
        try other.create(material, settings: settings, passphrase: nil)
        #expect(other.exists)
    }

    @Test func createWritesKeysCertificatesAndSettingsOnce() throws {
        let dir = try temporaryDirectory().appendingPathComponent("ca").path
        let deployment = CADeployment(directory: dir)
        #expect(!deployment.exists)
        #expect(try deployment.settings() == nil)
        // A ca.json that is there but cannot be read is an error, not "no settings" (which would
        // send a CA whose settings name PostgreSQL to a new SQLite ledger).
        try FileManager.default.createDirectory(atPath: deployment.settingsPath, withIntermediateDirectories: true)
        let unreadable = #expect(throws: PeerCAError.self) { _ = try deployment.settings() }
        #expect(unreadable?.message.contains("it is a directory") == true, "\(String(describing: unreadable))")
        try FileManager.default.removeItem(atPath: deployment.settingsPath)
        let settings = CASettings(appID: "app", tokenReuse: .oncePerTokenID, store: try LedgerLocation("postgres://tt:pw@db/tt"))
        try deployment.create(try CertificateAuthority.create(name: "Test", withIntermediate: true), settings: settings, passphrase: nil)
        #expect(deployment.exists)
        #expect(try deployment.settings() == settings)
        #expect(SecureFile.permissions(deployment.settingsPath) == 0o600, "a store password keeps ca.json private")
        #expect(SecureFile.permissions(deployment.files.issuerKey) == 0o600)
        #expect(deployment.ledgerLocation(settings: settings) == settings.store)
        #expect(deployment.ledgerLocation(settings: nil) == .sqlite(path: deployment.defaultLedgerPath))
        let override = LedgerLocation.sqlite(path: "/elsewhere.sqlite")
        #expect(deployment.ledgerLocation(settings: settings, override: override) == override)
        let again = #expect(throws: PeerCAError.self) {
            try deployment.create(try CertificateAuthority.create(name: "Other"), settings: settings, passphrase: nil)
        }
        #expect(again?.code == .fileExists)
        _ = try deployment.files.load(passphrase: nil)

        let plain = CADeployment(directory: try temporaryDirectory().appendingPathComponent("ca").path)
        try plain.create(try CertificateAuthority.create(name: "Test"), settings: CASettings(appID: "app"), passphrase: nil)
        #expect(SecureFile.permissions(plain.settingsPath) == 0o644)
    }
}
