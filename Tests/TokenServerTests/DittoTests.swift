import Foundation
import Logging
import NIOHTTP1
import PeerCA
import TestSupport
import Testing
import TokenKit
@testable import TokenServer

/// Ditto as Ditto documents it: permissions whose queries are arrays, the `ditto-signature`
/// header, and the rules of Ditto's sample webhook (`server/configurable`), over HTTP on loopback.
@Suite("Ditto's webhook contract")
struct DittoTests {
    /// Ditto's documentation's example permissions ("Each value is an array of Ditto queries").
    static let documentedPermissions = #"""
        {"read": {"everything": false, "queriesByCollection": {"books": ["_id.locationId == 'abcedef123456'"]}},
         "write": {"everything": false, "queriesByCollection": {"newspapers": ["true"]}}}
        """#

    func auth(_ server: LiveServer, _ token: String, headers: [String: String] = [:]) async throws -> (status: Int, json: [String: JSONValue]) {
        try await server.json("/v1/auth", ["appID": .string("dev"), "provider": .string("dev"), "token": .string(token)], headers: headers)
    }

    /// In a provider's configuration: `serve` refused it ("must be a String") before.
    @Test func documentedPermissionsAreAcceptedInConfigurationAndAnswered() async throws {
        let state = try temporaryDirectory()
        _ = try ServerConfiguration.embeddedDefaults(state: state.path, port: 0)  // makes the dev secret
        let secret = ServerConfiguration.devSecretPath(state: state.path)
        let file = #"{"state": "\#(state.path)", "providers": {"dev": {"type": "hs256", "secretFile": "\#(secret)", "issuers": ["\#(ServerConfiguration.devIssuer)"], "permissions": \#(Self.documentedPermissions)}}}"#
        let parsed = try ServerConfiguration.parse(Data(file.utf8))
        let permissions = try #require(parsed.providers["dev"]?.permissions)
        #expect(permissions.read.queriesByCollection == ["books": ["_id.locationId == 'abcedef123456'"]])
        #expect(permissions.write.queriesByCollection == ["newspapers": ["true"]])
        try await LiveServer.with(configure: { $0.providers["dev"]?.permissions = permissions }) { server in
            let (status, reply) = try await auth(server, try server.token())
            #expect(status == 200)
            #expect(reply["permissions"] == (try JSONValue.parse(Self.documentedPermissions)))
        }
        // A single query string is read as a one-query array; anything else is refused by name.
        let single = try ServerConfiguration.parse(Data(file.replacingOccurrences(of: #"["true"]"#, with: #""true""#).utf8))
        #expect(single.providers["dev"]?.permissions?.write.queriesByCollection == ["newspapers": ["true"]])
        #expect(throws: ConfigurationError.self) { try ServerConfiguration.parse(Data(file.replacingOccurrences(of: #"["true"]"#, with: "[1]").utf8)) }
    }

    /// In a token's permissions claim: `/v1/auth` answered `invalid_permissions` before. Echoed as
    /// given, with `remoteQuery`; a single string becomes a one-query array.
    @Test func documentedPermissionsInAClaimAreEchoed() async throws {
        try await LiveServer.with(configure: { $0.providers["dev"]?.permissionsClaim = "ditto" }) { server in
            let documented = try JSONValue.parse(Self.documentedPermissions)
            let (_, reply) = try await auth(server, try server.token(["ditto": documented]))
            #expect(reply["authenticated"] == .bool(true))
            #expect(reply["permissions"] == documented)

            var withRemote = try #require(documented.objectValue)
            withRemote["remoteQuery"] = .bool(true)
            let (_, remote) = try await auth(server, try server.token(["ditto": .object(withRemote)]))
            #expect(remote["permissions"] == .object(withRemote))

            let single: JSONValue = .object([
                "read": .object(["everything": .bool(false), "queriesByCollection": .object(["books": .string("true")])]),
                "write": .object(["everything": .bool(false), "queriesByCollection": .object([:])]),
            ])
            let (_, answered) = try await auth(server, try server.token(["ditto": single]))
            #expect(answered["permissions"]?.objectValue?["read"]?.objectValue?["queriesByCollection"] == .object(["books": .array([.string("true")])]))

            for bad: JSONValue in [
                .object(["read": .object(["everything": .bool(false), "queriesByCollection": .object(["books": .array([.integer(1)])])]), "write": .object(["everything": .bool(false)])]),
                .object(["read": .object(["everything": .bool(true)]), "write": .object(["everything": .bool(false)]), "remoteQuery": .string("yes")]),
            ] {
                let (_, refused) = try await auth(server, try server.token(["ditto": bad]))
                #expect(refused["authenticated"] == .bool(false))
                #expect(refused["error"].errorCode == "invalid_permissions", "\(bad)")
            }
        }
    }

    // MARK: Signed calls

    /// Two secrets (a rotation), base64 as Ditto shows them, in 0600 files.
    static func secretFiles() throws -> (paths: [String], secrets: [[UInt8]]) {
        let dir = try temporaryDirectory()
        var paths: [String] = []
        var secrets: [[UInt8]] = []
        for name in ["old", "new"] {
            var generator = SystemRandomNumberGenerator()
            let secret = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let path = dir.appendingPathComponent("\(name).secret").path
            try SecureFile.writeNew(path, Array((Data(secret).base64EncodedString() + "\n").utf8), mode: 0o600)
            paths.append(path)
            secrets.append(secret)
        }
        return (paths, secrets)
    }

    @Test func signedCallsAreCheckedBeforeAnythingElse() async throws {
        let (paths, secrets) = try Self.secretFiles()
        try await LiveServer.with(configure: { $0.webhook = .init(signature: .init(secretFiles: paths)) }) { server in
            let body = Array(JSONValue.object(["appID": .string("dev"), "provider": .string("dev"), "token": .string(try server.token())]).compactText.utf8)
            let now = Int(Date().timeIntervalSince1970)
            func post(_ body: [UInt8], _ signature: String?) async throws -> (Int, [String: JSONValue]) {
                let (status, bytes, _) = try await server.request(.POST, "/v1/auth", body: body, headers: signature.map { ["ditto-signature": $0] } ?? [:])
                return (status, (try? JSONValue.parse(bytes))?.objectValue ?? [:])
            }
            // Signed by either secret (a rotation), or with both signatures: accepted.
            for secret in secrets {
                let (status, reply) = try await post(body, DittoWebhookSignature.header(for: body, secret: secret, time: now))
                #expect(status == 200 && reply["authenticated"] == .bool(true), "\(reply)")
            }
            let both = DittoWebhookSignature.header(for: body, secret: secrets[0], time: now) + ",v1="
                + (DittoWebhookSignature.header(for: body, secret: secrets[1], time: now).split(separator: "=").last.map(String.init) ?? "")
            #expect(try await post(body, both).0 == 200)

            func refused(_ signature: String?, body sent: [UInt8]? = nil, _ code: String) async throws {
                let (status, reply) = try await post(sent ?? body, signature)
                #expect(status == 401, "\(code): \(status)")
                #expect(reply["authenticated"] == .bool(false))
                #expect(reply["error"].errorCode == code, "\(reply)")
            }
            try await refused(nil, "signature_missing")
            var other = SystemRandomNumberGenerator()
            let stranger = (0..<32).map { _ in UInt8.random(in: 0...255, using: &other) }
            try await refused(DittoWebhookSignature.header(for: body, secret: stranger, time: now), "signature_mismatch")
            try await refused(DittoWebhookSignature.header(for: body, secret: secrets[0], time: now - 3000), "signature_stale")
            try await refused(DittoWebhookSignature.header(for: body, secret: secrets[0], time: now + 3000), "signature_stale")
            try await refused("v1=abc", "signature_malformed")
            // The body is what is signed: one byte changed, and the signature no longer fits.
            var changed = body
            changed[changed.count - 3] ^= 1
            try await refused(DittoWebhookSignature.header(for: body, secret: secrets[0], time: now), body: changed, "signature_mismatch")
            // Checked before the body is read: an unknown provider, unsigned, is a signature refusal.
            let unknown = Array(#"{"provider": "nobody", "token": "x"}"#.utf8)
            try await refused(DittoWebhookSignature.header(for: unknown, secret: stranger, time: now), body: unknown, "signature_mismatch")
            #expect(try await post(unknown, DittoWebhookSignature.header(for: unknown, secret: secrets[1], time: now)).0 == 400)
        }
    }

    @Test func anOptionalSignatureIsCheckedWhenPresent() async throws {
        let (paths, secrets) = try Self.secretFiles()
        try await LiveServer.with(configure: { $0.webhook = .init(signature: .init(secretFiles: [paths[1]], toleranceSeconds: 60, required: false)) }) { server in
            let body = Array(JSONValue.object(["provider": .string("dev"), "token": .string(try server.token())]).compactText.utf8)
            let now = Int(Date().timeIntervalSince1970)
            #expect(try await server.request(.POST, "/v1/auth", body: body).status == 200)
            let old = ["ditto-signature": DittoWebhookSignature.header(for: body, secret: secrets[0], time: now)]
            #expect(try await server.request(.POST, "/v1/auth", body: body, headers: old).status == 401)
            let late = ["ditto-signature": DittoWebhookSignature.header(for: body, secret: secrets[1], time: now - 90)]
            #expect(try await server.request(.POST, "/v1/auth", body: body, headers: late).status == 401, "past a 60 s tolerance")
        }
    }

    /// A secret file others can read, or one that is not base64, stops the service from starting.
    @Test func signatureSecretsAreCheckedAtStart() async throws {
        let dir = try temporaryDirectory()
        let open = dir.appendingPathComponent("open.secret").path
        try SecureFile.writeNew(open, Array(Data(repeating: 7, count: 32).base64EncodedString().utf8), mode: 0o644)
        let short = dir.appendingPathComponent("short.secret").path
        try SecureFile.writeNew(short, Array("c2hvcnQ=".utf8), mode: 0o600)
        for (path, words) in [(open, "readable"), (short, "base64")] {
            var configuration = try ServerConfiguration.embeddedDefaults(state: dir.appendingPathComponent("state-\(words)").path, port: 0)
            configuration.webhook = .init(signature: .init(secretFiles: [path]))
            await #expect(throws: ConfigurationError.self) { _ = try await TokenService.start(configuration: configuration, logger: .init(label: "test")) }
        }
    }

    /// Known answers for the header, computed with the real openssl binary.
    @Test func theHeaderIsHMACSHA256OverTimeDotBody() async throws {
        let secret = Array("a shared secret of 32 bytes long".utf8)
        let body = Array(#"{"appID":"x","provider":"p","token":"t"}"#.utf8)
        let header = DittoWebhookSignature.header(for: body, secret: secret, time: 1_700_000_000)
        let openssl = try #require(which("openssl"))
        let hexKey = secret.map { String(format: "%02x", $0) }.joined()
        let result = try await runDetached(openssl, ["dgst", "-sha256", "-mac", "HMAC", "-macopt", "hexkey:\(hexKey)", "-r"], stdin: Data("1700000000.".utf8) + Data(body))
        let expected = result.out.split(separator: " ").first.map(String.init) ?? ""
        #expect(expected.count == 64)
        #expect(header == "t=1700000000,v1=\(expected)")
        let check = try DittoWebhookSignature(secrets: [secret])
        try check.check(header, body: body, now: Date(timeIntervalSince1970: 1_700_000_100))
        #expect(throws: DittoWebhookSignature.Refusal.self) { try check.check(header.uppercased(), body: body, now: Date(timeIntervalSince1970: 1_700_000_100)) }
    }

    // MARK: The sample webhook's rules

    /// A config.json in the sample's current format (`config_schema.json`): rules keyed
    /// `path.to.claim.value`, a nested `userIDField`, claim-path `clientInfo`, static metadata.
    static let sampleConfig = #"""
        {
            "$schema": "./config_schema.json",
            "userIDField": "user.id",
            "defaultExpirationSeconds": 3600,
            "clientInfo": ["profile", "user.team"],
            "identityServiceMetadata": {"metadata": "This is some identity service metadata"},
            "permissions": {
                "user_role.admin": {"read": "*", "write": "*"},
                "user_role.user2": {"read": "*", "write": {"tasks": ["_id == '688ce8da00e7f318004e3cf9'"]}},
                "user_role.user3": {"read": {"tasks": ["_id == '688ce8e000062161004e3cfa'"]}, "write": {}},
                "department.sales": {"read": {"tasks": ["_id == '688ce8e000062161004e3cfa'", "owner == 'sales'"]}, "write": {"orders": ["true"]}, "remoteQuery": true}
            }
        }
        """#

    static func rulesFile(_ text: String = sampleConfig) throws -> String {
        let path = try temporaryDirectory().appendingPathComponent("config.json").path
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test func theSampleWebhooksCasesOverHTTP() async throws {
        let rules = try Self.rulesFile()
        try await LiveServer.with(configure: {
            $0.providers["dev"]?.permissions = nil
            $0.providers["dev"]?.dittoRules = rules
        }) { server in
            func permissions(_ claims: [String: JSONValue]) async throws -> [String: JSONValue] {
                let user: [String: JSONValue] = ["user": .object(["id": .string("User1"), "team": .string("blue")])]
                let (status, reply) = try await auth(server, try server.token(claims.merging(user) { first, _ in first }))
                #expect(status == 200 && reply["authenticated"] == .bool(true), "\(reply)")
                return reply
            }
            func side(_ everything: Bool, _ queries: [String: [String]] = [:]) -> JSONValue {
                .object(["everything": .bool(everything), "queriesByCollection": .object(queries.mapValues { .array($0.map(JSONValue.string)) })])
            }
            // One matching rule.
            let one = try await permissions(["user_role": .string("user3")])
            #expect(one["permissions"] == .object([
                "read": side(false, ["tasks": ["_id == '688ce8e000062161004e3cfa'"]]), "write": side(false), "remoteQuery": .bool(false),
            ]))
            // A nested userIDField names the user (no provider prefix: the sample's userID).
            #expect(one["userID"] == .string("User1"))
            // clientInfo from claim paths: an object's members merged, a value under its last name;
            // identityServiceMetadata as the static object.
            let withProfile = try await permissions(["user_role": .string("user3"), "profile": .object(["plan": .string("gold")])])
            #expect(withProfile["clientInfo"] == .object(["plan": .string("gold"), "team": .string("blue")]))
            #expect(withProfile["identityServiceMetadata"] == .object(["metadata": .string("This is some identity service metadata")]))
            // Two rules merged: query arrays united without duplicates; remoteQuery if any says so.
            let two = try await permissions(["user_role": .string("user3"), "department": .string("sales")])
            #expect(two["permissions"] == .object([
                "read": side(false, ["tasks": ["_id == '688ce8e000062161004e3cfa'", "owner == 'sales'"]]),
                "write": side(false, ["orders": ["true"]]), "remoteQuery": .bool(true),
            ]))
            // Everything wins over queries.
            let admin = try await permissions(["user_role": .string("admin"), "department": .string("sales")])
            #expect(admin["permissions"] == .object(["read": side(true), "write": side(true), "remoteQuery": .bool(true)]))
            // A claim value with no rule: authenticated, with no access.
            let none = try await permissions(["user_role": .string("guest")])
            #expect(none["permissions"] == .object(["read": side(false), "write": side(false), "remoteQuery": .bool(false)]))
            // A token without exp is accepted for defaultExpirationSeconds (stated in the file).
            let now = Int(Date().timeIntervalSince1970)
            let noExp = try JWTSigner(key: try JWTKey.hmac(secret: server.secret)).sign(claims: [
                "iss": .string(ServerConfiguration.devIssuer), "sub": .string("s"), "iat": .integer(now), "user": .object(["id": .string("User9")]),
            ])
            let (_, forever) = try await auth(server, noExp)
            #expect(forever["authenticated"] == .bool(true), "\(forever)")
            #expect((forever["expirationSeconds"]?.doubleValue ?? 0) > 3500 && (forever["expirationSeconds"]?.doubleValue ?? 0) <= 3600)
            // The userIDField's claim is required: no fallback to another claim.
            let (_, nobody) = try await auth(server, try server.token(["user_role": .string("admin")]))
            #expect(nobody["authenticated"] == .bool(false))
        }
    }

    /// Without `defaultExpirationSeconds` a token without exp is refused, as everywhere else.
    @Test func aTokenWithoutExpNeedsDefaultExpirationSeconds() async throws {
        let rules = try Self.rulesFile(Self.sampleConfig.replacingOccurrences(of: #""defaultExpirationSeconds": 3600,"#, with: ""))
        try await LiveServer.with(configure: {
            $0.providers["dev"]?.permissions = nil
            $0.providers["dev"]?.dittoRules = rules
        }) { server in
            let noExp = try JWTSigner(key: try JWTKey.hmac(secret: server.secret)).sign(claims: [
                "iss": .string(ServerConfiguration.devIssuer), "sub": .string("s"), "user": .object(["id": .string("User9")]),
            ])
            let (_, reply) = try await auth(server, noExp)
            #expect(reply["authenticated"] == .bool(false))
            #expect(reply["error"].errorCode == "missing_claim", "\(reply)")
        }
    }

    /// What the sample reads but a provider must not: its JWTSecret (keys are the provider's),
    /// its older formats, a rule that is not path.to.claim.value, a file without rules.
    @Test func theRulesFileIsCheckedAtStart() async throws {
        let cases: [(String, String)] = [
            (Self.sampleConfig.replacingOccurrences(of: #""$schema""#, with: #""JWTSecret": "a-string-secret-at-least-256-bits-long", "$schema""#), "JWTSecret"),
            (#"{"roles": {"admin": {"members": ["a"], "permissions": {"read": "*", "write": "*"}}}}"#, "roles"),
            (#"{"permissions": {"admin": {"read": "*", "write": "*"}}}"#, "path.to.claim.value"),
            (#"{"permissions": {"role.admin": {"read": "all", "write": "*"}}}"#, "\"read\""),
            (#"{"userIDField": "sub"}"#, "permissions"),
            ("not json", "not JSON"),
        ]
        for (text, words) in cases {
            let state = try temporaryDirectory()
            var configuration = try ServerConfiguration.embeddedDefaults(state: state.path, port: 0)
            configuration.providers["dev"]?.permissions = nil
            configuration.providers["dev"]?.dittoRules = try Self.rulesFile(text)
            do {
                let service = try await TokenService.start(configuration: configuration, logger: .init(label: "test"))
                await service.shutdown()
                Issue.record("started with \(words)")
            } catch let error as ConfigurationError {
                #expect(error.key == "providers.dev.dittoRules")
                #expect(error.message.contains(words), "\(error.message)")
            }
        }
        // dittoRules decides the permissions: stating others beside it is refused.
        let state = try temporaryDirectory()
        var both = try ServerConfiguration.embeddedDefaults(state: state.path, port: 0)
        both.providers["dev"]?.dittoRules = try Self.rulesFile()
        #expect(throws: ConfigurationError.self) { try both.validate() }
    }
}

/// Ditto's Manual identity through the service: the administrator provisions a device with no
/// token (`POST /v1/admin/certificates`); it is revoked and listed in the CRL like any other.
@Suite("Manual identity over HTTP")
struct ManualIdentityServerTests {
    @Test func anAdministratorProvisionsADevice() async throws {
        let dir = try temporaryDirectory()
        let adminFile = dir.appendingPathComponent("admin.token").path
        let adminSecret = "admin-" + UUID().uuidString
        try SecureFile.writeNew(adminFile, Array(adminSecret.utf8), mode: 0o600)
        try await LiveServer.with(configure: { $0.admin = ServerConfiguration.Admin(tokenFile: adminFile) }) { server in
            let csr = try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate())
            let admin = ["authorization": "Bearer \(adminSecret)"]
            let request: [String: JSONValue] = ["deviceID": .string("kiosk-7"), "csr": .string(csr), "validitySeconds": .integer(30 * 86_400), "by": .string("ops")]
            #expect(try await server.json("/v1/admin/certificates", request).status == 401)
            #expect(try await server.json("/v1/admin/certificates", request, headers: ["authorization": "Bearer wrong"]).status == 401)
            let (status, issued) = try await server.json("/v1/admin/certificates", request, headers: admin)
            #expect(status == 200, "\(issued)")
            #expect(issued["spiffeID"] == .string("spiffe://dev/manual/kiosk-7"), "\(issued)")
            let serial = try #require(issued["serial"]?.stringValue)
            // Thirty days, not the 24 h a token's certificate is capped at.
            let notAfter = try #require(issued["notAfter"]?.stringValue.flatMap { try? Date($0, strategy: .iso8601) })
            #expect(abs(notAfter.timeIntervalSinceNow - 30 * 86_400) < 3600, "\(notAfter)")
            let entry = try #require(try await server.service.ca.ledger.entry(serial: serial))
            #expect(entry.provider == "manual" && entry.tokenID == "ops" && entry.commonName == "kiosk-7")
            // Bad requests get typed refusals, and nothing is recorded for them.
            for (bad, code) in [
                (request.merging(["validitySeconds": .integer(10)]) { $1 }, "policy_violation"),
                (request.merging(["csr": .string("garbage")]) { $1 }, "invalid_csr"),
                (request.merging(["deviceID": .string("a\nb")]) { $1 }, "policy_violation"),
                (request.merging(["extra": .bool(true)]) { $1 }, "invalid_request"),
            ] {
                let (refusedStatus, refused) = try await server.json("/v1/admin/certificates", bad, headers: admin)
                #expect(refusedStatus == 400 && refused["error"].errorCode == code, "\(refused)")
            }
            #expect(try await server.service.ca.ledger.recent(limit: 10).count == 1)
            // Revoked by the admin like any other, and then in the CRL.
            #expect(try await server.json("/v1/admin/revoke", ["serial": .string(serial)], headers: admin).status == 200)
            let crl = try await server.request(.GET, "/v1/crl")
            try Data(crl.body).write(to: dir.appendingPathComponent("crl.der"))
            let openssl = try #require(which("openssl"))
            let text = try await runDetached(openssl, ["crl", "-inform", "DER", "-in", "crl.der", "-noout", "-text"], cwd: dir)
            #expect(text.out.contains(serial.uppercased()), "\(text.out)")
        }
    }
}
