import Foundation
import TestSupport
import Testing
@testable import PDAKeys
import TokenKit

/// The remote verifiers throw one typed error, so a caller reads `error.code` and tells an invalid
/// token from keys that cannot be had without casting.
@Suite("RemoteVerificationError: typed throws from the remote verifiers")
struct RemoteVerificationErrorTests {
    /// What a caller does with the error: no `as?`, no `any Error`.
    static func outcome<T>(_ verify: (String) async throws(RemoteVerificationError) -> T, _ token: String) async -> String {
        do throws(RemoteVerificationError) {
            _ = try await verify(token)
            return "valid"
        } catch {
            switch error {
            case .token(let refused): return "token \(refused.code.rawValue) \(error.code)"
            case .keys(let unavailable): return "keys \(unavailable.code.rawValue) \(error.code)"
            }
        }
    }

    @Test func hatTokensTellAnInvalidTokenFromAnUnreachablePDA() async throws {
        let clock = ManualClock()
        let routes = ["alice.hubat.net/publickey": Route(body: TestKeys.publicPEM(TestKeys.rsa))]
        try await withServer(routes: routes, clock: clock) { server, store in
            let hat = HATTokenVerifier(store: store)
            let genuine = try sign(hatClaims(iss: "alice.hubat.net", now: clock.now), with: TestKeys.rsa)
            let forged = try sign(hatClaims(iss: "alice.hubat.net", now: clock.now), with: TestKeys.rsa2)
            #expect(await Self.outcome(hat.verify, genuine) == "valid")
            #expect(await Self.outcome(hat.verifyWithToken, forged) == "token bad_signature bad_signature")
            #expect(await Self.outcome(hat.verify, "not.a.token").hasPrefix("token "))
            let outside = try sign(hatClaims(iss: "alice.evil.com", now: clock.now), with: TestKeys.rsa)
            #expect(await Self.outcome(hat.verify, outside) == "token issuer_mismatch issuer_mismatch")
            // The PDA stops serving its key: not the token's fault.
            let down = try sign(hatClaims(iss: "bob.hubofallthings.net", now: clock.now), with: TestKeys.rsa)
            #expect(await Self.outcome(hat.verify, down) == "keys http_status http_status")
        }
    }

    @Test func jwksAndDescribedVerifiersThrowTheSameType() async throws {
        let clock = ManualClock()
        try await withServer(routes: ["idp.test/jwks.json": Route(body: try TestKeys.jwks([(TestKeys.ec, "k1")]))], clock: clock) { server, store in
            let url = "https://idp.test:\(server.port)/jwks.json"
            let remote = RemoteJWTVerifier(source: .jwks(url: url), store: store)
            let good = try sign(["sub": .string("u1"), "exp": .integer(Int(clock.now) + 600)], with: TestKeys.ec, kid: "k1")
            let expired = try sign(["sub": .string("u1"), "exp": .integer(Int(clock.now) - 600)], with: TestKeys.ec, kid: "k1")
            #expect(await Self.outcome(remote.verify, good) == "valid")
            #expect(await Self.outcome(remote.verify, expired) == "token expired expired")
            let missing = RemoteJWTVerifier(source: .jwks(url: "https://idp.test:\(server.port)/gone.json"), store: store)
            #expect(await Self.outcome(missing.verify, good) == "keys http_status http_status")
            // Keys in hand throw it too: one catch for every source.
            let local = try TokenVerifierDescription(keys: .local([TestKeys.ec.publicKey.with(kid: "k1")]), clock: clock.verificationClock).makeVerifier()
            #expect(await Self.outcome(local.verify, good) == "valid")
            #expect(await Self.outcome(local.verify, expired) == "token expired expired")
            let described = try TokenVerifierDescription(keys: .jwks(url: url)).makeVerifier(store: store)
            #expect(await Self.outcome(described.verify, expired) == "token expired expired")
        }
    }

    @Test func theWrappedErrorIsAtHand() {
        let token = RemoteVerificationError.token(TokenError(.expired, "exp is in the past"))
        let keys = RemoteVerificationError.keys(KeySourceError(.timeout, "alice.hubat.net took too long"))
        #expect(token.code == "expired" && token.message == "exp is in the past" && token.description == "expired: exp is in the past")
        #expect(token.tokenError?.code == .expired && token.keySourceError == nil)
        #expect(keys.keySourceError?.code == .timeout && keys.tokenError == nil)
        #expect(keys.underlying as? KeySourceError == KeySourceError(.timeout, "alice.hubat.net took too long"))
        #expect(token.underlying as? TokenError == TokenError(.expired, "exp is in the past"))
    }
}
