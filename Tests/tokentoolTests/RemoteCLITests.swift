import Foundation
import TestSupport
import Testing
@testable import PDAKeys
import TokenKit

/// `tokentool fetch-key` and `tokentool verify --pda/--jwks/--oidc` as a user runs them, against
/// the real HTTPS key server on loopback with a private CA (`--ca-file`).
@Suite("tokentool remote keys", .serialized)
struct RemoteCLITests {
    func tokentool(_ args: [String], stdin: Data? = nil) throws -> (status: Int32, out: String, err: String) {
        try run(tokentoolExecutable, args, stdin: stdin)
    }

    func common(_ server: KeyServer) throws -> [String] {
        ["--ca-file", try TestPKI.shared.get().caFile, "--pda-port", "\(server.port)", "--resolve", "alice.hubat.net=127.0.0.1", "--resolve", "idp.test=127.0.0.1"]
    }

    @Test func fetchKeyFromAPDAAndAJWKS() throws {
        let server = try KeyServer(routes: [
            "alice.hubat.net/publickey": Route(body: TestKeys.publicPEM(TestKeys.rsa)),
            "idp.test/jwks.json": Route(body: try TestKeys.jwks([(TestKeys.ec, "k1"), (TestKeys.rsa2, "k2")])),
        ])
        defer { server.stop() }
        let pda = try tokentool(["fetch-key"] + common(server) + ["alice.hubat.net"])
        #expect(pda.status == 0, "\(pda.err)")
        #expect(pda.out == TestKeys.publicPEM(TestKeys.rsa))
        #expect(pda.err.contains("thumbprint=\(try TestKeys.rsa.thumbprint())"))
        #expect(pda.err.contains("RS256"))
        let jwks = try tokentool(["fetch-key", "--format", "jwks"] + common(server) + ["https://idp.test:\(server.port)/jwks.json"])
        #expect(jwks.status == 0, "\(jwks.err)")
        let set = try JWKSet(json: jwks.out)
        #expect(set.keys.compactMap(\.kid) == ["k1", "k2"])
        #expect(try set.keys.map { try $0.thumbprint() } == [try TestKeys.ec.thumbprint(), try TestKeys.rsa2.thumbprint()])
        // Refused before any request: a host outside the allow-list, a plain-HTTP URL.
        let outside = try tokentool(["fetch-key"] + common(server) + ["alice.evil.com"])
        #expect(outside.status == 2)
        #expect(outside.err.contains("issuer_not_allowed"))
        let plain = try tokentool(["fetch-key"] + common(server) + ["http://idp.test:\(server.port)/jwks.json"])
        #expect(plain.status == 2)
        #expect(plain.err.contains("insecure_url"))
        // Without the private CA the server is not trusted.
        let untrusted = try tokentool(["fetch-key", "--pda-port", "\(server.port)", "--resolve", "alice.hubat.net=127.0.0.1", "alice.hubat.net"])
        #expect(untrusted.status == 2)
        #expect(untrusted.err.contains("connection"))
        #expect(server.requests.count == 2)
    }

    @Test func verifyAHATTokenWithTheKeyOfItsPDA() throws {
        let server = try KeyServer(routes: ["alice.hubat.net/publickey": Route(body: TestKeys.publicPEM(TestKeys.rsa))])
        defer { server.stop() }
        let now = Date().timeIntervalSince1970
        let token = try sign(hatClaims(iss: "alice.hubat.net", now: now), with: TestKeys.rsa)
        let ok = try tokentool(["verify", "--pda", "--application", "my-app"] + common(server) + [token])
        #expect(ok.status == 0, "\(ok.err)")
        #expect(ok.out.contains("VALID RS256"))
        #expect(ok.out.contains("HAT PDA: alice.hubat.net"))
        let wrongApp = try tokentool(["verify", "--pda", "--application", "other"] + common(server) + [token])
        #expect(wrongApp.status == 1)
        #expect(wrongApp.err.contains("application_not_allowed"))
        let forged = try sign(hatClaims(iss: "alice.hubat.net", now: now), with: TestKeys.rsa2)
        let bad = try tokentool(["verify", "--pda", "--json"] + common(server) + [forged])
        #expect(bad.status == 1)
        #expect(bad.out.contains("\"bad_signature\""))
        let old = try sign(hatClaims(iss: "alice.hubat.net", now: now, age: 31 * 86_400, lifetime: 40 * 86_400), with: TestKeys.rsa)
        let tooOld = try tokentool(["verify", "--pda"] + common(server) + [old])
        #expect(tooOld.status == 1)
        #expect(tooOld.err.contains("too_old"))
        // The PDA is down: the keys cannot be had, which is not the token's fault (exit 2).
        try server.setRoutes([:])
        let down = try tokentool(["verify", "--pda"] + common(server) + [token])
        #expect(down.status == 2)
        #expect(down.err.contains("http_status"))
    }

    /// An unreachable PDA is reported once: the message, not also a log line from the key store.
    @Test func anUnreachablePDAIsReportedOnce() throws {
        let server = try KeyServer(routes: [:])
        defer { server.stop() }
        let token = try sign(hatClaims(iss: "alice.hubat.net", now: Date().timeIntervalSince1970), with: TestKeys.rsa)
        let down = try tokentool(["verify", "--pda"] + common(server) + [token])
        #expect(down.status == 2)
        #expect(down.err.components(separatedBy: "http_status").count == 2, "\(down.err)")
        #expect(down.err.split(separator: "\n").count == 1, "\(down.err)")
        #expect(down.err.hasPrefix("tokentool: cannot get the issuer's keys: http_status"), "\(down.err)")
        let json = try tokentool(["verify", "--pda", "--json"] + common(server) + [token])
        #expect(json.status == 2)
        #expect(json.out.contains("\"http_status\""), "\(json.out)")
        #expect(json.err.components(separatedBy: "http_status").count == 2, "\(json.err)")
        // fetch-key likewise.
        let fetch = try tokentool(["fetch-key"] + common(server) + ["alice.hubat.net"])
        #expect(fetch.status == 2)
        #expect(fetch.err.components(separatedBy: "http_status").count == 2, "\(fetch.err)")
    }

    @Test func verifyWithJWKSAndOIDC() throws {
        let server = try KeyServer(routes: [:])
        defer { server.stop() }
        let issuer = "https://idp.test:\(server.port)/"
        try server.setRoutes([
            "idp.test/.well-known/openid-configuration": Route(body: #"{"issuer":"\#(issuer)","jwks_uri":"https://idp.test:\#(server.port)/jwks.json"}"#),
            "idp.test/jwks.json": Route(body: try TestKeys.jwks([(TestKeys.ec, "k1")])),
        ])
        let now = Int(Date().timeIntervalSince1970)
        let token = try sign(["iss": .string(issuer), "sub": .string("u1"), "aud": .string("api"), "exp": .integer(now + 300)], with: TestKeys.ec, kid: "k1")
        let viaOIDC = try tokentool(["verify", "--oidc", issuer, "--aud", "api"] + common(server) + [token])
        #expect(viaOIDC.status == 0, "\(viaOIDC.err)")
        #expect(viaOIDC.out.contains("kid=k1"))
        let viaJWKS = try tokentool(["verify", "--jwks", "https://idp.test:\(server.port)/jwks.json", "--aud", "api", "--json"] + common(server) + [token])
        #expect(viaJWKS.status == 0, "\(viaJWKS.err)")
        #expect(viaJWKS.out.contains("\"valid\" : true") || viaJWKS.out.contains("\"valid\": true"))
        let otherIssuer = try tokentool(["verify", "--oidc", "https://idp.test:\(server.port)/x/", "--aud", "api"] + common(server) + [token])
        #expect(otherIssuer.status == 2)
        let twoSources = try tokentool(["verify", "--pda", "--jwks", "https://idp.test/jwks.json", token])
        #expect(twoSources.status == 2)
    }
}
