import Foundation
import PeerCA
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
        let short = #expect(throws: PeerCAError.self) { _ = try CASettings(appID: "a", maximumValidity: 10).issuancePolicy() }
        #expect(short?.code == .invalidSettings)
    }

    @Test func createWritesKeysCertificatesAndSettingsOnce() throws {
        let dir = try temporaryDirectory().appendingPathComponent("ca").path
        let deployment = CADeployment(directory: dir)
        #expect(!deployment.exists)
        #expect(try deployment.settings() == nil)
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
