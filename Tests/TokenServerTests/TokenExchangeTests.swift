import Foundation
import Logging
import NIOHTTP1
import PeerCA
import TestSupport
import Testing
import TokenKit
@testable import TokenServer

/// The service as a token issuer (RFC 8693 token exchange) whose tokens anyone verifies with
/// ordinary tools: tokentool's discovery-based verifier and PyJWT's PyJWKClient; rotation
/// without downtime; refusals as RFC 6749 errors with nothing issued.
@Suite("Token exchange and the issuer's keys", .serialized)
struct TokenExchangeTests {
    static let grant = "urn:ietf:params:oauth:grant-type:token-exchange"
    static let jwtType = "urn:ietf:params:oauth:token-type:jwt"

    static func form(_ fields: [String: String]) -> [UInt8] {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return Array(fields.map { "\($0.key)=\($0.value.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")" }.joined(separator: "&").utf8)
    }

    static func exchange(_ server: LiveServer, _ fields: [String: String]) async throws -> (status: Int, json: [String: JSONValue]) {
        var all = ["grant_type": grant, "subject_token_type": jwtType, "audience": "partner-api", "provider": "dev"]
        all.merge(fields) { $1 }
        let (status, body, _) = try await server.request(.POST, "/v1/token", body: form(all), contentType: "application/x-www-form-urlencoded")
        return (status, (try? JSONValue.parse(body))?.objectValue ?? [:])
    }

    /// `tokentool verify --oidc <service>` as a user runs it.
    static func tokentoolVerify(_ server: LiveServer, _ token: String) async throws -> (status: Int32, out: String, err: String) {
        try await runDetached(tokentoolExecutable, [
            "verify", "--oidc", server.base, "--allow-http-loopback", "--aud", "partner-api", "--leeway", "0", "--json", "-",
        ], stdin: Data(token.utf8))
    }

    /// PyJWT's PyJWKClient, from the discovery document's jwks_uri.
    static func pyjwtVerify(_ server: LiveServer, _ token: String) async throws -> (status: Int32, out: String, err: String) {
        let script = """
            import json, sys, urllib.request, jwt
            base, token = sys.argv[1], sys.stdin.read().strip()
            config = json.load(urllib.request.urlopen(base + "/.well-known/openid-configuration"))
            key = jwt.PyJWKClient(config["jwks_uri"]).get_signing_key_from_jwt(token)
            claims = jwt.decode(token, key.key, algorithms=["ES256"], audience="partner-api", issuer=config["issuer"])
            print(claims["sub"])
            """
        let python = try #require(which("python3"))
        return try await runDetached(python, ["-c", script, server.base], stdin: Data(token.utf8))
    }

    @Test func exchangedTokensVerifyWithOrdinaryTools() async throws {
        let otherSecret = try temporaryDirectory().appendingPathComponent("other.secret").path
        try SecureFile.writeNew(otherSecret, Array("another-provider-secret-0123456789".utf8), mode: 0o600)
        try await LiveServer.with(configure: { configuration in
            configuration.issuer = ServerConfiguration.Issuer(url: nil, audiences: ["partner-api"], lifetimeSeconds: 600, keyDirectory: nil, reloadSeconds: 0.1)
            var other = configuration.providers["dev"]
            other?.secretFile = otherSecret
            configuration.providers["other"] = other
        }) { server in
            let now = Int(Date().timeIntervalSince1970)
            let subject = try server.token(["amr": .array([.string("pwd"), .string("mfa")]), "acr": .string("loa2"), "auth_time": .integer(now - 30)])
            let (status, reply) = try await Self.exchange(server, ["subject_token": subject])
            #expect(status == 200, "\(reply)")
            #expect(reply["issued_token_type"]?.stringValue == Self.jwtType)
            #expect(reply["token_type"]?.stringValue == "Bearer")
            let expiresIn = try #require(reply["expires_in"].flatMap { $0.doubleValue })
            #expect(expiresIn > 0 && expiresIn <= 600)
            let token = try #require(reply["access_token"]?.stringValue)
            let metrics = String(decoding: try await server.request(.GET, "/metrics").body, as: UTF8.self)
            #expect(metrics.contains("\ntokenserver_issuer_keys_reload_failures ") && metrics.contains("\ntokenserver_issuer_keys_age_seconds "))

            // What the token says.
            let unverified = try UnverifiedToken(token)
            #expect(unverified.header["alg"]?.stringValue == "ES256")
            let kid = try #require(unverified.header["kid"]?.stringValue)
            let claims = try #require(unverified.payload?.objectValue)
            #expect(claims["iss"]?.stringValue == server.base)
            #expect(claims["sub"]?.stringValue == "dev:user-7")
            #expect(claims["aud"]?.stringValue == "partner-api")
            #expect(claims["acr"]?.stringValue == "loa2")
            #expect(claims["auth_time"]?.doubleValue == Double(now - 30))
            #expect(claims["jti"]?.stringValue?.isEmpty == false)
            let second = try #require(try await Self.exchange(server, ["subject_token": subject]).json["access_token"]?.stringValue)
            #expect(try UnverifiedToken(second).payload?.objectValue?["jti"] != claims["jti"], "a unique jti per token")

            // Verified by tokentool's discovery-based verifier and by PyJWT.
            let viaTokentool = try await Self.tokentoolVerify(server, token)
            #expect(viaTokentool.status == 0, "\(viaTokentool.out)\(viaTokentool.err)")
            #expect(viaTokentool.out.contains("\"dev:user-7\""))
            let viaPyJWT = try await Self.pyjwtVerify(server, token)
            #expect(viaPyJWT.status == 0, "\(viaPyJWT.err)")
            #expect(viaPyJWT.out.trimmingCharacters(in: .whitespacesAndNewlines) == "dev:user-7")

            // Refusals: RFC 6749 errors, nothing issued.
            let expired = try server.token(lifetime: -120)
            let logoutToken = try server.token(["sub": .string("leaver")])
            for (fields, error) in [
                (["grant_type": "client_credentials", "subject_token": subject], "unsupported_grant_type"),
                (["audience": "evil-api", "subject_token": subject], "invalid_target"),
                (["subject_token": expired], "invalid_grant"),
                (["provider": "other", "subject_token": subject], "invalid_grant"),
                (["subject_token_type": "urn:ietf:params:oauth:token-type:saml2", "subject_token": subject], "invalid_request"),
                (["subject_token": ""], "invalid_request"),
                (["provider": "nobody", "subject_token": subject], "invalid_request"),
            ] {
                let (status, answer) = try await Self.exchange(server, fields)
                #expect(status == 400, "\(fields): \(answer)")
                #expect(answer["error"]?.stringValue == error, "\(fields): \(answer)")
                #expect(answer["access_token"] == nil)
            }
            // An account that logged out gets nothing.
            #expect(try await server.json("/v1/logout", ["provider": .string("dev"), "token": .string(logoutToken)]).status == 200)
            let (loggedOut, loggedOutAnswer) = try await Self.exchange(server, ["subject_token": logoutToken])
            #expect(loggedOut == 400)
            #expect(loggedOutAnswer["error"]?.stringValue == "invalid_grant")

            // Rotation without downtime: the next key becomes current, the old one stays published
            // until its tokens have expired; then it is gone and its tokens are refused.
            let directory = server.state.appendingPathComponent("issuer").path
            try IssuerKeyRing.rotate(directory: directory, retiredKeyLifetime: 600)
            // The server reloads every 0.1 s; waited for, not slept on: at the start of a full run
            // on a fresh clone the reload once came later than a fixed 400 ms.
            var rotated = ""
            let reloadedBy = ContinuousClock.now + .seconds(60)
            repeat {
                try await Task.sleep(for: .milliseconds(100))
                rotated = try #require(try await Self.exchange(server, ["subject_token": subject]).json["access_token"]?.stringValue)
            } while try UnverifiedToken(rotated).header["kid"]?.stringValue == kid && ContinuousClock.now < reloadedBy
            #expect(try UnverifiedToken(rotated).header["kid"]?.stringValue != kid)
            #expect(try await Self.pyjwtVerify(server, token).status == 0, "the old key is still published")
            #expect(try await Self.tokentoolVerify(server, rotated).status == 0)
            try IssuerKeyRing.rotate(directory: directory, retiredKeyLifetime: 600, now: Date().addingTimeInterval(3600))
            var jwks = ""
            let retiredBy = ContinuousClock.now + .seconds(60)
            repeat {
                try await Task.sleep(for: .milliseconds(100))
                jwks = String(decoding: try await server.request(.GET, "/.well-known/jwks.json").body, as: UTF8.self)
            } while jwks.contains(kid) && ContinuousClock.now < retiredBy
            #expect(!jwks.contains(kid), "the first key is retired past its time")
            let refusedOld = try await Self.tokentoolVerify(server, token)
            #expect(refusedOld.status == 1, "\(refusedOld.out)\(refusedOld.err)")
            #expect(try await Self.pyjwtVerify(server, token).status != 0)
        }
    }

    /// A reload of the issuer's key directory that fails keeps the keys in use and is counted
    /// (`/metrics`: `tokenserver_issuer_keys_reload_failures`, with `tokenserver_issuer_keys_age_seconds`
    /// still counting from the last good read); the next good reload reads the keys again.
    @Test func aFailedKeyReloadIsCountedAndTheKeysStay() async throws {
        let directory = try temporaryDirectory().appendingPathComponent("issuer").path
        let issuer = try TokenIssuer(
            configuration: ServerConfiguration.Issuer(url: nil, audiences: ["partner-api"], lifetimeSeconds: 60, keyDirectory: nil, reloadSeconds: 1),
            keyDirectory: directory, logger: Logger(label: "test"))
        let kid = try issuer.keys.signingKey.kid
        let started = issuer.reloadStatistics.loadedAt
        issuer.reloadOnce()
        let good = issuer.reloadStatistics
        #expect(good.failures == 0 && good.loadedAt > started)

        let manifest = issuer.keys.manifestPath
        let saved = try Data(contentsOf: URL(fileURLWithPath: manifest))
        try Data("{not a manifest".utf8).write(to: URL(fileURLWithPath: manifest))
        issuer.reloadOnce()
        issuer.reloadOnce()
        let failed = issuer.reloadStatistics
        #expect(failed.failures == 2)
        #expect(failed.loadedAt == good.loadedAt, "the age counts from the last good read")
        #expect(try issuer.keys.signingKey.kid == kid, "the keys read before stay in use")

        try saved.write(to: URL(fileURLWithPath: manifest))
        try IssuerKeyRing.rotate(directory: directory, retiredKeyLifetime: 60)
        issuer.reloadOnce()
        let again = issuer.reloadStatistics
        #expect(again.failures == 2 && again.loadedAt > good.loadedAt)
        #expect(try issuer.keys.signingKey.kid != kid, "the rotation is seen")
    }

    /// The key directory is made and rotated whole or not at all, one process at a time: a
    /// refused `issuer init` on an existing directory made two private keys first (which nothing
    /// listed, and each retry made two more), two instances starting at once made four keys
    /// and one of them failed to start, and two rotations at once each made a key of which the
    /// manifest named one. Every key file is in the manifest, every manifest key has its file.
    @Test func theKeyDirectoryIsMadeAndRotatedWholeOnceAtATime() async throws {
        func keyFiles(_ directory: String) throws -> Set<String> {
            Set(try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".pem") }.map { String($0.dropLast(4)) })
        }
        func listed(_ directory: String) throws -> Set<String> { Set(try IssuerKeyRing.entries(directory: directory).map(\.kid)) }
        for _ in 0..<5 {
            let directory = try temporaryDirectory().appendingPathComponent("issuer").path
            // Two instances start at once on a new directory: both open it, with the same keys.
            async let first = Task.detached { try IssuerKeyRing.open(directory: directory, createIfMissing: true).signingKey.kid }.value
            async let second = Task.detached { try IssuerKeyRing.open(directory: directory, createIfMissing: true).signingKey.kid }.value
            let (a, b) = try await (first, second)
            #expect(a == b)
            #expect(try keyFiles(directory) == listed(directory) && listed(directory).count == 2)

            let again = #expect(throws: PeerCAError.self) { try IssuerKeyRing.initialize(directory: directory) }
            #expect(again?.code == .fileExists)
            #expect(try keyFiles(directory).count == 2, "a refused initialization makes no key")

            // Two rotations at once: both take effect, one after the other.
            async let r1 = Task.detached { try IssuerKeyRing.rotate(directory: directory, retiredKeyLifetime: 600).count }.value
            async let r2 = Task.detached { try IssuerKeyRing.rotate(directory: directory, retiredKeyLifetime: 600).count }.value
            _ = try await (r1, r2)
            #expect(try listed(directory).count == 4)
            #expect(try keyFiles(directory) == listed(directory))
        }
    }

    @Test func tokensAreRefusedAfterTheirExpiry() async throws {
        try await LiveServer.with(configure: { configuration in
            configuration.issuer = ServerConfiguration.Issuer(url: nil, audiences: ["partner-api"], lifetimeSeconds: 1, keyDirectory: nil, reloadSeconds: nil)
        }) { server in
            let (status, reply) = try await Self.exchange(server, ["subject_token": try server.token()])
            #expect(status == 200)
            let token = try #require(reply["access_token"]?.stringValue)
            try await Task.sleep(for: .milliseconds(2200))
            let viaTokentool = try await Self.tokentoolVerify(server, token)
            #expect(viaTokentool.status == 1)
            #expect(viaTokentool.out.contains("expired"), "\(viaTokentool.out)")
            let viaPyJWT = try await Self.pyjwtVerify(server, token)
            #expect(viaPyJWT.status != 0)
            #expect(viaPyJWT.err.contains("ExpiredSignatureError") || viaPyJWT.err.contains("expired"), "\(viaPyJWT.err)")
        }
    }

    /// Several instances share one key directory: they publish the same keys, so a token one
    /// issues verifies against the other's JWKS, before and after a rotation.
    @Test func instancesSharingTheKeyDirectoryPublishTheSameKeys() async throws {
        let keys = try temporaryDirectory().appendingPathComponent("issuer").path
        let shared: @Sendable (inout ServerConfiguration) -> Void = { configuration in
            configuration.issuer = ServerConfiguration.Issuer(
                url: "https://auth.example", audiences: ["partner-api"], lifetimeSeconds: 600, keyDirectory: keys, reloadSeconds: 0.1)
        }
        try await LiveServer.with(configure: shared) { first in
            try await LiveServer.with(configure: { configuration in
                shared(&configuration)
                configuration.providers["dev"]?.secretFile = ServerConfiguration.devSecretPath(state: first.state.path)
            }) { second in
                func jwks(_ server: LiveServer) async throws -> String { String(decoding: try await server.request(.GET, "/.well-known/jwks.json").body, as: UTF8.self) }
                func verifyAgainst(_ server: LiveServer, _ token: String) async throws -> Int32 {
                    try await runDetached(tokentoolExecutable, [
                        "verify", "--jwks", server.base + "/.well-known/jwks.json", "--allow-http-loopback", "--iss", "https://auth.example",
                        "--aud", "partner-api", "-",
                    ], stdin: Data(token.utf8)).status
                }
                #expect(try await jwks(first) == jwks(second))
                let token = try #require(try await Self.exchange(first, ["subject_token": try first.token()]).json["access_token"]?.stringValue)
                #expect(try await verifyAgainst(second, token) == 0)
                let before = try await jwks(first)
                try IssuerKeyRing.rotate(directory: keys, retiredKeyLifetime: 600)
                // Both instances reload on their own timers: waited for (a fixed 500 ms is a race
                // on a loaded machine), until both publish the same new set.
                let reloadedBy = ContinuousClock.now + .seconds(60)
                while ContinuousClock.now < reloadedBy {
                    try await Task.sleep(for: .milliseconds(100))
                    let (one, two) = (try await jwks(first), try await jwks(second))
                    if one != before && two != before { break }
                }
                #expect(try await jwks(first) != before)
                #expect(try await jwks(first) == jwks(second))
                let rotated = try #require(try await Self.exchange(second, ["subject_token": try first.token()]).json["access_token"]?.stringValue)
                #expect(try await verifyAgainst(first, rotated) == 0)
                #expect(try await verifyAgainst(first, token) == 0, "the retired key is still published")
            }
        }
    }

    @Test func withoutAnIssuerTheEndpointsAreOff() async throws {
        try await LiveServer.with { server in
            let jwks = try await server.request(.GET, "/.well-known/jwks.json")
            let discovery = try await server.request(.GET, "/.well-known/openid-configuration")
            let exchanged = try await Self.exchange(server, ["subject_token": try server.token()])
            #expect(jwks.status == 404)
            #expect(discovery.status == 404)
            #expect(exchanged.status == 404)
        }
    }
}
