import Foundation
import NIOHTTP1
import PeerCA
import Synchronization
import TestSupport
import Testing
import TokenKit
@testable import TokenServer

/// Live responses of every JSON endpoint, in success and error, checked against
/// docs/openapi.json by scripts/check_openapi.py (openapi-spec-validator and
/// openapi-schema-validator from PyPI): the document must be valid OpenAPI 3.1, and every status,
/// content type and body must be documented.
@Suite("Live responses match the OpenAPI document", .serialized)
struct ContractTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test func liveResponsesMatchTheDocument() async throws {
        let adminFile = try temporaryDirectory().appendingPathComponent("admin.token").path
        let adminSecret = "contract-" + UUID().uuidString
        try SecureFile.writeNew(adminFile, Array(adminSecret.utf8), mode: 0o600)
        let recorded = try await LiveServer.with(configure: {
            $0.limits = .init(maxBodyBytes: 4096, requestTimeoutSeconds: LiveServer.requestTimeout, maxExpirationSeconds: 3600)
            $0.admin = ServerConfiguration.Admin(tokenFile: adminFile)
            $0.issuer = ServerConfiguration.Issuer(url: nil, audiences: ["partner-api"], lifetimeSeconds: 600, keyDirectory: nil, reloadSeconds: nil)
        }) { server in
            var recorded: [JSONValue] = []
            func record(
                _ method: HTTPMethod, _ path: String, _ body: [UInt8]?, headers: [String: String] = [:], contentType: String = "application/json"
            ) async throws {
                let (status, bytes, headers) = try await server.request(method, path, body: body, contentType: contentType, headers: headers)
                let contentType = headers.first(name: "content-type") ?? ""
                let json: JSONValue = contentType.hasPrefix("application/json") ? try JSONValue.parse(bytes) : .null
                recorded.append(.object([
                    "path": .string(path), "method": .string(method == .GET ? "get" : "post"), "status": .integer(status),
                    "contentType": .string(contentType), "body": json,
                ]))
            }
            func json(_ object: [String: JSONValue]) -> [UInt8] { Array(JSONValue.object(object).compactText.utf8) }
            let csr = try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate())
            let good = try server.token()
            try await record(.POST, "/v1/auth", json(["appID": .string("dev"), "provider": .string("dev"), "token": .string(good)]))
            try await record(.POST, "/v1/auth", json(["provider": .string("dev"), "token": .string(try server.token(lifetime: -300))]))
            try await record(.POST, "/v1/auth", json(["provider": .string("nobody"), "token": .string(good)]))
            try await record(.POST, "/v1/auth", Array("[1,2]".utf8))
            try await record(.POST, "/v1/auth", Array(repeating: 0x20, count: 8000))
            try await record(.POST, "/v1/certificates", json(["provider": .string("dev"), "token": .string(good), "csr": .string(csr)]))
            try await record(.POST, "/v1/certificates", json(["provider": .string("dev"), "token": .string(good), "csr": .string("nope")]))
            try await record(.POST, "/v1/certificates", json(["provider": .string("dev"), "token": .string("a.b.c"), "csr": .string(csr)]))
            try await record(.POST, "/v1/certificates", json(["provider": .string("dev"), "token": .string(good)]))
            try await record(.GET, "/v1/ca", nil)
            try await record(.GET, "/v1/crl", nil)
            try await record(.GET, "/healthz", nil)
            try await record(.GET, "/metrics", nil)
            // Sessions: logout (and a refused one), the admin's revocations and refusals.
            let admin = ["authorization": "Bearer \(adminSecret)"]
            let (_, issued) = try await server.json("/v1/certificates", ["provider": .string("dev"), "token": .string(try server.token(["sub": .string("x")])), "csr": .string(csr)])
            let serial = issued["serial"]?.stringValue ?? ""
            try await record(.POST, "/v1/logout", json(["provider": .string("dev"), "token": .string(good)]))
            try await record(.POST, "/v1/logout", json(["provider": .string("dev"), "token": .string("a.b.c")]))
            try await record(.POST, "/v1/admin/revoke", json(["serial": .string(serial)]))
            try await record(.POST, "/v1/admin/revoke", json(["serial": .string(serial), "account": .string("dev:x")]), headers: admin)
            try await record(.POST, "/v1/admin/revoke", json(["serial": .string("abcdef")]), headers: admin)
            try await record(.POST, "/v1/admin/revoke", json(["serial": .string(serial), "reason": .string("superseded")]), headers: admin)
            try await record(.POST, "/v1/admin/revoke", json(["account": .string("dev:x")]), headers: admin)
            // Provisioning a device (Ditto's Manual identity), and a refusal without the credential.
            let device = json(["deviceID": .string("kiosk-1"), "csr": .string(csr), "validitySeconds": .integer(86_400)])
            try await record(.POST, "/v1/admin/certificates", device, headers: admin)
            try await record(.POST, "/v1/admin/certificates", device)
            // Renewal needs mutual TLS; over plain HTTP it is refused (renewalMatchesTheDocument
            // records a successful one).
            try await record(.POST, "/v1/certificates/renew", json(["csr": .string(csr)]))
            // Token exchange (RFC 8693) and the issuer's published keys.
            var exchange = ["grant_type": TokenExchangeTests.grant, "subject_token_type": TokenExchangeTests.jwtType, "audience": "partner-api", "provider": "dev"]
            exchange["subject_token"] = try server.token(["sub": .string("exchanger")])
            try await record(.POST, "/v1/token", TokenExchangeTests.form(exchange), contentType: "application/x-www-form-urlencoded")
            exchange["grant_type"] = "password"
            try await record(.POST, "/v1/token", TokenExchangeTests.form(exchange), contentType: "application/x-www-form-urlencoded")
            try await record(.GET, "/.well-known/openid-configuration", nil)
            try await record(.GET, "/.well-known/jwks.json", nil)
            // OCSP: a request made by openssl for a certificate of this CA.
            let (_, fresh) = try await server.json("/v1/certificates", ["provider": .string("dev"), "token": .string(try server.token(["sub": .string("o")])), "csr": .string(csr)])
            let dir = try temporaryDirectory()
            try PostgresTests.writeLeafAndIssuer(try #require(fresh["certificate"]?.stringValue), to: dir)
            let openssl = try #require(which("openssl"))
            let made = try await runDetached(openssl, ["ocsp", "-issuer", "issuer.pem", "-cert", "leaf.pem", "-reqout", "request.der", "-no_nonce"], cwd: dir)
            #expect(made.status == 0, "\(made.err)")
            let request = try Data(contentsOf: dir.appendingPathComponent("request.der"))
            try await record(.POST, "/v1/ocsp", Array(request), contentType: "application/ocsp-request")
            return recorded
        }
        #expect(recorded.count == 28)
        let statuses = recorded.map { ($0.objectValue?["path"]?.stringValue ?? "", $0.objectValue?["status"]) }
        for (path, status) in [("/v1/token", 200), ("/v1/token", 400), ("/.well-known/jwks.json", 200), ("/v1/ocsp", 200)] {
            #expect(statuses.contains { $0.0 == path && $0.1 == .integer(status) }, "\(path) \(status): \(statuses)")
        }
        try await Self.check(recorded)
    }

    /// A successful renewal (mutual TLS with the device's current certificate) and a refused one
    /// (revoked), recorded as the device's HTTPS client saw them.
    @Test func renewalMatchesTheDocument() async throws {
        let collected = Mutex<[JSONValue]>([])
        try await RenewalTests.Fixture.with { f in
            let (issued, device) = try await f.enroll("a", ["sub": .string("renewer")])
            let port = f.server.base.split(separator: ":").last.map(String.init) ?? ""
            for round in 0..<2 {
                // The second round after the certificate's revocation: refused.
                if round == 1 { _ = try await f.server.service.ca.revoke(serial: try #require(issued["serial"]?.stringValue), reason: .keyCompromise) }
                let (status, contentType, body) = try await RenewalTests.exchange(
                    f.server, port: port, serverCertificate: f.serverCertificate, "/v1/certificates/renew", ["csr": .string(try await f.csr("b"))], device: device)
                let entry: JSONValue = .object([
                    "path": .string("/v1/certificates/renew"), "method": .string("post"), "status": .integer(status),
                    "contentType": .string(contentType), "body": try JSONValue.parse(body),
                ])
                collected.withLock { $0.append(entry) }
            }
        }
        let recorded = collected.withLock { $0 }
        #expect(recorded.map { $0.objectValue?["status"] } == [.integer(200), .integer(403)], "\(recorded)")
        try await Self.check(recorded)
    }

    /// Runs scripts/check_openapi.py on recorded answers: all must pass.
    static func check(_ recorded: [JSONValue]) async throws {
        let dir = try temporaryDirectory()
        let file = dir.appendingPathComponent("responses.json")
        try JSONValue.array(recorded).prettyText.write(to: file, atomically: true, encoding: .utf8)
        let python = try #require(which("python3"))
        let result = try await runDetached(python, [
            root.appendingPathComponent("scripts/check_openapi.py").path, root.appendingPathComponent("docs/openapi.json").path, file.path,
        ])
        #expect(result.status == 0, "\(result.out)\(result.err)")
        #expect(result.out.contains("\(recorded.count) passed, 0 failed"), "\(result.out)\(result.err)")
    }

    /// Ditto's documentation's own examples, verbatim: the webhook's request ("Incoming POST
    /// body"), its permissions ("Each value is an array of Ditto queries") and its answer; and a
    /// signed call's refusal. Each answer is also checked against docs/openapi.json.
    @Test func dittosDocumentedExamples() async throws {
        // Ditto's "Incoming POST body" example; its token is a placeholder, refused as such.
        let documentedRequest = #"{ "appID": "YOUR_APP_ID_HERE", "provider": "my-auth", "token": "eyJhbGciOiJI..." }"#
        // Ditto's permissions example and an answer of its webhook example.
        let documentedPermissions = try JSONValue.parse(#"""
            {"read": {"everything": false, "queriesByCollection": {"books": ["_id.locationId == 'abcedef123456'"]}},
             "write": {"everything": false, "queriesByCollection": {"newspapers": ["true"]}}}
            """#)
        let documentedAnswer = try JSONValue.parse(#"""
            { "authenticate": true, "expirationSeconds": 28800, "userID": "123abc", "permissions": { "read": { "everything": true, "queriesByCollection": {} }, "write": { "everything": true, "queriesByCollection": {} } } }
            """#)
        let secretFile = try temporaryDirectory().appendingPathComponent("ditto.secret").path
        let secret = Array("a Ditto webhook secret, 32 bytes".utf8)
        try SecureFile.writeNew(secretFile, Array(Data(secret).base64EncodedString().utf8), mode: 0o600)
        let recorded = try await LiveServer.with(configure: {
            $0.ca?.appID = "YOUR_APP_ID_HERE"
            $0.providers["my-auth"] = $0.providers["dev"]
            $0.providers["my-auth"]?.permissionsClaim = "ditto"
            $0.webhook = .init(signature: .init(secretFiles: [secretFile]))
        }) { server in
            var recorded: [JSONValue] = []
            var answers: [[String: JSONValue]] = []
            func record(_ body: [UInt8], signed: Bool = true) async throws {
                let now = Int(Date().timeIntervalSince1970)
                let headers = signed ? ["ditto-signature": DittoWebhookSignature.header(for: body, secret: secret, time: now)] : [:]
                let (status, bytes, responseHeaders) = try await server.request(.POST, "/v1/auth", body: body, headers: headers)
                let json = try JSONValue.parse(bytes)
                answers.append(json.objectValue ?? [:])
                recorded.append(.object([
                    "path": .string("/v1/auth"), "method": .string("post"), "status": .integer(status),
                    "contentType": .string(responseHeaders.first(name: "content-type") ?? ""), "body": json,
                ]))
            }
            try await record(Array(documentedRequest.utf8))
            // The same request with a real token in place of the placeholder, carrying Ditto's permissions.
            let token = try server.token(["ditto": documentedPermissions])
            try await record(Array(documentedRequest.replacingOccurrences(of: "eyJhbGciOiJI...", with: token).utf8))
            try await record(Array(documentedRequest.utf8), signed: false)
            #expect(answers[0]["authenticated"] == .bool(false) && answers[0]["error"].errorCode == "malformed", "\(answers[0])")
            #expect(answers[1]["authenticated"] == .bool(true), "\(answers[1])")
            #expect(answers[1]["permissions"] == documentedPermissions)
            // Every member of Ditto's answer example is there, with its JSON kind.
            func kind(_ value: JSONValue?) -> String {
                switch value {
                case .object?: "object"
                case .array?: "array"
                case .string?: "string"
                case .number?: "number"
                case .bool?: "bool"
                case .null?: "null"
                case nil: "absent"
                }
            }
            for (name, value) in documentedAnswer.objectValue ?? [:] { #expect(kind(answers[1][name]) == kind(value), "\(name)") }
            #expect(answers[2]["error"].errorCode == "signature_missing", "\(answers[2])")
            return recorded
        }
        #expect(recorded.map { $0.objectValue?["status"] } == [.integer(200), .integer(200), .integer(401)])
        try await Self.check(recorded)
    }
}
