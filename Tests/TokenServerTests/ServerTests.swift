import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
import Metrics
import Prometheus
import PeerCA
import ServiceLifecycle
import TestSupport
import Testing
import TokenKit
@testable import TokenServer

/// The test process's one Prometheus registry: swift-metrics is bootstrapped with it on first use
/// (once per process, as `tokentool serve` does at start).
enum ProcessMetrics {
    static let registry: PrometheusCollectorRegistry = {
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        return registry
    }()
}

/// A running server on loopback (real sockets), with a client and an openssl scratch directory.
struct LiveServer {
    let port: UInt16
    let state: URL
    let service: TokenService
    let client: HTTPClient
    let secret: [UInt8]

    /// The server's URL, without a path.
    var base: String { "http://127.0.0.1:\(port)" }

    /// The time the test servers give a request (`limits.requestTimeoutSeconds`), where a test is
    /// not about that deadline (RequestDeadlinesTests are): a full `swift test` on two CPUs runs
    /// ~270 tests at once and can keep a request's task from running for tens of seconds; with the
    /// default 10 s, requests were answered 503 in full runs (RouterTests'
    /// `metricsShowTheLedgersCommits`, twice).
    static let requestTimeout: Double = 300

    /// How a test serves the service: the group to run, given the service, a logger and what to
    /// call with the bound port.
    typealias Serving = @Sendable (TokenService, Logger, @escaping @Sendable (Int) async -> Void) throws -> ServiceGroup

    /// What `tokentool serve` runs: ``TokenHTTPServer/serviceGroup(_:logger:signals:metrics:onRunning:)``.
    static let serviceGroup: Serving = { service, logger, onRunning in
        try TokenHTTPServer.serviceGroup(service, logger: logger, metrics: ProcessMetrics.registry, onRunning: onRunning)
    }

    /// Starts a server on embedded defaults (plus `configure`; ``requestTimeout`` for requests),
    /// served by `serving`, runs `body`, stops it gracefully.
    static func with<T: Sendable>(
        configure: @Sendable (inout ServerConfiguration) -> Void = { _ in }, serving: Serving = serviceGroup,
        _ body: @Sendable (LiveServer) async throws -> T
    ) async throws -> T {
        let state = try temporaryDirectory()
        var configuration = try ServerConfiguration.embeddedDefaults(state: state.path, port: 0)
        configuration.limits = ServerConfiguration.Limits(requestTimeoutSeconds: requestTimeout)
        configure(&configuration)
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let service = try await TokenService.start(configuration: configuration, logger: logger)
        let started = AsyncStream<Int>.makeStream()
        let group = try serving(service, logger) { port in
            started.continuation.yield(port)
            started.continuation.finish()
        }
        // Generous timeouts: the PostgreSQL test queues 80 requests behind the pool's connections,
        // and a loaded machine must not turn that wait into a failure.
        let client = HTTPClient(
            eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: .init(timeout: .init(connect: .seconds(60), read: .seconds(60))))
        let secret = Array(try Data(contentsOf: URL(fileURLWithPath: ServerConfiguration.devSecretPath(state: state.path))))
        return try await withThrowingTaskGroup(of: T?.self) { tasks in
            tasks.addTask { try await group.run(); return nil }
            guard let port = await started.stream.first(where: { _ in true }) else { throw SupportFailure("the server did not start") }
            let server = LiveServer(port: UInt16(port), state: state, service: service, client: client, secret: secret)
            do {
                let result = try await body(server)
                await group.triggerGracefulShutdown()
                try await client.shutdown()
                try await tasks.waitForAll()
                await service.shutdown()
                return result
            } catch {
                await group.triggerGracefulShutdown()
                try? await client.shutdown()
                await service.shutdown()
                throw error
            }
        }
    }

    func token(_ claims: [String: JSONValue] = [:], secret: [UInt8]? = nil, lifetime: Int = 3600) throws -> String {
        let now = Int(Date().timeIntervalSince1970)
        var all: [String: JSONValue] = [
            "iss": .string(ServerConfiguration.devIssuer), "sub": .string("user-7"), "iat": .integer(now), "exp": .integer(now + lifetime),
            "jti": .string(UUID().uuidString),
        ]
        all.merge(claims) { $1 }
        return try JWTSigner(key: try JWTKey.hmac(secret: secret ?? self.secret)).sign(claims: all)
    }

    @discardableResult
    func request(
        _ method: HTTPMethod, _ path: String, body: [UInt8]? = nil, contentType: String = "application/json", headers: [String: String] = [:]
    ) async throws -> (status: Int, body: [UInt8], headers: HTTPHeaders) {
        var request = HTTPClientRequest(url: base + path)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body {
            request.headers.add(name: "content-type", value: contentType)
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        let response = try await client.execute(request, timeout: .seconds(20))
        let bytes = try await response.body.collect(upTo: 4 << 20)
        return (Int(response.status.code), Array(bytes.readableBytesView), response.headers)
    }

    func json(_ path: String, _ object: [String: JSONValue], headers: [String: String] = [:]) async throws -> (status: Int, json: [String: JSONValue]) {
        let (status, body, _) = try await request(.POST, path, body: Array(JSONValue.object(object).compactText.utf8), headers: headers)
        return (status, (try? JSONValue.parse(body))?.objectValue ?? [:])
    }
}

struct SupportFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension Optional where Wrapped == JSONValue {
    var errorCode: String? { self?.objectValue?["code"]?.stringValue }
}

@Suite("TokenServer over real HTTP on loopback", .serialized)
struct ServerTests {
    @Test func webhookAnswersInDittosShape() async throws {
        try await LiveServer.with { server in
            let made = Date()
            let token = try server.token(["name": .string("Ada")], lifetime: 600)
            let (status, reply) = try await server.json("/v1/auth", ["appID": .string("dev"), "provider": .string("dev"), "token": .string(token)])
            // What is left of the token's 600 s when it was checked (a busy machine may take seconds to answer).
            let elapsed = Date().timeIntervalSince(made)
            #expect(status == 200)
            #expect(reply["authenticate"] == .bool(true))
            #expect(reply["authenticated"] == .bool(true))
            #expect(reply["userID"]?.stringValue == "dev:user-7")  // provider-qualified (identity issue)
            let seconds = reply["expirationSeconds"]?.doubleValue ?? 0
            #expect(seconds > 598 - elapsed && seconds <= 600, "\(seconds) s left, \(elapsed) s after the token was made")
            #expect(reply["permissions"]?.objectValue?["read"]?.objectValue?["everything"] == .bool(true))
            #expect(reply["permissions"]?.objectValue?["write"]?.objectValue?["queriesByCollection"] == .object([:]))
            #expect(reply["userInfo"]?.objectValue?["name"]?.stringValue == "Ada")
            // databaseID works like appID.
            let viaDatabase = try await server.json("/v1/auth", ["databaseID": .string("dev"), "provider": .string("dev"), "token": .string(token)])
            #expect(viaDatabase.json["authenticate"] == .bool(true))
        }
    }

    /// Permissions per provider, or from a claim when the provider names one (and the token has it).
    @Test func webhookPermissionsFromProviderOrClaim() async throws {
        try await LiveServer.with(configure: {
            $0.providers["dev"]?.permissions = .init(
                read: .init(everything: true), write: .init(everything: false, queriesByCollection: ["cars": ["true"]]))
            $0.providers["dev"]?.permissionsClaim = "ditto"
        }) { server in
            let fromClaim: JSONValue = .object([
                "read": .object(["everything": .bool(false), "queriesByCollection": .object(["notes": .array([.string("owner == 'u'")])])]),
                "write": .object(["everything": .bool(false), "queriesByCollection": .object([:])]),
            ])
            let withClaim = try await server.json("/v1/auth", ["appID": .string("dev"), "provider": .string("dev"), "token": .string(try server.token(["ditto": fromClaim]))])
            #expect(withClaim.json["permissions"] == fromClaim)
            let without = try await server.json("/v1/auth", ["appID": .string("dev"), "provider": .string("dev"), "token": .string(try server.token())])
            let permissions = without.json["permissions"]?.objectValue
            #expect(permissions?["read"]?.objectValue?["everything"] == .bool(true))
            #expect(permissions?["write"]?.objectValue?["everything"] == .bool(false))
            #expect(permissions?["write"]?.objectValue?["queriesByCollection"] == .object(["cars": .array([.string("true")])]))
        }
    }

    @Test func webhookRefusesWithStableCodes() async throws {
        try await LiveServer.with(configure: { $0.limits = .init(maxBodyBytes: 4096, requestTimeoutSeconds: LiveServer.requestTimeout, maxExpirationSeconds: 300) }) { server in
            func auth(_ token: String, provider: String = "dev", appID: String = "dev") async throws -> (Int, [String: JSONValue]) {
                let (status, json) = try await server.json("/v1/auth", ["appID": .string(appID), "provider": .string(provider), "token": .string(token)])
                return (status, json)
            }
            // expirationSeconds is capped by policy (300 s) however long the token lives.
            let long = try await auth(try server.token(lifetime: 7 * 86_400))
            #expect(long.1["expirationSeconds"]?.doubleValue == 300)
            let cases: [(String, String)] = [
                (try server.token(secret: Array(repeating: 7, count: 32)), "bad_signature"),
                (try server.token(lifetime: -120), "expired"),
                (try server.token(["iss": .string("someone-else")]), "issuer_mismatch"),
                ("not-a-token", "malformed"),
            ]
            for (token, code) in cases {
                let (status, reply) = try await auth(token)
                #expect(status == 200)
                #expect(reply["authenticate"] == .bool(false), "\(code)")
                #expect(reply["authenticated"] == .bool(false))
                #expect(reply["error"].errorCode == code)
            }
            #expect(try await auth(try server.token(), provider: "nope").0 == 400)
            let mismatch = try await auth(try server.token(), appID: "other-app")
            #expect(mismatch.0 == 400)
            #expect(mismatch.1["error"].errorCode == "app_mismatch")
            let garbage = try await server.request(.POST, "/v1/auth", body: Array("{not json".utf8))
            #expect(garbage.status == 400)
            #expect(String(decoding: garbage.body, as: UTF8.self).contains("invalid_request"))
            // The parser's reason, not one sentence for every fault (a member named twice said "must be a JSON object").
            let twice = try await server.request(.POST, "/v1/auth", body: Array(#"{"provider":"x","provider":"dev","token":"t"}"#.utf8))
            let twiceText = String(decoding: twice.body, as: UTF8.self)
            #expect(twice.status == 400 && twiceText.contains("the body is not JSON this server reads") && twiceText.contains("provider"), "\(twiceText)")
            let array = try await server.request(.POST, "/v1/auth", body: Array("[1]".utf8))
            #expect(String(decoding: array.body, as: UTF8.self).contains("the body must be a JSON object"))
            let huge = try await server.request(.POST, "/v1/auth", body: Array(repeating: 0x20, count: 10_000))
            #expect(huge.status == 413)
            #expect(String(decoding: huge.body, as: UTF8.self).contains("body_too_large"))
            // The secret never appears in an answer.
            #expect(!String(decoding: garbage.body + huge.body, as: UTF8.self).contains(server.secret.map { String(format: "%02x", $0) }.joined()))
        }
    }

    @Test func certificatesAreIssuedAndOpenSSLAcceptsThem() async throws {
        try await LiveServer.with { server in
            let dir = try temporaryDirectory()
            let openssl = try #require(which("openssl"))
            let csrResult = try await runDetached(openssl, ["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "d.key", "-subj", "/CN=ignored"], cwd: dir)
            #expect(csrResult.status == 0)
            let token = try server.token()
            let (status, reply) = try await server.json("/v1/certificates", ["provider": .string("dev"), "token": .string(token), "csr": .string(csrResult.out)])
            #expect(status == 200, "\(reply)")
            let chain = try #require(reply["certificate"]?.stringValue)
            #expect(reply["spiffeID"]?.stringValue == "spiffe://dev/tokentool-dev/user-7")
            let serial = try #require(reply["serial"]?.stringValue)
            let root = try await server.request(.GET, "/v1/ca")
            #expect(root.status == 200)
            try Data(root.body).write(to: dir.appendingPathComponent("root.pem"))
            let certificates = chain.components(separatedBy: "-----END CERTIFICATE-----\n").filter { !$0.isEmpty }.map { $0 + "-----END CERTIFICATE-----\n" }
            try certificates[0].write(to: dir.appendingPathComponent("leaf.pem"), atomically: true, encoding: .utf8)
            try certificates.dropFirst().joined().write(to: dir.appendingPathComponent("chain.pem"), atomically: true, encoding: .utf8)
            let verified = try await runDetached(openssl, ["verify", "-CAfile", "root.pem", "-untrusted", "chain.pem", "leaf.pem"], cwd: dir)
            #expect(verified.out.contains("leaf.pem: OK"), "\(verified.out)\(verified.err)")
            // It is in the ledger; OCSP over HTTP (openssl as the client) says good, then revoked.
            #expect(try await server.service.ca.ledger.entry(serial: serial) != nil)
            try certificates.dropFirst().first?.write(to: dir.appendingPathComponent("issuer.pem"), atomically: true, encoding: .utf8)
            try (String(decoding: root.body, as: UTF8.self) + certificates.dropFirst().joined()).write(to: dir.appendingPathComponent("cas.pem"), atomically: true, encoding: .utf8)
            let ocspArguments = ["ocsp", "-issuer", "issuer.pem", "-cert", "leaf.pem", "-url", server.base + "/v1/ocsp", "-CAfile", "cas.pem"]
            let good = try await runDetached(openssl, ocspArguments, cwd: dir)
            #expect(good.out.contains("leaf.pem: good"), "\(good.out)\(good.err)")
            _ = try await server.service.ca.revoke(serial: serial, reason: .keyCompromise)
            let revoked = try await runDetached(openssl, ocspArguments, cwd: dir)
            #expect(revoked.out.contains("leaf.pem: revoked"), "\(revoked.out)\(revoked.err)")
            // The CRL over HTTP lists it.
            let crl = try await server.request(.GET, "/v1/crl")
            try Data(crl.body).write(to: dir.appendingPathComponent("crl.der"))
            let text = try await runDetached(openssl, ["crl", "-inform", "DER", "-in", "crl.der", "-noout", "-text"], cwd: dir)
            #expect(text.out.contains(serial.uppercased()))
            // Bad CSRs and bad tokens get typed errors.
            let badCSR = try await server.json("/v1/certificates", ["provider": .string("dev"), "token": .string(try server.token()), "csr": .string("garbage")])
            #expect(badCSR.status == 400)
            #expect(badCSR.json["error"].errorCode == "invalid_csr")
            let badToken = try await server.json("/v1/certificates", ["provider": .string("dev"), "token": .string("x.y.z"), "csr": .string(csrResult.out)])
            #expect(badToken.status == 401)
        }
    }

    /// One-use tokens (`ca.tokenReuse = once`): a retry of the same request — same token, same
    /// key — gets the certificate the token was used for, again; another key is refused
    /// `token_reused`; a revoked certificate is not given again. Nothing new is recorded.
    @Test func aRetryWithTheSameOneUseTokenAndKeyGetsTheSameCertificate() async throws {
        try await LiveServer.with(configure: { $0.ca?.tokenReuse = .oncePerTokenID }) { server in
            let token = try server.token(["sub": .string("retrying-user")])
            let csr = try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate())
            let issue: @Sendable (String) async throws -> (status: Int, json: [String: JSONValue]) = { csr in
                try await server.json("/v1/certificates", ["provider": .string("dev"), "token": .string(token), "csr": .string(csr)])
            }
            let first = try await issue(csr)
            #expect(first.status == 200, "\(first.json)")
            // A new CSR of the same key: what a client that lost the answer sends again.
            let retry = try await issue(csr)
            #expect(retry.status == 200, "\(retry.json)")
            #expect(retry.json["serial"] == first.json["serial"] && retry.json["certificate"] == first.json["certificate"])
            let otherKey = try await issue(try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate()))
            #expect(otherKey.status == 403 && otherKey.json["error"].errorCode == "token_reused", "\(otherKey.json)")
            #expect(try await server.service.ca.ledger.entries(subject: try #require(first.json["spiffeID"]?.stringValue)).count == 1)
            let metrics = String(decoding: try await server.request(.GET, "/metrics").body, as: UTF8.self)
            #expect(metrics.contains("tokenserver_certificates_repeated_total{provider=\"dev\"}"), "\(metrics)")

            _ = try await server.service.ca.revoke(serial: try #require(first.json["serial"]?.stringValue), reason: .keyCompromise)
            let afterRevocation = try await issue(csr)
            #expect(afterRevocation.status == 403 && afterRevocation.json["error"].errorCode == "token_reused", "a revoked certificate is not given again")
        }
    }

    @Test func healthAndMetrics() async throws {
        try await LiveServer.with { server in
            let health = try await server.request(.GET, "/healthz")
            #expect(health.status == 200)
            _ = try await server.json("/v1/auth", ["provider": .string("dev"), "token": .string(try server.token())])
            let metrics = try await server.request(.GET, "/metrics")
            #expect(metrics.status == 200)
            let text = String(decoding: metrics.body, as: UTF8.self)
            #expect(text.contains("tokenserver_requests_total"), "\(text.prefix(400))")
            #expect(text.contains("tokenserver_auth_decisions_total"))
            #expect(try await server.request(.GET, "/nope").status == 404)
        }
    }

    @Test func configurationErrorsNameTheKey() throws {
        func error(_ json: String) -> String {
            do { _ = try ServerConfiguration.parse(Data(json.utf8)); return "" } catch { return error.key }
        }
        #expect(error(#"{"providers": {}}"#) == "providers")
        #expect(error(#"{"providers": {"a": {"type": "oidc"}}}"#) == "providers.a.issuer")
        #expect(error(#"{"providers": {"a": {"type": "magic"}}}"#) == "providers.a.type")
        #expect(error(#"{"providers": {"a": {"type": "jwks", "url": "https://x/jwks"}}}"#) == "providers.a.issuers")
        #expect(error(#"{"listen": {"port": 70000}, "providers": {"a": {"type": "pda"}}}"#) == "listen.port")
        #expect(error(#"{"listen": {"port": "80"}, "providers": {"a": {"type": "pda"}}}"#) == "listen.port")
        #expect(error(#"{"store": "mysql://x", "providers": {"a": {"type": "pda"}}}"#) == "store")
        #expect(error(#"{"limits": {"maxBodyBytes": 10}, "providers": {"a": {"type": "pda"}}}"#) == "limits.maxBodyBytes")
        #expect(error(#"{"limits": {"maxConnections": 0}, "providers": {"a": {"type": "pda"}}}"#) == "limits.maxConnections")
        #expect(ServerConfiguration.defaultMaxConnections >= 16)
        // Permissions must be stated (the identity-and-sessions issue): none given names the key.
        #expect(error(#"{"providers": {"a": {"type": "pda"}}}"#) == "providers.a.permissions")
        #expect(error(#"{"providers": {"a": {"type": "pda", "permissionsClaim": "ditto"}}}"#) == "")
        let stated = #"{"read": {"everything": true, "queriesByCollection": {}}, "write": {"everything": false, "queriesByCollection": {}}}"#
        #expect(error(#"{"providers": {"a": {"type": "pda", "permissions": \#(stated)}}}"#) == "")
        #expect(error(#"{"providers": {"a": {"type": "pda", "permissions": \#(stated), "factors": {"maxSignInAgeSeconds": 0}}}}"#) == "providers.a.factors.maxSignInAgeSeconds")
        #expect(error(#"{"providers": {"a": {"type": "pda", "permissions": \#(stated), "account": {"claim": ""}}}}"#) == "providers.a.account.claim")
        // A setting the type does not use is refused, not ignored (a pda provider's issuers and
        // audiences were: tokens from any allowed PDA passed).
        #expect(error(#"{"providers": {"a": {"type": "pda", "permissions": \#(stated), "issuers": ["mine.hubat.net"]}}}"#) == "providers.a.issuers")
        #expect(error(#"{"providers": {"a": {"type": "pda", "permissions": \#(stated), "audiences": ["my-app"]}}}"#) == "providers.a.audiences")
        #expect(error(#"{"providers": {"a": {"type": "oidc", "issuer": "https://x/", "url": "https://x/jwks", "permissions": \#(stated)}}}"#) == "providers.a.url")
        #expect(error(#"{"providers": {"a": {"type": "pem", "keyFile": "k.pem", "issuers": ["i"], "caFile": "ca.pem", "permissions": \#(stated)}}}"#) == "providers.a.caFile")
        #expect(error(#"{"providers": {"a": {"type": "hs256", "secretFile": "s", "issuers": ["i"], "applications": ["x"], "permissions": \#(stated)}}}"#) == "providers.a.applications")
        #expect(error(#"{"providers": {"a": {"type": "oidc", "issuer": "https://x/", "audiences": ["api"], "caFile": "ca.pem", "permissions": \#(stated)}}}"#) == "")
    }

    /// The README's configuration example is one `serve` accepts (it named no permissions, which
    /// every provider must state, and was refused).
    @Test func theReadmesConfigurationExampleIsValid() throws {
        let readme = try String(contentsOf: Fixtures.root.appendingPathComponent("README.md"), encoding: .utf8)
        let blocks = readme.components(separatedBy: "```json\n").dropFirst().compactMap { $0.components(separatedBy: "\n```").first }
        let example = try #require(blocks.first { $0.contains("\"providers\"") && $0.contains("\"listen\"") })
        let configuration = try ServerConfiguration.parse(Data(example.utf8))
        #expect(configuration.providers.count >= 5)
    }

    /// A PDA provider's account is the PDA (its `iss`), not its `sub`: two PDAs signing the same
    /// `sub` were one account (one could log the other out; Ditto saw one user). Other types keep
    /// `sub`; `account.claim` chooses either way.
    @Test func aPDAProvidersAccountIsThePDA() throws {
        let key = try JWTKey.hmac(secret: Array("a-secret-of-at-least-32-bytes-long!!".utf8))
        let now = Int(Date().timeIntervalSince1970)
        func account(_ type: ServerConfiguration.ProviderKind, claim: String? = nil, iss: String) throws -> String {
            var provider = ServerConfiguration.Provider(type: type, permissions: .everything)
            if let claim { provider.account = ServerConfiguration.Account(claim: claim) }
            let rules = ProviderSet.identityRules("hat", provider, caPolicy: try IssuancePolicy(appID: "app", provider: "hat"))
            let token = try JWTSigner(key: key).sign(claims: ["iss": .string(iss), "sub": .string("owner"), "exp": .integer(now + 600)])
            let verified = try JWTVerifier(key: key, policy: ClaimsPolicy(issuers: [iss])).verify(token)
            return try rules.identity(for: verified, now: Date()).accountUID
        }
        #expect(try account(.pda, iss: "alice.hubat.net") == "hat:alice.hubat.net")
        #expect(try account(.pda, iss: "bob.hubat.net") == "hat:bob.hubat.net", "the same sub, another PDA: another account")
        #expect(try account(.pda, claim: "sub", iss: "alice.hubat.net") == "hat:owner")
        #expect(try account(.jwks, iss: "https://idp.example/") == "hat:owner")
    }

    /// With `tls` set the service speaks HTTPS only; a key file others can read is refused.
    @Test func servesHTTPSWhenConfigured() async throws {
        let dir = try temporaryDirectory()
        let openssl = which("openssl") ?? URL(fileURLWithPath: "/usr/bin/openssl")
        let made = try await runDetached(openssl, [
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "server.key", "-out", "server.pem",
            "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
        ], cwd: dir)
        #expect(made.status == 0, "\(made.err)")
        let certificate = dir.appendingPathComponent("server.pem").path, key = dir.appendingPathComponent("server.key").path
        // Group- or world-readable key: refused before listening, naming the key.
        chmod(key, 0o644)
        do {
            let state = try temporaryDirectory()
            var configuration = try ServerConfiguration.embeddedDefaults(state: state.path, port: 0)
            configuration.tls = .init(certificate: certificate, key: key)
            let service = try await TokenService.start(configuration: configuration, logger: Logger(label: "test"))
            let error = #expect(throws: ConfigurationError.self) { _ = try TokenHTTPServer.application(service, logger: Logger(label: "test")) }
            #expect(error?.key == "tls.key")
            await service.shutdown()
        }
        chmod(key, 0o600)
        try await LiveServer.with(configure: { $0.tls = .init(certificate: certificate, key: key) }) { server in
            let port = server.base.split(separator: ":").last.map(String.init) ?? ""
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.trustRoots = .file(certificate)
            let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(tlsConfiguration: tls))
            do {
                var request = HTTPClientRequest(url: "https://localhost:\(port)/v1/auth")
                request.method = .POST
                request.headers.add(name: "content-type", value: "application/json")
                let body = JSONValue.object(["appID": .string("dev"), "provider": .string("dev"), "token": .string(try server.token())])
                request.body = .bytes(ByteBuffer(string: body.compactText))
                let response = try await client.execute(request, timeout: .seconds(20))
                let bytes = try await response.body.collect(upTo: 1 << 20)
                #expect(response.status == .ok)
                #expect(String(buffer: bytes).contains("\"authenticate\":true"))
                try await client.shutdown()
            } catch {
                try? await client.shutdown()
                throw error
            }
            // Plain HTTP to the same port gets no HTTP answer: at most a TLS alert record, then
            // the close.
            let (plain, closed) = try await LoopbackSocket.exchangeToClose(
                port: server.port, sending: Array("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n".utf8), seconds: 60)
            #expect(closed, "the connection was held open")
            #expect(!String(decoding: plain, as: UTF8.self).contains("HTTP/1.1"), "\(plain)")
            #expect(plain.isEmpty || plain.first == 0x15, "not a TLS alert record: \(plain)")
        }
    }
}
