import Foundation
import Synchronization
import Testing
@testable import TokenKit

@Suite("Verified-token cache")
struct CacheTests {
    final class MovableClock: Sendable {
        let time = Mutex<Double>(referenceTime)
        var clock: VerificationClock { VerificationClock { [self] in time.withLock { $0 } } }
        func advance(_ seconds: Double) { time.withLock { $0 += seconds } }
    }

    func token(_ claims: [String: JSONValue], key: JWTKey = hs256Key) throws -> String {
        try JWTSigner(key: key).sign(claims: claims)
    }

    @Test func hitsStillCheckTimeClaims() throws {
        let clock = MovableClock()
        let verifier = try JWTVerifier(
            key: hs256Key, policy: ClaimsPolicy(leeway: 0, maxAge: 600), clock: clock.clock, cache: VerifiedTokenCache())
        let jwt = try token(["exp": .integer(Int(referenceTime) + 300), "iat": .integer(Int(referenceTime)), "sub": .string("s")])
        #expect(try verifier.verify(jwt).claims.subject == "s")
        #expect(verifier.cachedTokenCount == 1)
        #expect(try verifier.verify(jwt).claims.subject == "s")  // a hit
        clock.advance(301)
        #expect(code { _ = try verifier.verify(jwt) } == .expired)
        #expect(verifier.cachedTokenCount == 0)  // the expired entry is gone

        let old = try token(["exp": .integer(Int(referenceTime) + 100_000), "iat": .integer(Int(referenceTime) + 301)])
        #expect(code { _ = try verifier.verify(old) } == nil)
        clock.advance(601)
        #expect(code { _ = try verifier.verify(old) } == .tooOld)  // max age re-checked on a hit
    }

    @Test func keyIsTheExactTokenBytes() throws {
        let verifier = try JWTVerifier(key: hs256Key, clock: .fixed(referenceTime), cache: VerifiedTokenCache())
        let jwt = try token(["exp": .integer(Int(referenceTime) + 300)])
        _ = try verifier.verify(jwt)
        var parts = jwt.split(separator: ".").map(String.init)
        var sig = try #require(Base64URL.decode(parts[2]))
        sig[0] ^= 1
        parts[2] = Base64URL.encode(sig)
        #expect(code { _ = try verifier.verify(parts.joined(separator: ".")) } == .badSignature)
        // Failures are never cached.
        #expect(verifier.cachedTokenCount == 1)
        // Another verifier (other keys) does not share the cache.
        let other = try JWTVerifier(key: JWTKey.hmac(secret: Array(repeating: 5, count: 32)), clock: .fixed(referenceTime), cache: VerifiedTokenCache())
        #expect(code { _ = try other.verify(jwt) } == .badSignature)
    }

    @Test func boundedInEntries() throws {
        let verifier = try JWTVerifier(key: hs256Key, clock: .fixed(referenceTime), cache: VerifiedTokenCache(capacity: 64))
        for i in 0..<2000 {
            _ = try verifier.verify(try token(["exp": .integer(Int(referenceTime) + 300), "n": .integer(i)]))
        }
        #expect(verifier.cachedTokenCount <= 64)
        #expect(verifier.cachedTokenCount > 0)
    }
}
