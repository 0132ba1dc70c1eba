import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import MetricsTestKit
import NIOCore
import PeerCA
import Prometheus
import TestSupport
import Testing
import TokenKit
@testable import TokenServer

/// The service's routes in process (HummingbirdTesting's router mode: no socket), beside the live
/// tests over loopback in ServerTests.
@Suite("Routes in process")
struct RouterTests {
    struct Fixture {
        let service: TokenService
        let secret: [UInt8]

        init() async throws {
            let state = try temporaryDirectory()
            var configuration = try ServerConfiguration.embeddedDefaults(state: state.path, port: 0)
            configuration.limits = ServerConfiguration.Limits(maxBodyBytes: 4096, requestTimeoutSeconds: LiveServer.requestTimeout)
            service = try await TokenService.start(configuration: configuration, logger: Logger(label: "router-tests"))
            secret = Array(try Data(contentsOf: URL(fileURLWithPath: ServerConfiguration.devSecretPath(state: state.path))))
        }

        func token(issuer: String = ServerConfiguration.devIssuer) throws -> String {
            let now = Int(Date().timeIntervalSince1970)
            return try JWTSigner(key: try JWTKey.hmac(secret: secret)).sign(claims: [
                "iss": .string(issuer), "sub": .string("router-user"), "iat": .integer(now), "exp": .integer(now + 600),
            ])
        }

        func body(_ object: [String: JSONValue]) -> ByteBuffer { ByteBuffer(string: JSONValue.object(object).compactText) }
    }

    /// Each route test runs twice: requests handed to the router in process (HummingbirdTesting's
    /// `.router`), and over sockets to a live server on a port the OS picks, through
    /// AsyncHTTPClient (`.ahc(.http)`; the one-connection `.live` client failed once in five full
    /// runs with "I/O on closed channel" in a test that took 108 s on a loaded machine).
    enum Mode: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case router, live
        var setup: TestingSetup { self == .router ? .router : .ahc(.http) }
        var testDescription: String { rawValue }
    }

    /// The application `tokentool serve` runs (its edge handler, connection cap and idle
    /// timeout) around `router`; the live mode gives it a port the OS picks.
    static func application(_ service: TokenService, _ router: CountedRouter) throws -> Application<CountingResponder> {
        try TokenHTTPServer.makeApplication(service, logger: Logger(label: "test"), router: router, onRunning: { _ in })
    }

    static func json(_ response: TestResponse) throws -> [String: JSONValue] {
        try JSONValue.parse(Array(response.body.readableBytesView)).objectValue ?? [:]
    }

    @Test(arguments: Mode.allCases) func webhookAcceptsRefusesAndRejects(mode: Mode) async throws {
        let fixture = try await Fixture()
        let app = try Self.application(fixture.service, TokenHTTPServer.router(fixture.service, metrics: ProcessMetrics.registry))
        try await app.test(mode.setup) { client in
            let accepted = try await client.execute(
                uri: "/v1/auth", method: .post, body: fixture.body(["appID": .string("dev"), "provider": .string("dev"), "token": .string(try fixture.token())]))
            #expect(accepted.status == .ok)
            #expect(try Self.json(accepted)["authenticate"] == .bool(true))
            #expect(try Self.json(accepted)["userID"] == .string("dev:router-user"))

            let refused = try await client.execute(
                uri: "/v1/auth", method: .post, body: fixture.body(["provider": .string("dev"), "token": .string(try fixture.token(issuer: "someone-else"))]))
            #expect(refused.status == .ok)
            let refusal = try Self.json(refused)
            #expect(refusal["authenticate"] == .bool(false))
            #expect(refusal["error"]?.objectValue?["code"] == .string("issuer_mismatch"), "\(refusal)")

            let malformed = try await client.execute(uri: "/v1/auth", method: .post, body: ByteBuffer(string: "[1,2"))
            #expect(malformed.status == .badRequest)
            #expect(try Self.json(malformed)["error"]?.objectValue?["code"] == .string("invalid_request"))

            // Over a socket the server answers 413 from the head and closes the connection while
            // HummingbirdTesting's one-connection client is still writing the body, so the client
            // fails; FrontEndTests read that 413 byte by byte (tooLargeBodiesAndWrongMethods).
            if mode == .router {
                let tooLarge = try await client.execute(uri: "/v1/auth", method: .post, body: ByteBuffer(repeating: UInt8(ascii: "x"), count: 5000))
                #expect(tooLarge.status == .contentTooLarge)
                #expect(try Self.json(tooLarge)["error"]?.objectValue?["code"] == .string("body_too_large"))
            }

            let unknownProvider = try await client.execute(
                uri: "/v1/certificates", method: .post, body: fixture.body(["provider": .string("nope"), "token": .string("t"), "csr": .string("c")]))
            #expect(unknownProvider.status == .badRequest)
            #expect(try Self.json(unknownProvider)["error"]?.objectValue?["code"] == .string("unknown_provider"))
        }
    }

    /// Found by API fuzzing (scripts/api_fuzz.sh): wrongly typed fields were read as absent, a
    /// second app name went unchecked, and a 1-second certificate was refused as token_expired.
    @Test(arguments: Mode.allCases) func fieldsOfTheWrongTypeAreRefusedNotIgnored(mode: Mode) async throws {
        let fixture = try await Fixture()
        let csr = try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate())
        let app = try Self.application(fixture.service, TokenHTTPServer.router(fixture.service, metrics: nil, metricsFactory: TestMetrics()))
        try await app.test(mode.setup) { client in
            func post(_ path: String, _ fields: [String: JSONValue]) async throws -> (HTTPResponse.Status, [String: JSONValue]) {
                var object: [String: JSONValue] = ["provider": .string("dev"), "token": .string(try fixture.token())]
                object.merge(fields) { $1 }
                let response = try await client.execute(uri: path, method: .post, body: fixture.body(object))
                return (response.status, try Self.json(response))
            }
            func code(_ answer: [String: JSONValue]) -> String? { answer["error"]?.objectValue?["code"]?.stringValue }
            for bad: JSONValue in [.object([:]), .integer(5), .bool(true), .null] {
                let (status, answer) = try await post("/v1/auth", ["appID": .string("dev"), "databaseID": bad])
                #expect(status == .badRequest)
                #expect(code(answer) == "invalid_request", "\(answer)")
                let (appStatus, _) = try await post("/v1/auth", ["appID": bad])
                #expect(appStatus == .badRequest)
            }
            let (mismatch, mismatchAnswer) = try await post("/v1/auth", ["appID": .string("dev"), "databaseID": .string("other")])
            #expect(mismatch == .badRequest)
            #expect(code(mismatchAnswer) == "app_mismatch")
            let (both, bothAnswer) = try await post("/v1/auth", ["appID": .string("dev"), "databaseID": .string("dev"), "extra": .null])
            #expect(both == .ok)
            #expect(bothAnswer["authenticate"] == .bool(true))

            for bad: JSONValue in [.string("3600"), .object([:]), .bool(true), .null] {
                let (status, answer) = try await post("/v1/certificates", ["csr": .string(csr), "validitySeconds": bad])
                #expect(status == .badRequest)
                #expect(code(answer) == "invalid_request", "\(answer)")
            }
            let (tooShort, tooShortAnswer) = try await post("/v1/certificates", ["csr": .string(csr), "validitySeconds": .number("0.5")])
            #expect(tooShort == .forbidden)
            #expect(code(tooShortAnswer) == "policy_violation")
            // One second from when the server issued it, which is between the request's start and its answer
            // (a bound from the request itself, not a wall-clock tolerance a loaded machine can exceed).
            let sent = Date().timeIntervalSince1970.rounded(.down)
            let (oneSecond, oneSecondAnswer) = try await post("/v1/certificates", ["csr": .string(csr), "validitySeconds": .integer(1)])
            let answered = Date().timeIntervalSince1970.rounded(.down)
            #expect(oneSecond == .ok, "\(oneSecondAnswer)")
            let notAfter = try #require(oneSecondAnswer["notAfter"]?.stringValue.flatMap { ISO8601DateFormatter().date(from: $0) })
            #expect((sent + 1...answered + 1).contains(notAfter.timeIntervalSince1970), "\(notAfter) for a request sent at \(sent), answered at \(answered)")
        }
    }

    /// Identity, factors and permissions per provider (the identity-and-sessions issue).
    struct Providers {
        let service: TokenService
        let secret: [UInt8]

        init() async throws {
            let state = try temporaryDirectory()
            var configuration = try ServerConfiguration.embeddedDefaults(state: state.path, port: 0)
            let dev = try #require(configuration.providers["dev"])
            var other = dev
            other.account = ServerConfiguration.Account(claim: nil, prefix: nil)
            var strict = dev
            strict.factors = ServerConfiguration.Factors(require: ["mfa"], acr: ["urn:example:loa:2"], maxSignInAgeSeconds: 600)
            strict.account = ServerConfiguration.Account(claim: "email", prefix: "")
            var claimed = dev
            claimed.permissions = nil
            claimed.permissionsClaim = "ditto"
            configuration.providers = ["dev": dev, "other": other, "strict": strict, "claimed": claimed]
            service = try await TokenService.start(configuration: configuration, logger: Logger(label: "router-tests"))
            secret = Array(try Data(contentsOf: URL(fileURLWithPath: ServerConfiguration.devSecretPath(state: state.path))))
        }

        func token(_ extra: [String: JSONValue] = [:]) throws -> String {
            let now = Int(Date().timeIntervalSince1970)
            var claims: [String: JSONValue] = [
                "iss": .string(ServerConfiguration.devIssuer), "sub": .string("same-sub"), "iat": .integer(now), "exp": .integer(now + 600),
                "email": .string("ada@example.com"),
            ]
            claims.merge(extra) { $1 }
            return try JWTSigner(key: try JWTKey.hmac(secret: secret)).sign(claims: claims)
        }
    }

    @Test(arguments: Mode.allCases) func identitiesArePerProviderAndFactorsAndPermissionsAreChecked(mode: Mode) async throws {
        let fixture = try await Providers()
        let csr = try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate())
        let app = try Self.application(fixture.service, TokenHTTPServer.router(fixture.service, metrics: nil, metricsFactory: TestMetrics()))
        try await app.test(mode.setup) { client in
            func post(_ path: String, _ object: [String: JSONValue]) async throws -> (HTTPResponse.Status, [String: JSONValue]) {
                let response = try await client.execute(uri: path, method: .post, body: ByteBuffer(string: JSONValue.object(object).compactText))
                return (response.status, try Self.json(response))
            }
            func auth(_ provider: String, _ token: String) async throws -> [String: JSONValue] {
                try await post("/v1/auth", ["provider": .string(provider), "token": .string(token)]).1
            }
            func code(_ answer: [String: JSONValue]) -> String? { answer["error"]?.objectValue?["code"]?.stringValue }
            let plain = try fixture.token()

            // Two providers whose users share a sub: two accounts.
            let viaDev = try await auth("dev", plain)
            let viaOther = try await auth("other", plain)
            #expect(viaDev["userID"] == .string("dev:same-sub"))
            #expect(viaOther["userID"] == .string("other:same-sub"))
            let info = try #require(viaDev["userInfo"]?.objectValue)
            #expect(info["provider"] == .string("dev"))
            #expect(info["providerUID"] == .string("same-sub"))
            #expect(info["profile"]?.objectValue?["email"] == .string("ada@example.com"))
            guard case .array(let factors)? = info["factors"] else { Issue.record("no factors: \(info)"); return }
            #expect(factors.first?.objectValue?["method"] == .string("token"))

            // A policy requiring mfa (with an acr and a recent sign-in): each refusal its own code.
            #expect(code(try await auth("strict", plain)) == "factor_required")
            let mfa = try fixture.token(["amr": .array([.string("pwd"), .string("mfa")]), "acr": .string("urn:example:loa:2")])
            let accepted = try await auth("strict", mfa)
            #expect(accepted["authenticate"] == .bool(true), "\(accepted)")
            #expect(accepted["userID"] == .string("ada@example.com"), "the account rule: claim email, no prefix")
            #expect(accepted["userInfo"]?.objectValue?["acr"] == .string("urn:example:loa:2"))
            let wrongContext = try fixture.token(["amr": .array([.string("mfa")]), "acr": .string("urn:example:loa:1")])
            #expect(code(try await auth("strict", wrongContext)) == "acr_not_accepted")
            let stale = try fixture.token([
                "amr": .array([.string("mfa")]), "acr": .string("urn:example:loa:2"), "auth_time": .integer(Int(Date().timeIntervalSince1970) - 3600),
            ])
            #expect(code(try await auth("strict", stale)) == "sign_in_too_old")
            // The same rules on issuance, as 403s; nothing is issued.
            let (refusedStatus, refused) = try await post("/v1/certificates", ["provider": .string("strict"), "token": .string(plain), "csr": .string(csr)])
            #expect(refusedStatus == .forbidden)
            #expect(code(refused) == "factor_required")
            let (issuedStatus, issued) = try await post("/v1/certificates", ["provider": .string("strict"), "token": .string(mfa), "csr": .string(csr)])
            #expect(issuedStatus == .ok, "\(issued)")
            #expect(issued["identity"]?.objectValue?["account"] == .string("ada@example.com"))
            #expect(try await fixture.service.ca.ledger.recent(limit: 10).count == 1)

            // A permissions claim must have Ditto's shape; a malformed one is a refusal, never a default.
            let good: JSONValue = .object([
                "read": .object(["everything": .bool(true), "queriesByCollection": .object([:])]),
                "write": .object(["everything": .bool(false), "queriesByCollection": .object(["cars": .array([.string("owner == 'ada'")])])]),
            ])
            let withClaim = try await auth("claimed", try fixture.token(["ditto": good]))
            #expect(withClaim["permissions"] == good)
            for bad: JSONValue in [
                .string("all"), .object(["read": .object(["everything": .bool(true)])]),
                .object(["read": .object(["everything": .string("yes")]), "write": .object(["everything": .bool(false)])]),
                .object(["read": .object(["everything": .bool(true), "queriesByCollection": .object(["c": .integer(1)])]), "write": .object(["everything": .bool(false)])]),
                .object(["read": .object(["everything": .bool(true)]), "write": .object(["everything": .bool(false)]), "admin": .bool(true)]),
            ] {
                let answer = try await auth("claimed", try fixture.token(["ditto": bad]))
                #expect(answer["authenticate"] == .bool(false))
                #expect(code(answer) == "invalid_permissions", "\(bad)")
            }
            #expect(code(try await auth("claimed", plain)) == "missing_permissions")
        }
    }

    @Test(arguments: Mode.allCases) func caHealthAndUnknownRoutes(mode: Mode) async throws {
        let fixture = try await Fixture()
        let app = try Self.application(fixture.service, TokenHTTPServer.router(fixture.service, metrics: ProcessMetrics.registry))
        try await app.test(mode.setup) { client in
            let ca = try await client.execute(uri: "/v1/ca", method: .get)
            #expect(ca.status == .ok)
            #expect(String(buffer: ca.body).hasPrefix("-----BEGIN CERTIFICATE-----"))
            #expect(ca.headers[.contentType] == "application/x-pem-file")
            #expect(ca.headers[.cacheControl] == "no-store")
            let health = try await client.execute(uri: "/healthz", method: .get)
            #expect(String(buffer: health.body) == "ok\n")
            #expect(try await client.execute(uri: "/nope", method: .get).status == .notFound)
            let wrongMethod = try await client.execute(uri: "/v1/auth", method: .get)
            #expect(wrongMethod.status == .methodNotAllowed)
            #expect(wrongMethod.headers[.allow] == "POST")
            let head = try await client.execute(uri: "/healthz", method: .head)
            #expect(head.status == .ok && head.body.readableBytes == 0)
        }
    }

    /// Every request is counted once, by endpoint and status, errors and unknown paths
    /// included (its own metrics factory here: other tests count into the process's registry at
    /// the same time); without a registry there is no /metrics route.
    @Test(arguments: Mode.allCases) func everyRequestIsCountedOnce(mode: Mode) async throws {
        let fixture = try await Fixture()
        let counted = TestMetrics()
        @Sendable func count(endpoint: String, status: Int) -> Int64 {
            (try? counted.expectCounter("tokenserver_requests_total", [("endpoint", endpoint), ("status", String(status))]))?.totalValue ?? 0
        }
        let app = try Self.application(fixture.service, TokenHTTPServer.router(fixture.service, metrics: nil, metricsFactory: counted))
        try await app.test(mode.setup) { client in
            for _ in 0..<3 { _ = try await client.execute(uri: "/healthz", method: .get) }
            _ = try await client.execute(uri: "/v1/auth", method: .post, body: ByteBuffer(string: "{}"))
            _ = try await client.execute(uri: "/does-not-exist", method: .get)
            let metrics = try await client.execute(uri: "/metrics", method: .get)
            #expect(metrics.status == .notFound)
            // Last: over a socket the 413 ends the connection (see webhookAcceptsRefusesAndRejects),
            // and the client's error is expected there; the count is the same either way.
            if mode == .router {
                _ = try await client.execute(uri: "/v1/auth", method: .post, body: ByteBuffer(repeating: 0x20, count: 5000))
            } else {
                _ = try? await client.execute(uri: "/v1/auth", method: .post, body: ByteBuffer(repeating: 0x20, count: 5000))
            }
            #expect(count(endpoint: "healthz", status: 200) == 3)
            #expect(count(endpoint: "auth", status: 400) == 1)
            #expect(count(endpoint: "auth", status: 413) == 1)
            #expect(count(endpoint: "unknown", status: 404) == 1)
            #expect(count(endpoint: "metrics", status: 404) == 1, "no registry, no /metrics")
        }
    }

    /// /metrics shows the ledger's group commit (transactions and the certificates in them) and
    /// the ended-sessions list's age, and none of the removed layers' gauges.
    @Test(arguments: Mode.allCases) func metricsShowTheLedgersCommits(mode: Mode) async throws {
        let fixture = try await Fixture()
        let registry = PrometheusCollectorRegistry()
        let app = try Self.application(fixture.service, TokenHTTPServer.router(fixture.service, metrics: registry, metricsFactory: TestMetrics()))
        try await app.test(mode.setup) { client in
            for _ in 0..<3 {
                let csr = try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate())
                let issued = try await client.execute(
                    uri: "/v1/certificates", method: .post,
                    body: fixture.body(["provider": .string("dev"), "token": .string(try fixture.token()), "csr": .string(csr)]))
                #expect(issued.status == .ok)
            }
            // The application loads the ended-sessions list before it serves (service.prepare);
            // reloaded once more here, its age is seconds at most.
            try await fixture.service.sessions.reload()
            let metrics = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
            // One at a time: three transactions of one certificate each.
            #expect(metrics.contains("\ntokenserver_ledger_commits 3"), "\(metrics)")
            #expect(metrics.contains("\ntokenserver_ledger_committed_certificates 3"))
            #expect(metrics.contains("\ntokenserver_ledger_largest_commit 1"))
            #expect(metrics.contains("\ntokenserver_ledger_withdrawn 0"), "no request was cancelled while it waited")
            #expect(metrics.contains("\ntokenserver_sessions_reload_failures 0"), "\(metrics)")
            let sessionsAge = metrics.split(separator: "\n").first { $0.hasPrefix("tokenserver_sessions_list_age_seconds ") }
            #expect(sessionsAge.flatMap { Double($0.split(separator: " ")[1]) }.map { $0 >= 0 && $0 < 60 } == true, "\(String(describing: sessionsAge))")
            for removed in ["tokenserver_ca_presign", "tokenserver_sqlite_pagecache", "tokenserver_ledger_writer_raise"] {
                #expect(!metrics.contains(removed), "\(removed)")
            }

        }
    }
}
