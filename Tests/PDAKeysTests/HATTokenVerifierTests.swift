import Foundation
import TestSupport
import Testing
@testable import PDAKeys
import TokenKit

@Suite("HAT PDA tokens against a real HTTPS PDA on loopback")
struct HATTokenVerifierTests {
    let pda = ["alice.hubat.net/publickey": Route(headers: ["Content-Type": "text/plain"], body: TestKeys.publicPEM(TestKeys.rsa))]

    @Test func verifiesATokenEndToEnd() async throws {
        let clock = ManualClock()
        try await withServer(routes: pda, clock: clock) { server, store in
            let hat = HATTokenVerifier(store: store, applications: ["my-app"])
            let claims = hatClaims(iss: "alice.hubat.net", now: clock.now)
            let identity = try await hat.verify(try sign(claims, with: TestKeys.rsa))
            #expect(identity.pdaHost == "alice.hubat.net")
            #expect(identity.subject == claims["sub"]?.stringValue)
            #expect(identity.application == "my-app")
            #expect(identity.applicationVersion == "1.2.3")
            #expect(identity.tokenID == claims["jti"]?.stringValue)
            #expect(identity.issuedAt.timeIntervalSince1970 == clock.now - 60)
            #expect(identity.expiresAt.timeIntervalSince1970 == clock.now - 60 + 3600)
            // Exactly one request, to that PDA's /publickey, asking for text/plain.
            #expect(server.requests == ["GET alice.hubat.net/publickey accept=text/plain"])
            // A second token from the same PDA is served from the store.
            _ = try await hat.verify(try sign(hatClaims(iss: "alice.hubat.net", now: clock.now), with: TestKeys.rsa))
            #expect(server.requests.count == 1)
        }
    }

    @Test func keyMustComeFromTheIssuingPDA() async throws {
        // bob's PDA publishes a different key: alice's key cannot sign for bob.
        var routes = pda
        routes["bob.hubofallthings.net/publickey"] = Route(body: TestKeys.publicPEM(TestKeys.rsa2))
        let clock = ManualClock()
        try await withServer(routes: routes, clock: clock) { server, store in
            let hat = HATTokenVerifier(store: store)
            let forged = try sign(hatClaims(iss: "bob.hubofallthings.net", now: clock.now), with: TestKeys.rsa)
            let error = await thrown { _ = try await hat.verify(forged) }
            #expect(sourceCode(error) == "bad_signature")
            #expect(server.count("bob.hubofallthings.net/publickey") == 1)
            #expect(server.count("alice.hubat.net") == 0)
            let genuine = try sign(hatClaims(iss: "bob.hubofallthings.net", now: clock.now), with: TestKeys.rsa2)
            #expect(try await hat.verify(genuine).pdaHost == "bob.hubofallthings.net")
        }
    }

    @Test(arguments: [
        ("https://alice.hubat.net", "invalid_issuer"), ("alice.hubat.net:8443", "invalid_issuer"), ("alice.hubat.net/x", "invalid_issuer"),
        ("user@alice.hubat.net", "invalid_issuer"), ("127.0.0.1", "invalid_issuer"), ("[::1]", "invalid_issuer"),
        ("alice_x.hubat.net", "invalid_issuer"), ("alice.hubat.net.", "invalid_issuer"), ("évil.hubat.net", "invalid_issuer"),
        ("alice.hubat.net.evil.com", "issuer_not_allowed"), ("hubat.net", "issuer_not_allowed"), ("evilhubat.net", "issuer_not_allowed"),
        ("", "invalid_issuer"),
    ])
    func refusedIssuersCauseNoRequest(iss: String, reason: String) async throws {
        let clock = ManualClock()
        try await withServer(routes: pda, clock: clock) { server, store in
            let hat = HATTokenVerifier(store: store)
            let error = await thrown { _ = try await hat.verify(try sign(hatClaims(iss: iss, now: clock.now), with: TestKeys.rsa)) }
            #expect(sourceCode(error) == "issuer_mismatch", "\(iss): \(String(describing: error))")
            #expect(IssuerAllowList.hat.checkedCode(iss) == reason)
            #expect(server.requests.isEmpty)
        }
    }

    @Test func claimsRules() async throws {
        let clock = ManualClock()
        try await withServer(routes: pda, clock: clock) { server, store in
            let hat = HATTokenVerifier(store: store, applications: ["my-app"])
            func check(_ claims: [String: JSONValue], header: [String: JSONValue] = [:], _ expected: String) async throws {
                let token = try sign(claims, with: TestKeys.rsa, header: header)
                let code = sourceCode(await thrown { _ = try await hat.verify(token) })
                #expect(code == expected)
            }
            let now = clock.now
            // 31 days old, though exp is still in the future: HAT tokens live at most 30 days.
            try await check(hatClaims(iss: "alice.hubat.net", now: now, age: 31 * 86_400, lifetime: 40 * 86_400), "too_old")
            var noIat = hatClaims(iss: "alice.hubat.net", now: now)
            noIat["iat"] = nil
            try await check(noIat, "missing_claim")
            var noExp = hatClaims(iss: "alice.hubat.net", now: now)
            noExp["exp"] = nil
            try await check(noExp, "missing_claim")
            var noSub = hatClaims(iss: "alice.hubat.net", now: now)
            noSub["sub"] = nil
            try await check(noSub, "missing_claim")
            try await check(hatClaims(iss: "alice.hubat.net", now: now, age: 7200), "expired")
            try await check(hatClaims(iss: "alice.hubat.net", now: now, application: "other-app"), "application_not_allowed")
            try await check(hatClaims(iss: "alice.hubat.net", now: now, application: nil), "application_not_allowed")
            try await check(hatClaims(iss: "alice.hubat.net", now: now), header: ["typ": .string("at+jwt")], "type_mismatch")
            // Still only the one key fetch for all of these.
            #expect(server.requests.count == 1)
        }
    }

    @Test func onlyRS256CausesARequest() async throws {
        let clock = ManualClock()
        try await withServer(routes: pda, clock: clock) { server, store in
            let hat = HATTokenVerifier(store: store)
            let claims = hatClaims(iss: "alice.hubat.net", now: clock.now)
            let es256 = try JWTSigner(key: TestKeys.ec).sign(claims: claims)
            #expect(sourceCode(await thrown { _ = try await hat.verify(es256) }) == "algorithm_not_allowed")
            let hs256 = try JWTSigner(key: JWTKey.hmac(secret: Array(TestKeys.publicPEM(TestKeys.rsa).utf8))).sign(claims: claims)
            #expect(sourceCode(await thrown { _ = try await hat.verify(hs256) }) == "algorithm_not_allowed")
            #expect(sourceCode(await thrown { _ = try await hat.verify("not.a.token") }) != nil)
            #expect(server.requests.isEmpty)
        }
    }

    @Test func unusablePDAKeysAreRefused() async throws {
        let pki = try TestPKI.shared.get()
        let weakPath = pki.dir.appendingPathComponent("rsa1024.pem").path
        try TestPKI.openssl(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024", "-out", weakPath + ".key"])
        try TestPKI.openssl(["pkey", "-in", weakPath + ".key", "-pubout", "-out", weakPath])
        let weakPEM = try String(contentsOfFile: weakPath, encoding: .utf8)
        let cases: [(Route, String)] = [
            (Route(body: weakPEM), "unusable_key"),
            (Route(body: TestKeys.publicPEM(TestKeys.ec)), "unusable_key"),
            (Route(body: "<html>hello</html>"), "invalid_document"),
            (Route(body: TestKeys.publicPEM(TestKeys.rsa) + TestKeys.publicPEM(TestKeys.rsa2)), "invalid_document"),
            (Route(body: (try? TestKeys.rsa.privatePEM()) ?? ""), "invalid_document"),
        ]
        for (route, expected) in cases {
            let clock = ManualClock()
            try await withServer(routes: ["alice.hubat.net/publickey": route], clock: clock) { server, store in
                let hat = HATTokenVerifier(store: store)
                let error = await thrown { _ = try await hat.verify(try sign(hatClaims(iss: "alice.hubat.net", now: clock.now), with: TestKeys.rsa)) }
                #expect(sourceCode(error) == expected, "\(String(describing: error))")
                #expect(server.requests.count == 1)
            }
        }
    }

    @Test func tenThousandConcurrentVerificationsMakeOneRequest() async throws {
        var routes = pda
        routes["alice.hubat.net/publickey"]?.delay = 0.3
        let clock = ManualClock()
        try await withServer(routes: routes, clock: clock) { server, store in
            let hat = HATTokenVerifier(store: store)
            let token = try sign(hatClaims(iss: "alice.hubat.net", now: clock.now), with: TestKeys.rsa)
            let verified = try await withThrowingTaskGroup(of: Bool.self) { group in
                for _ in 0..<10_000 { group.addTask { try await hat.verify(token).pdaHost == "alice.hubat.net" } }
                var count = 0
                for try await ok in group where ok { count += 1 }
                return count
            }
            #expect(verified == 10_000)
            #expect(server.count("/publickey") == 1)
        }
    }
}

extension IssuerAllowList {
    func checkedCode(_ issuer: String) -> String? {
        do { _ = try host(forIssuer: issuer); return nil } catch { return error.code.rawValue }
    }
}
