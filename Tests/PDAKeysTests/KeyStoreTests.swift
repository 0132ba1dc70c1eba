import Foundation
import Logging
import Metrics
import MetricsTestKit
import TestSupport
import Testing
@testable import PDAKeys
import TokenKit

/// The key store and fetcher against a real HTTPS server on loopback. Every assertion about
/// caching is made on the requests the server actually received.
@Suite("Remote keys: JWKS, OIDC discovery, caching and misbehaving servers")
struct KeyStoreTests {
    static let jwksPath = "idp.test/.well-known/jwks.json"

    func jwksRoute(_ keys: [(JWTKey, String)], cacheControl: String? = nil) throws -> Route {
        var headers = ["Content-Type": "application/json"]
        if let cacheControl { headers["Cache-Control"] = cacheControl }
        return Route(headers: headers, body: try TestKeys.jwks(keys))
    }

    func jwksURL(_ server: KeyServer) -> String { "https://idp.test:\(server.port)/.well-known/jwks.json" }

    // MARK: Sources

    @Test func jwksVerifiesAndRefusesUnknownKids() async throws {
        let clock = ManualClock()
        try await withServer(routes: [Self.jwksPath: try jwksRoute([(TestKeys.ec, "k1"), (TestKeys.rsa, "k2")])], clock: clock) { server, store in
            let verifier = RemoteJWTVerifier(source: .jwks(url: jwksURL(server)), store: store, policy: ClaimsPolicy(issuers: ["https://idp.test/"]))
            let claims: [String: JSONValue] = ["iss": .string("https://idp.test/"), "sub": .string("u1"), "exp": .integer(Int(clock.now) + 600)]
            let ec = try sign(claims, with: TestKeys.ec, kid: "k1")
            let rsa = try sign(claims, with: TestKeys.rsa, kid: "k2")
            #expect(try await verifier.verify(ec).claims.subject == "u1")
            #expect(try await verifier.verify(rsa).key.kid == "k2")
            #expect(server.requests == ["GET idp.test/.well-known/jwks.json accept=application/json"])
            // A token signed by k1's key but naming k2 fails on the signature, not on a fallback.
            let swapped = try sign(claims, with: TestKeys.ec, kid: "k2")
            #expect(sourceCode(await thrown { _ = try await verifier.verify(swapped) }) == "algorithm_not_allowed")
            // Within the cooldown after that fetch, an unknown kid is refused without a request.
            let unknown = try sign(claims, with: TestKeys.ec, kid: "k9")
            #expect(sourceCode(await thrown { _ = try await verifier.verify(unknown) }) == "unknown_key")
            #expect(server.requests.count == 1)
            // After it, an unknown kid triggers one refetch (the set did not change), then is refused.
            clock.advance(31)
            #expect(sourceCode(await thrown { _ = try await verifier.verify(unknown) }) == "unknown_key")
            #expect(server.requests.count == 2)
            // Within the cooldown, more unknown kids cause no request at all.
            for _ in 0..<20 { _ = await thrown { _ = try await verifier.verify(unknown) } }
            #expect(server.requests.count == 2)
        }
    }

    @Test func oidcDiscoveryFindsTheJWKSAndChecksTheIssuer() async throws {
        let clock = ManualClock()
        let server = try KeyServer(routes: [:])
        defer { server.stop() }
        let issuer = "https://idp.test:\(server.port)/tenant"
        try server.setRoutes([
            "idp.test/tenant/.well-known/openid-configuration": Route(body: #"{"issuer":"\#(issuer)","jwks_uri":"https://idp.test:\#(server.port)/keys"}"#),
            "idp.test/keys": try jwksRoute([(TestKeys.ec, "k1")]),
            "idp.test/other/.well-known/openid-configuration": Route(body: #"{"issuer":"https://evil.test/","jwks_uri":"https://idp.test:\#(server.port)/keys"}"#),
        ])
        let fetcher = try testFetcher(server)
        defer { Task { await fetcher.shutdown() } }
        let store = RemoteKeyStore(fetcher: fetcher, clock: clock.verificationClock)
        let verifier = RemoteJWTVerifier(source: .oidc(issuer: issuer), store: store, policy: ClaimsPolicy(audiences: ["api"]))
        let good = try sign(["iss": .string(issuer), "aud": .string("api"), "exp": .integer(Int(clock.now) + 60)], with: TestKeys.ec, kid: "k1")
        #expect(try await verifier.verify(good).claims.issuer == issuer)
        #expect(server.requests == [
            "GET idp.test/tenant/.well-known/openid-configuration accept=application/json", "GET idp.test/keys accept=application/json",
        ])
        // The issuer defaults to the discovered one: a token from elsewhere is refused.
        let foreign = try sign(["iss": .string("https://evil.test/"), "aud": .string("api"), "exp": .integer(Int(clock.now) + 60)], with: TestKeys.ec, kid: "k1")
        #expect(sourceCode(await thrown { _ = try await verifier.verify(foreign) }) == "issuer_mismatch")
        // A discovery document naming another issuer is refused before its keys are fetched.
        let mismatched = RemoteKeyStore(fetcher: fetcher, clock: clock.verificationClock)
        let error = await thrown { _ = try await mismatched.keys(for: .oidc(issuer: "https://idp.test:\(server.port)/other")) }
        #expect(sourceCode(error) == "issuer_mismatch")
        #expect(server.count("/keys") == 1)
        await fetcher.shutdown()

        // Discovery and the JWK Set share one total time: 1.2 s each within 2 s is a timeout
        // (each request had the whole time of its own, so the fetch took up to twice it).
        var slowDiscovery = Route(body: #"{"issuer":"\#(issuer)","jwks_uri":"https://idp.test:\#(server.port)/slow-keys"}"#)
        slowDiscovery.delay = 1.2
        var slowKeys = try jwksRoute([(TestKeys.ec, "k1")])
        slowKeys.delay = 1.2
        try server.setRoutes(["idp.test/tenant/.well-known/openid-configuration": slowDiscovery, "idp.test/slow-keys": slowKeys])
        let hurried = try testFetcher(server) { $0.totalTimeout = .seconds(2) }
        // A timeout at all shows the one total time: each request alone (1.2 s) is within 2 s.
        let late = await thrown { _ = try await RemoteKeyStore(fetcher: hurried).keys(for: .oidc(issuer: issuer)) }
        #expect(sourceCode(late) == "timeout", "\(String(describing: late))")
        await hurried.shutdown()
    }

    // MARK: Caching

    @Test func ttlFollowsCacheControlWithinBounds() async throws {
        let cases: [(String?, Double)] = [(nil, 3600), ("max-age=600", 600), ("public, max-age=5", 60), ("max-age=999999", 86_400), ("no-store", 60)]
        for (cacheControl, ttl) in cases {
            let clock = ManualClock()
            try await withServer(routes: [Self.jwksPath: try jwksRoute([(TestKeys.ec, "k1")], cacheControl: cacheControl)], clock: clock) { server, store in
                let source = KeySource.jwks(url: jwksURL(server))
                let set = try await store.keys(for: source)
                #expect(set.expiresAt - set.fetchedAt == ttl, "Cache-Control: \(cacheControl ?? "none")")
                clock.advance(ttl - 1)
                _ = try await store.keys(for: source)
                #expect(server.requests.count == 1, "still fresh at ttl-1 (\(cacheControl ?? "none"))")
                clock.advance(2)
                let next = try await store.keys(for: source)
                #expect(server.requests.count == 2, "refetched after ttl (\(cacheControl ?? "none"))")
                #expect(next.generation == set.generation + 1)
            }
        }
    }

    @Test func rotationIsPickedUpOnUnknownKidWithACooldown() async throws {
        let clock = ManualClock()
        var policy = KeyStorePolicy()
        policy.refreshCooldown = 30
        try await withServer(routes: [Self.jwksPath: try jwksRoute([(TestKeys.ec, "old")])], clock: clock, policy: policy) { server, store in
            let verifier = RemoteJWTVerifier(source: .jwks(url: jwksURL(server)), store: store)
            func token(_ key: JWTKey, _ kid: String) throws -> String { try sign(["exp": .integer(Int(clock.now) + 600)], with: key, kid: kid) }
            _ = try await verifier.verify(try token(TestKeys.ec, "old"))
            // The issuer rotates to a new key. Less than the cooldown after the first fetch, a
            // token with the new kid is refused without a request...
            try server.setRoutes([Self.jwksPath: try jwksRoute([(TestKeys.rsa, "new")])])
            clock.advance(10)
            #expect(sourceCode(await thrown { _ = try await verifier.verify(try token(TestKeys.rsa, "new")) }) == "unknown_key")
            #expect(server.requests.count == 1)
            // ...and once the cooldown has passed, one refetch picks up the new key.
            clock.advance(25)
            #expect(try await verifier.verify(try token(TestKeys.rsa, "new")).key.kid == "new")
            #expect(server.requests.count == 2)
            // A flood of unknown kids right after is not sent on to the issuer.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in 0..<200 { group.addTask { _ = await thrown { _ = try await verifier.verify(try token(TestKeys.ec, "bogus-\(i)")) } } }
                try await group.waitForAll()
            }
            #expect(server.requests.count == 2)
        }
    }

    @Test func staleKeysAreServedThroughAnOutageForABoundedTime() async throws {
        let clock = ManualClock()
        var policy = KeyStorePolicy()
        policy.maximumStaleness = 3600
        policy.failureCacheDuration = 10
        let metrics = TestMetrics()
        let server = try KeyServer(routes: [Self.jwksPath: try jwksRoute([(TestKeys.ec, "k1")], cacheControl: "max-age=600")])
        defer { server.stop() }
        let fetcher = try testFetcher(server)
        let store = RemoteKeyStore(fetcher: fetcher, policy: policy, clock: clock.verificationClock, metricsFactory: metrics)
        let source = KeySource.jwks(url: jwksURL(server))
        let first = try await store.keys(for: source)
        // The issuer goes down.
        try server.setRoutes([Self.jwksPath: Route(status: 503, body: "down")])
        clock.advance(700)
        let stale = try await store.keys(for: source)
        #expect(stale.generation == first.generation)
        #expect(server.requests.count == 2)
        // The failure is cached: asking again at once makes no request and still serves stale keys.
        for _ in 0..<50 { _ = try await store.keys(for: source) }
        #expect(server.requests.count == 2)
        clock.advance(11)
        _ = try await store.keys(for: source)
        #expect(server.requests.count == 3)
        // Past the stale bound (600 s TTL + 3600 s), the failure is what the caller gets.
        clock.advance(3600)
        let error = await thrown { _ = try await store.keys(for: source) }
        #expect(sourceCode(error) == "http_status")
        #expect(server.requests.count == 4)
        // The issuer comes back.
        try server.setRoutes([Self.jwksPath: try jwksRoute([(TestKeys.ec, "k1")])])
        clock.advance(11)
        let back = try await store.keys(for: source)
        #expect(back.generation == first.generation + 1)
        let dims = [("source", "jwks")]
        #expect(try metrics.expectCounter("pdakeys_fetches_total", dims).totalValue == 5)
        #expect(try metrics.expectCounter("pdakeys_fetch_failures_total", dims).totalValue == 3)
        #expect(try metrics.expectCounter("pdakeys_stale_serves_total", dims).totalValue >= 52)
        await fetcher.shutdown()
    }

    @Test func aFailureWithoutKeysIsCachedBriefly() async throws {
        let clock = ManualClock()
        try await withServer(routes: [Self.jwksPath: Route(status: 500, body: "oops")], clock: clock) { server, store in
            let source = KeySource.jwks(url: jwksURL(server))
            for _ in 0..<10 { #expect(sourceCode(await thrown { _ = try await store.keys(for: source) }) == "http_status") }
            #expect(server.requests.count == 1)
            clock.advance(11)
            _ = await thrown { _ = try await store.keys(for: source) }
            #expect(server.requests.count == 2)
        }
    }

    @Test func concurrentColdRequestsShareOneFetch() async throws {
        var route = try jwksRoute([(TestKeys.ec, "k1")])
        route.delay = 0.3
        try await withServer(routes: [Self.jwksPath: route]) { server, store in
            let source = KeySource.jwks(url: jwksURL(server))
            let generations = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<2_000 { group.addTask { try await store.keys(for: source).generation } }
                var seen = Set<Int>()
                for try await generation in group { seen.insert(generation) }
                return seen
            }
            #expect(generations == [1])
            #expect(server.requests.count == 1)
        }
    }

    /// The store stays bounded when tokens name ever new sources (a PDA's keys come from the host
    /// its token names): past `maximumSources` it forgets sources that only failed, keeping those
    /// with keys; and past `maximumConcurrentFetches` a new source fails at once (`busy`) instead
    /// of opening one more connection.
    @Test func theStoreStaysBoundedWhenTokensNameEverNewSources() async throws {
        var policy = KeyStorePolicy()
        policy.maximumSources = 10
        try await withServer(routes: [Self.jwksPath: try jwksRoute([(TestKeys.ec, "k1")])], policy: policy) { server, store in
            let good = KeySource.jwks(url: jwksURL(server))
            _ = try await store.keys(for: good)
            for i in 0..<40 {
                let missing = KeySource.jwks(url: "https://idp.test:\(server.port)/missing-\(i).json")
                #expect(sourceCode(await thrown { _ = try await store.keys(for: missing) }) == "http_status")
                #expect(store.sourceCount <= 10, "\(i): \(store.sourceCount)")
            }
            #expect(store.cachedKeys(for: good) != nil, "sources with keys are kept over those that only failed")
        }

        var slow = try jwksRoute([(TestKeys.ec, "k1")])
        slow.delay = 1.5
        policy = KeyStorePolicy()
        policy.maximumConcurrentFetches = 2
        let routes = ["idp.test/a.json": slow, "idp.test/b.json": slow, "idp.test/c.json": slow]
        try await withServer(routes: routes, policy: policy) { server, store in
            let sources = ["a", "b", "c"].map { KeySource.jwks(url: "https://idp.test:\(server.port)/\($0).json") }
            async let first = store.keys(for: sources[0])
            async let second = store.keys(for: sources[1])
            let deadline = ContinuousClock.now + .seconds(30)
            while server.requests.count < 2, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            // Refused at once, not after a fetch: the server never saw a third request.
            let busy = await thrown { _ = try await store.keys(for: sources[2]) }
            #expect(sourceCode(busy) == "busy", "\(String(describing: busy))")
            #expect(server.requests.count == 2)
            _ = try await (first, second)
            #expect(try await store.keys(for: sources[2]).keys.count == 1, "once the fetches are done, it is fetched")
        }
    }

    // MARK: Misbehaving servers

    @Test func misbehavingServersGiveTypedErrors() async throws {
        let keys = try TestKeys.jwks([(TestKeys.ec, "k1")])
        let cases: [(String, Route, String)] = [
            ("500", Route(status: 500, body: "boom"), "http_status"),
            ("redirect", Route(status: 302, headers: ["Location": "https://evil.test/jwks.json"]), "http_status"),
            ("huge with length", Route(body: String(repeating: "x", count: 1024), repeat: 100), "response_too_large"),
            ("huge chunked", Route(body: String(repeating: "x", count: 1024), repeat: 100, chunked: true), "response_too_large"),
            ("garbage", Route(body: "\u{1}\u{2}not json"), "invalid_document"),
            ("html", Route(body: "<html>login</html>"), "invalid_document"),
            ("not a set", Route(body: #"{"kty":"EC"}"#), "invalid_document"),
            ("empty set", Route(body: #"{"keys":[]}"#), "unusable_key"),
            ("only enc keys", Route(body: #"{"keys":[{"kty":"RSA","use":"enc","n":"AQAB","e":"AQAB"}]}"#), "unusable_key"),
            ("hmac in set", Route(body: #"{"keys":[{"kty":"oct","k":"c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0MTI"}]}"#), "unusable_key"),
            ("slow", Route(body: keys, delay: 3), "timeout"),
            ("trickle", Route(body: String(repeating: " ", count: 8 * 1024) + keys, trickle: 0.5), "timeout"),
        ]
        for (name, route, expected) in cases {
            // 1 s for the timeout cases; the others get room, so a loaded machine cannot turn a
            // size or status case into a timeout.
            let total: Duration = expected == "timeout" ? .seconds(1) : .seconds(15)
            try await withServer(routes: [Self.jwksPath: route], configure: { $0.totalTimeout = total }) { server, store in
                let error = await thrown { _ = try await store.keys(for: .jwks(url: jwksURL(server))) }
                #expect(sourceCode(error) == expected, "\(name): \(String(describing: error))")
                #expect(server.requests.count == 1, "\(name): redirects are not followed")
                if let error { #expect(!String(describing: error).contains("BEGIN"), "\(name): no key material in errors") }
            }
        }
    }

    @Test func onlyHTTPSUnlessLoopbackHTTPIsEnabled() async throws {
        // Plain HTTP is refused by default, even to loopback; no request is made.
        try await withServer(plain: true, routes: ["/jwks.json": try jwksRoute([(TestKeys.ec, "k1")])]) { server, store in
            let url = "http://127.0.0.1:\(server.port)/jwks.json"
            #expect(sourceCode(await thrown { _ = try await store.keys(for: .jwks(url: url)) }) == "insecure_url")
            #expect(server.requests.isEmpty)
        }
        try await withServer(plain: true, routes: ["/jwks.json": try jwksRoute([(TestKeys.ec, "k1")])], configure: { $0.allowPlainHTTPForLoopback = true }) { server, store in
            let url = "http://127.0.0.1:\(server.port)/jwks.json"
            let set = try await store.keys(for: .jwks(url: url))
            #expect(set.keys.count == 1)
            // Still not to a host that is not loopback, nor with userinfo, nor another scheme.
            for bad in ["http://idp.test:\(server.port)/jwks.json", "https://user:pw@idp.test/jwks.json", "ftp://idp.test/jwks.json", "jwks.json", ""] {
                #expect(sourceCode(await thrown { _ = try await store.keys(for: .jwks(url: bad)) }) == "insecure_url", "\(bad)")
            }
            #expect(server.requests.count == 1)
        }
    }

    @Test func serversOutsideTheTrustRootsAreRefused() async throws {
        // The refusal comes with its cause as soon as the handshake fails, on the one connection:
        // AsyncHTTPClient would otherwise connect again and again until the connect timeout (30 s
        // here), and under load the fetcher's own deadline could answer first, without the cause.
        let patient: (inout KeyFetchConfiguration) -> Void = {
            $0.connectTimeout = .seconds(30)
            $0.totalTimeout = .seconds(60)
        }
        // The same server, but the fetcher trusts only an unrelated CA: the TLS handshake fails.
        let pki = try TestPKI.shared.get()
        try await withServer(routes: [Self.jwksPath: try jwksRoute([(TestKeys.ec, "k1")])], configure: { patient(&$0); $0.trustRoots = .pemFile(pki.otherCAFile) }) { server, store in
            let error = await thrown { _ = try await store.keys(for: .jwks(url: jwksURL(server))) }
            #expect(sourceCode(error) == "connection", "\(String(describing: error))")
            #expect(server.connections == 1)
        }
        // A name the certificate does not cover is refused too.
        try await withServer(routes: ["/jwks.json": try jwksRoute([(TestKeys.ec, "k1")])], configure: { patient(&$0); $0.hostOverrides["wrong.example"] = "127.0.0.1" }) { server, store in
            let error = await thrown { _ = try await store.keys(for: .jwks(url: "https://wrong.example:\(server.port)/jwks.json")) }
            #expect(sourceCode(error) == "connection", "\(String(describing: error))")
            #expect(server.connections == 1)
        }
        // An unreadable trust-root file is a typed error at creation.
        var configuration = KeyFetchConfiguration()
        configuration.trustRoots = .pemFile("/nonexistent/ca.pem")
        #expect(throws: KeySourceError.self) { _ = try HTTPKeyFetcher(configuration: configuration) }
        configuration.trustRoots = .pem("not a certificate")
        #expect(throws: KeySourceError.self) { _ = try HTTPKeyFetcher(configuration: configuration) }
    }

    /// Timeouts and a body cap a fetcher cannot use are a typed error at creation, which names
    /// the setting: a timeout too long for nanoseconds in an Int64 trapped before, on the overflow.
    @Test func unusableSettingsAreRefusedAtCreation() async throws {
        let bad: [(String, (inout KeyFetchConfiguration) -> Void)] = [
            ("totalTimeout", { $0.totalTimeout = .seconds(Int64.max) }),
            ("totalTimeout", { $0.totalTimeout = .zero }),
            ("connectTimeout", { $0.connectTimeout = .seconds(-1) }),
            ("connectTimeout", { $0.connectTimeout = .seconds(86_401) }),
            ("maxBodyBytes", { $0.maxBodyBytes = 0 }),
        ]
        for (name, change) in bad {
            var configuration = KeyFetchConfiguration()
            change(&configuration)
            let error = #expect(throws: KeySourceError.self) { _ = try HTTPKeyFetcher(configuration: configuration) }
            #expect(error?.code == .invalidConfiguration)
            #expect(error?.message.hasPrefix(name) == true, "\(String(describing: error))")
        }
        var longest = KeyFetchConfiguration()
        longest.totalTimeout = KeyFetchConfiguration.longestTimeout
        longest.connectTimeout = .milliseconds(1)
        await (try HTTPKeyFetcher(configuration: longest)).shutdown()
    }

    @Test func allowListsAreValidated() throws {
        #expect(throws: KeySourceError.self) { _ = try IssuerAllowList(suffixes: []) }
        #expect(throws: KeySourceError.self) { _ = try IssuerAllowList(suffixes: ["net"]) }
        #expect(throws: KeySourceError.self) { _ = try IssuerAllowList(suffixes: ["*.example.com"]) }
        let list = try IssuerAllowList(suffixes: ["pda.example.org", ".Example.NET"])
        #expect(try list.host(forIssuer: "pda.example.org") == "pda.example.org")
        #expect(try list.host(forIssuer: "x.pda.example.org") == "x.pda.example.org")
        #expect(try list.host(forIssuer: "A.example.net") == "a.example.net")
        #expect(list.checkedCode("example.net") == "issuer_not_allowed")
        #expect(list.checkedCode("xpda.example.org") == "issuer_not_allowed")
    }
}
