import Foundation
import PeerCA
import TestSupport
import Testing
import TokenKit
@testable import TokenServer

/// The service's real providers, end to end: tokens from a HAT PDA, an OpenID Connect issuer, a
/// JWK Set URL and a PEM key file go through `/v1/auth` (Ditto's webhook) and `/v1/certificates`
/// over a real socket, the remote keys fetched over HTTPS from a loopback server (keyserver.py
/// with the test CA's certificate for `*.hubat.net`, `*.hubofallthings.net` and `idp.test`) that
/// the providers reach through their `caFile`, `hostOverrides` and `pdaPort`.
@Suite("Providers end to end: pda, oidc, jwks and pem through the service")
struct ProviderEndToEndTests {
    /// A provider as its configuration file states it.
    static func provider(_ json: String) throws -> ServerConfiguration.Provider {
        try JSONDecoder().decode(ServerConfiguration.Provider.self, from: Data(json.utf8))
    }

    static let everything = #""permissions": {"read": {"everything": true, "queriesByCollection": {}}, "write": {"everything": true, "queriesByCollection": {}}}"#

    /// `/v1/auth` for `token` through `provider`: the HTTP status and the answer.
    static func auth(_ server: LiveServer, _ provider: String, _ token: String) async throws -> (status: Int, json: [String: JSONValue]) {
        try await server.json("/v1/auth", ["appID": .string("dev"), "provider": .string(provider), "token": .string(token)])
    }

    /// `/v1/certificates` for `token` through `provider` with a new device key's CSR.
    static func certificate(_ server: LiveServer, _ provider: String, _ token: String) async throws -> (status: Int, json: [String: JSONValue]) {
        let csr = try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate())
        return try await server.json("/v1/certificates", ["provider": .string(provider), "token": .string(token), "csr": .string(csr)])
    }

    static func accepted(_ reply: (status: Int, json: [String: JSONValue]), userID: String, _ comment: String) {
        #expect(reply.status == 200, "\(comment): \(reply.json)")
        #expect(reply.json["authenticate"] == .bool(true), "\(comment): \(reply.json)")
        #expect(reply.json["userID"]?.stringValue == userID, "\(comment): \(reply.json)")
    }

    static func refused(_ reply: (status: Int, json: [String: JSONValue]), code: String, _ comment: String) {
        #expect(reply.status == 200, "\(comment): \(reply.json)")
        #expect(reply.json["authenticate"] == .bool(false), "\(comment): \(reply.json)")
        #expect(reply.json["error"].errorCode == code, "\(comment): \(reply.json)")
    }

    static func issued(_ reply: (status: Int, json: [String: JSONValue]), account: String, _ comment: String) throws {
        #expect(reply.status == 200, "\(comment): \(reply.json)")
        #expect(reply.json["identity"]?.objectValue?["account"]?.stringValue == account, "\(comment): \(reply.json)")
        let pem = try #require(reply.json["certificate"]?.stringValue, "\(comment)")
        #expect(pem.hasPrefix("-----BEGIN CERTIFICATE-----"), "\(comment)")
    }

    /// A HAT token through a `pda` provider: the key from the token's own PDA (`/publickey`), only
    /// PDAs under `allowedDomains` asked at all, only `applications` accepted.
    @Test func hatTokensThroughAPDAProvider() async throws {
        let pki = try TestPKI.shared.get()
        let keys = try KeyServer(routes: [
            "alice.hubat.net/publickey": Route(body: TestKeys.publicPEM(TestKeys.rsa)),
            "bob.hubofallthings.net/publickey": Route(body: TestKeys.publicPEM(TestKeys.rsa)),
        ])
        defer { keys.stop() }
        let hat = try Self.provider("""
            {"type": "pda", "allowedDomains": [".hubat.net"], "applications": ["my-app"], "caFile": "\(pki.caFile)",
             "hostOverrides": {"alice.hubat.net": "127.0.0.1", "bob.hubofallthings.net": "127.0.0.1"}, "pdaPort": \(keys.port),
             \(Self.everything)}
            """)
        try await LiveServer.with(configure: { $0.providers["hat"] = hat }) { server in
            let now = Date().timeIntervalSince1970
            let alice = try sign(hatClaims(iss: "alice.hubat.net", now: now), with: TestKeys.rsa)
            // A PDA's owner is the PDA: the account is its address.
            Self.accepted(try await Self.auth(server, "hat", alice), userID: "hat:alice.hubat.net", "alice")
            try Self.issued(try await Self.certificate(server, "hat", alice), account: "hat:alice.hubat.net", "alice's certificate")
            #expect(keys.count("alice.hubat.net/publickey") == 1, "one fetch, then the cached key: \(keys.requests)")

            // Signed by another key: refused, the PDA's key did not verify it.
            let forged = try sign(hatClaims(iss: "alice.hubat.net", now: now), with: TestKeys.rsa2)
            Self.refused(try await Self.auth(server, "hat", forged), code: "bad_signature", "forged")
            // Outside allowedDomains: refused before any request to that PDA.
            let outside = try sign(hatClaims(iss: "bob.hubofallthings.net", now: now), with: TestKeys.rsa)
            Self.refused(try await Self.auth(server, "hat", outside), code: "issuer_mismatch", "bob's PDA is not under .hubat.net")
            #expect(keys.count("bob.hubofallthings.net") == 0, "\(keys.requests)")
            // Another application, or none: refused.
            let other = try sign(hatClaims(iss: "alice.hubat.net", now: now, application: "other-app"), with: TestKeys.rsa)
            Self.refused(try await Self.auth(server, "hat", other), code: "application_not_allowed", "other-app")
            let none = try sign(hatClaims(iss: "alice.hubat.net", now: now, application: nil), with: TestKeys.rsa)
            Self.refused(try await Self.auth(server, "hat", none), code: "application_not_allowed", "no application")
            let certificate = try await Self.certificate(server, "hat", other)
            #expect(certificate.status == 401 && certificate.json["error"].errorCode == "application_not_allowed", "\(certificate.json)")
        }
    }

    /// An OIDC provider: discovery, then the JWK Set it names; a key rotated at the issuer is
    /// picked up once the store's refresh cooldown (30 s after its last fetch) has passed.
    @Test(.timeLimit(.minutes(3))) func oidcTokensAndARotatedKey() async throws {
        let pki = try TestPKI.shared.get()
        let keys = try KeyServer()
        defer { keys.stop() }
        let issuer = "https://idp.test:\(keys.port)/tenant"
        let discovery = Route(body: #"{"issuer":"\#(issuer)","jwks_uri":"https://idp.test:\#(keys.port)/tenant/keys"}"#)
        try keys.setRoutes([
            "idp.test/tenant/.well-known/openid-configuration": discovery,
            "idp.test/tenant/keys": Route(body: try TestKeys.jwks([(TestKeys.ec, "k1")])),
        ])
        let oidc = try Self.provider("""
            {"type": "oidc", "issuer": "\(issuer)", "audiences": ["my-api"], "caFile": "\(pki.caFile)",
             "hostOverrides": {"idp.test": "127.0.0.1"}, \(Self.everything)}
            """)
        try await LiveServer.with(configure: { $0.providers["idp"] = oidc }) { server in
            func token(_ key: JWTKey, kid: String, audience: String = "my-api") throws -> String {
                let now = Int(Date().timeIntervalSince1970)
                return try sign(
                    ["iss": .string(issuer), "sub": .string("u-1"), "aud": .string(audience), "iat": .integer(now), "exp": .integer(now + 600)],
                    with: key, kid: kid)
            }
            Self.accepted(try await Self.auth(server, "idp", try token(TestKeys.ec, kid: "k1")), userID: "idp:u-1", "k1")
            try Self.issued(try await Self.certificate(server, "idp", try token(TestKeys.ec, kid: "k1")), account: "idp:u-1", "k1 certificate")
            #expect(keys.count("/tenant/.well-known/openid-configuration") == 1 && keys.count("/tenant/keys") == 1, "\(keys.requests)")
            Self.refused(try await Self.auth(server, "idp", try token(TestKeys.ec, kid: "k1", audience: "other")), code: "audience_mismatch", "aud")

            // The issuer rotates to k2 (k1 still published).
            let rotated = try JWTKey.generate(.ec(.p256))
            try keys.setRoutes([
                "idp.test/tenant/.well-known/openid-configuration": discovery,
                "idp.test/tenant/keys": Route(body: try JWKSet(keys: [TestKeys.ec.publicKey.with(kid: "k1"), rotated.publicKey.with(kid: "k2")]).jsonText()),
            ])
            var reply = try await Self.auth(server, "idp", try token(rotated, kid: "k2"))
            let deadline = ContinuousClock.now + .seconds(120)
            while reply.json["authenticate"] != .bool(true), ContinuousClock.now < deadline {
                try await Task.sleep(for: .seconds(1))
                reply = try await Self.auth(server, "idp", try token(rotated, kid: "k2"))
            }
            Self.accepted(reply, userID: "idp:u-1", "k2 after the rotation")
            #expect(keys.count("/tenant/keys") == 2, "one refetch for the new kid, however many tries: \(keys.requests)")
            Self.accepted(try await Self.auth(server, "idp", try token(TestKeys.ec, kid: "k1")), userID: "idp:u-1", "k1 after the rotation")
        }
    }

    /// A `jwks` provider (a JWK Set URL and its issuers) and a `pem` provider (a public key file),
    /// side by side; each refuses the other's tokens.
    @Test func jwksAndPEMProviders() async throws {
        let pki = try TestPKI.shared.get()
        let keys = try KeyServer(routes: ["idp.test/jwks.json": Route(body: try TestKeys.jwks([(TestKeys.ec, "p1")]))])
        defer { keys.stop() }
        let dir = try temporaryDirectory()
        let keyFile = dir.appendingPathComponent("legacy.pub")
        try TestKeys.publicPEM(TestKeys.rsa).write(to: keyFile, atomically: true, encoding: .utf8)
        let partner = try Self.provider("""
            {"type": "jwks", "url": "https://idp.test:\(keys.port)/jwks.json", "issuers": ["https://idp.test/"], "caFile": "\(pki.caFile)",
             "hostOverrides": {"idp.test": "127.0.0.1"}, \(Self.everything)}
            """)
        let legacy = try Self.provider(#"{"type": "pem", "keyFile": "\#(keyFile.path)", "issuers": ["legacy"], \#(Self.everything)}"#)
        try await LiveServer.with(configure: {
            $0.providers["partner"] = partner
            $0.providers["legacy"] = legacy
        }) { server in
            let now = Int(Date().timeIntervalSince1970)
            let partnerToken = try sign(["iss": .string("https://idp.test/"), "sub": .string("p-9"), "exp": .integer(now + 600)], with: TestKeys.ec, kid: "p1")
            let legacyToken = try sign(["iss": .string("legacy"), "sub": .string("l-3"), "exp": .integer(now + 600)], with: TestKeys.rsa)
            Self.accepted(try await Self.auth(server, "partner", partnerToken), userID: "partner:p-9", "jwks")
            try Self.issued(try await Self.certificate(server, "partner", partnerToken), account: "partner:p-9", "jwks certificate")
            Self.accepted(try await Self.auth(server, "legacy", legacyToken), userID: "legacy:l-3", "pem")
            try Self.issued(try await Self.certificate(server, "legacy", legacyToken), account: "legacy:l-3", "pem certificate")
            // Each provider's keys and issuers are its own: the signature is checked first (an
            // ES256 kid the PEM file does not have; RS256 where the set holds only an EC key),
            // then the issuer.
            Self.refused(try await Self.auth(server, "legacy", partnerToken), code: "unknown_key", "a jwks token at the pem provider")
            Self.refused(try await Self.auth(server, "partner", legacyToken), code: "algorithm_not_allowed", "a pem token at the jwks provider")
            let wrongIssuer = try sign(["iss": .string("https://idp.test/"), "sub": .string("l-3"), "exp": .integer(now + 600)], with: TestKeys.rsa)
            Self.refused(try await Self.auth(server, "legacy", wrongIssuer), code: "issuer_mismatch", "the pem key, another issuer")
            #expect(keys.count("/jwks.json") == 1, "\(keys.requests)")
        }
    }

    /// `caFile` is what lets a provider trust a private PKI: the same JWK Set URL without it (the
    /// system's trust store) cannot be had, and the token is answered 503 keys_unavailable — the
    /// keys' fault, not the token's.
    @Test func withoutCAFileAPrivatePKIIsNotTrusted() async throws {
        let keys = try KeyServer(routes: ["idp.test/jwks.json": Route(body: try TestKeys.jwks([(TestKeys.ec, "p1")]))])
        defer { keys.stop() }
        let untrusting = try Self.provider("""
            {"type": "jwks", "url": "https://idp.test:\(keys.port)/jwks.json", "issuers": ["https://idp.test/"],
             "hostOverrides": {"idp.test": "127.0.0.1"}, \(Self.everything)}
            """)
        try await LiveServer.with(configure: { $0.providers["partner"] = untrusting }) { server in
            let now = Int(Date().timeIntervalSince1970)
            let token = try sign(["iss": .string("https://idp.test/"), "sub": .string("p-9"), "exp": .integer(now + 600)], with: TestKeys.ec, kid: "p1")
            let reply = try await Self.auth(server, "partner", token)
            #expect(reply.status == 503, "\(reply.json)")
            #expect(reply.json["error"].errorCode == "keys_unavailable", "\(reply.json)")
            #expect(keys.connections >= 1, "the server was reached; its certificate was refused")
            #expect(keys.count("/jwks.json") == 0, "\(keys.requests)")
        }
    }

    /// The new settings are checked with the rest: an override to a name rather than an address,
    /// a port out of range, and `pdaPort` on a provider that is not `pda` stop `serve` naming them.
    @Test func hostOverridesAndPDAPortAreChecked() async throws {
        let cases: [(String, String)] = [
            (#"{"type": "pda", "hostOverrides": {"alice.hubat.net": "localhost"}, \#(Self.everything)}"#, "providers.p.hostOverrides"),
            (#"{"type": "pda", "pdaPort": 0, \#(Self.everything)}"#, "providers.p.pdaPort"),
            (#"{"type": "oidc", "issuer": "https://idp.test/", "pdaPort": 8443, \#(Self.everything)}"#, "providers.p.pdaPort"),
            (#"{"type": "hs256", "secretFile": "/nowhere", "issuers": ["x"], "hostOverrides": {"a": "127.0.0.1"}, \#(Self.everything)}"#, "providers.p.hostOverrides"),
        ]
        for (json, key) in cases {
            let state = try temporaryDirectory()
            var configuration = try ServerConfiguration.embeddedDefaults(state: state.path, port: 0)
            configuration.providers["p"] = try Self.provider(json)
            let error = #expect(throws: ConfigurationError.self, "\(json)") { try configuration.validate() }
            #expect(error?.key == key, "\(json): \(String(describing: error))")
        }
    }
}
