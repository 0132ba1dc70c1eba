import Foundation
import Synchronization
import Testing
@testable import TokenKit

@Suite("Claims policy and key selection")
struct ClaimsTests {
    let signer: JWTSigner
    init() throws { signer = try JWTSigner(key: hs256Key) }

    func token(_ claims: [String: JSONValue], header: [String: JSONValue] = [:]) throws -> String {
        try signer.sign(claims: claims, header: header)
    }

    func verdict(_ token: String, _ policy: ClaimsPolicy = ClaimsPolicy(), at now: NumericDate = referenceTime) -> TokenError.Code? {
        code { _ = try JWTVerifier(key: hs256Key, policy: policy, clock: .fixed(now)).verify(token) }
    }

    let t = referenceTime

    @Test func expirationWithLeeway() throws {
        let exp = try token(["exp": .number(String(Int(t)))])
        #expect(verdict(exp, at: t - 1) == nil)
        #expect(verdict(exp, at: t + 59) == nil)  // inside the 60 s leeway
        #expect(verdict(exp, at: t + 60) == .expired)
        #expect(verdict(exp, ClaimsPolicy(leeway: 0), at: t) == .expired)
        #expect(verdict(exp, ClaimsPolicy(leeway: 0), at: t - 0.5) == nil)
        let fractional = try token(["exp": .number("\(Int(t)).25")])
        #expect(verdict(fractional, ClaimsPolicy(leeway: 0), at: t + 0.2) == nil)
        #expect(verdict(fractional, ClaimsPolicy(leeway: 0), at: t + 0.3) == .expired)
    }

    /// The refusals name their times as ISO 8601 text in UTC, whole seconds, a fraction dropped
    /// (ISO8601Text: `ISO8601DateFormatter`'s text, without building one per refusal).
    @Test func refusalsNameTheirTimes() throws {
        func message(_ claims: [String: JSONValue], at now: NumericDate) throws -> String? {
            let jwt = try token(claims)
            do {
                _ = try JWTVerifier(key: hs256Key, policy: ClaimsPolicy(leeway: 0), clock: .fixed(now)).verify(jwt)
                return nil
            } catch { return error.message }
        }
        let expired = try #require(try message(["exp": .integer(1_700_000_000)], at: 1_700_000_090))
        #expect(expired.contains("the token expired at 2023-11-14T22:13:20Z (90 s ago"), "\(expired)")
        let early = try #require(try message(["exp": .integer(4_102_444_800), "nbf": .number("951782400.75")], at: 951_782_000))
        #expect(early.contains("not valid before 2000-02-29T00:00:00Z"), "\(early)")  // a leap day; the fraction dropped
        let future = try #require(try message(["exp": .integer(4_102_444_800), "iat": .integer(4_102_444_799)], at: 1_700_000_000))
        #expect(future.contains("issued at 2099-12-31T23:59:59Z"), "\(future)")
    }

    /// A refusal's seconds read as `String(format: "%.3f")` wrote them, without calling it on the
    /// usual values: fractions of every size, halves of a millisecond, values whose product by 1000
    /// lies near a half, negatives, the limits of the fast path.
    @Test func refusalSecondsMatchThePrintfText() {
        var values: [Double] = [0.0004, -0.0004, 0.0005, 0.0015, 0.1, 0.25, 0.9995, 1.0005, 59.9999, 60.5, 95_744_549.607,
                                1_700_000_000.0625, 999_999_999_999.9, 1_000_000_000_000.5, -3.14159, 1e-9, .nan, .infinity]
        var random = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let magnitude = [1.0, 100, 1e5, 1e9, 1e11][Int.random(in: 0..<5, using: &random)]
            values.append(Double.random(in: -magnitude...magnitude, using: &random))
            // Near a half-millisecond: the cases the product's own rounding could tip.
            values.append((Double(Int.random(in: 0..<10_000_000, using: &random)) + 0.5) / 1000)
        }
        for value in values where value != value.rounded() || !value.isFinite {
            #expect(ClaimsPolicy.seconds(value) == String(format: "%.3f", value), "\(value)")
        }
        #expect(ClaimsPolicy.seconds(90) == "90")
    }

    @Test func expirationRequiredByDefault() throws {
        let noExp = try token(["sub": .string("a")])
        #expect(verdict(noExp) == .missingClaim)
        #expect(verdict(noExp, ClaimsPolicy(requireExpiration: false)) == nil)
    }

    @Test func notBeforeAndIssuedAt() throws {
        let exp: JSONValue = .integer(Int(t) + 3600)
        #expect(verdict(try token(["exp": exp, "nbf": .integer(Int(t) + 120)])) == .notYetValid)
        #expect(verdict(try token(["exp": exp, "nbf": .integer(Int(t) + 30)])) == nil)
        #expect(verdict(try token(["exp": exp, "iat": .integer(Int(t) + 120)])) == .issuedInFuture)
        #expect(verdict(try token(["exp": exp, "iat": .integer(Int(t) - 10)])) == nil)
    }

    @Test func maxAgeFromIssuedAt() throws {
        let exp: JSONValue = .integer(Int(t) + 3600)
        let policy = ClaimsPolicy(leeway: 0, maxAge: 30 * 86400)
        #expect(verdict(try token(["exp": exp, "iat": .integer(Int(t) - 30 * 86400)]), policy) == nil)
        #expect(verdict(try token(["exp": exp, "iat": .integer(Int(t) - 30 * 86400 - 1)]), policy) == .tooOld)
        #expect(verdict(try token(["exp": exp]), policy) == .missingClaim)
    }

    /// A NaN leeway, maximum age or clock refuses: every comparison with NaN is false, and the
    /// checks were written so that false passed (an expired token was valid with a leeway of NaN).
    @Test func aNaNInThePolicyOrTheClockRefuses() throws {
        let exp: JSONValue = .integer(Int(t) - 3600)
        let expired = try token(["exp": exp])
        #expect(verdict(expired, ClaimsPolicy(leeway: .nan)) == .expired)
        #expect(verdict(expired, at: .nan) == .expired)
        let fresh: JSONValue = .integer(Int(t) + 3600)
        #expect(verdict(try token(["exp": fresh, "nbf": .integer(Int(t) + 120)]), ClaimsPolicy(requireExpiration: false, leeway: .nan)) == .expired)
        #expect(verdict(try token(["nbf": .integer(Int(t) + 120)]), ClaimsPolicy(requireExpiration: false, leeway: .nan)) == .notYetValid)
        #expect(verdict(try token(["iat": .integer(Int(t) + 120)]), ClaimsPolicy(requireExpiration: false, leeway: .nan)) == .issuedInFuture)
        #expect(verdict(try token(["exp": fresh, "iat": .integer(Int(t) - 10)]), ClaimsPolicy(maxAge: .nan)) == .tooOld)
        #expect(verdict(try token(["exp": fresh, "iat": .integer(Int(t) - 10)]), ClaimsPolicy(maxAge: 60)) == nil)
    }

    @Test func issuer() throws {
        let exp: JSONValue = .integer(Int(t) + 3600)
        let policy = ClaimsPolicy(issuers: ["a.hubat.net", "b.hubat.net"])
        #expect(verdict(try token(["exp": exp, "iss": .string("b.hubat.net")]), policy) == nil)
        #expect(verdict(try token(["exp": exp, "iss": .string("evil.example")]), policy) == .issuerMismatch)
        #expect(verdict(try token(["exp": exp, "iss": .string("A.HUBAT.NET")]), policy) == .issuerMismatch)
        #expect(verdict(try token(["exp": exp]), policy) == .missingClaim)
    }

    @Test func audience() throws {
        let exp: JSONValue = .integer(Int(t) + 3600)
        let policy = ClaimsPolicy(audiences: ["api"])
        #expect(verdict(try token(["exp": exp, "aud": .string("api")]), policy) == nil)
        #expect(verdict(try token(["exp": exp, "aud": .array([.string("other"), .string("api")])]), policy) == nil)
        #expect(verdict(try token(["exp": exp, "aud": .array([.string("other")])]), policy) == .audienceMismatch)
        #expect(verdict(try token(["exp": exp, "aud": .array([])]), policy) == .audienceMismatch)
        #expect(verdict(try token(["exp": exp]), policy) == .missingClaim)
        // A token meant for someone must not be accepted by a verifier that names no audience.
        let withAud = try token(["exp": exp, "aud": .string("someone-else")])
        #expect(verdict(withAud) == .audienceMismatch)
        #expect(verdict(withAud, ClaimsPolicy(ignoresAudience: true)) == nil)
    }

    @Test func requiredClaimsAndType() throws {
        let exp: JSONValue = .integer(Int(t) + 3600)
        let jwt = try token(["exp": exp, "sub": .string("s")])
        #expect(verdict(jwt, ClaimsPolicy(requiredClaims: ["sub"])) == nil)
        #expect(verdict(jwt, ClaimsPolicy(requiredClaims: ["sub", "jti"])) == .missingClaim)
        #expect(verdict(jwt, ClaimsPolicy(expectedType: "JWT")) == nil)
        #expect(verdict(jwt, ClaimsPolicy(expectedType: "application/jwt")) == nil)
        #expect(verdict(jwt, ClaimsPolicy(expectedType: "at+jwt")) == .typeMismatch)
        let untyped = try token(["exp": exp], header: ["typ": .string("at+JWT")])
        #expect(verdict(untyped, ClaimsPolicy(expectedType: "at+jwt")) == nil)
    }

    @Test func keySelection() throws {
        let a = try JWTKey.hmac(secret: Array(repeating: 1, count: 32), kid: "a")
        let b = try JWTKey.hmac(secret: Array(repeating: 2, count: 32), kid: "b")
        let exp: JSONValue = .integer(Int(t) + 3600)
        let verifier = try JWTVerifier(keys: [a, b], clock: .fixed(t))
        let signedByB = try JWTSigner(key: b).sign(claims: ["exp": exp])
        #expect(try verifier.verify(signedByB).key.kid == "b")
        // Unknown kid: an error, never a fallback to another key.
        let unknown = try JWTSigner(key: a.with(kid: "c")).sign(claims: ["exp": exp])
        #expect(code { _ = try verifier.verify(unknown) } == .unknownKey)
        // kid "b" but MACed with a's secret.
        let lying = try JWTSigner(key: a.with(kid: "b")).sign(claims: ["exp": exp])
        #expect(code { _ = try verifier.verify(lying) } == .badSignature)
        // No kid and two keys accept HS256: ambiguous.
        let noKid = try JWTSigner(key: a.with(kid: nil)).sign(claims: ["exp": exp])
        #expect(code { _ = try verifier.verify(noKid) } == .unknownKey)
        // Duplicate kids are refused when building the verifier.
        #expect(code { _ = try JWTVerifier(keys: [a, a]) } == .invalidKeySet)
        #expect(code { _ = try JWTVerifier(keys: []) } == .invalidKeySet)
    }

    @Test func algorithmBelongsToTheKey() throws {
        let exp: JSONValue = .integer(Int(t) + 3600)
        let key = try JWTKey.hmac(secret: Array(repeating: 7, count: 64), algorithms: [.hs256], kid: "k")
        let hs512 = try JWTSigner(key: key.with(algorithms: [.hs512])).sign(claims: ["exp": exp])
        #expect(code { _ = try JWTVerifier(key: key, clock: .fixed(t)).verify(hs512) } == .algorithmNotAllowed)
        let both = try key.with(algorithms: [.hs256, .hs512])
        #expect(code { _ = try JWTVerifier(key: both, clock: .fixed(t)).verify(hs512) } == nil)
    }

    @Test func keyUseAndOperations() throws {
        let exp: JSONValue = .integer(Int(t) + 3600)
        let secret = Base64URL.encode(Array(repeating: UInt8(9), count: 32))
        let encKey = try JWTKey(jwk: #"{"kty":"oct","k":"\#(secret)","kid":"e","use":"enc"}"#)
        let signed = try JWTSigner(key: encKey).sign(claims: ["exp": exp])
        #expect(code { _ = try JWTVerifier(key: encKey, clock: .fixed(t)).verify(signed) } == .keyNotUsable)
        let signOnly = try JWTKey(jwk: #"{"kty":"oct","k":"\#(secret)","kid":"e","key_ops":["sign"]}"#)
        #expect(code { _ = try JWTVerifier(key: signOnly, clock: .fixed(t)).verify(signed) } == .keyNotUsable)
    }

    struct HATClaims: Decodable, Equatable {
        let iss: String
        let sub: String
        let application: String
        let exp: Date
    }

    @Test func decodesIntoCallerType() throws {
        let jwt = try token([
            "iss": .string("x.hubat.net"), "sub": .string("u"), "application": .string("app"), "exp": .integer(Int(t) + 60),
        ])
        let verifier = try JWTVerifier(key: hs256Key, clock: .fixed(t))
        let claims = try verifier.verify(jwt, as: HATClaims.self)
        #expect(claims == HATClaims(iss: "x.hubat.net", sub: "u", application: "app", exp: Date(timeIntervalSince1970: t + 60)))
        struct Needs: Decodable { let missing: String }
        #expect(code { _ = try verifier.verify(jwt, as: Needs.self) } == .payloadDecoding)
    }

    @Test func concurrentVerificationFromManyTasks() async throws {
        let keys = try [JWTKey.generate(.ec(.p256), kid: "e"), JWTKey.generate(.ed25519, kid: "d"), JWTKey.hmac(secret: Array(0..<32), kid: "h")]
        let tokens = try keys.map { try JWTSigner(key: $0).sign(claims: ["exp": .integer(Int(t) + 60), "sub": .string($0.kid ?? "")]) }
        for engine in JWTVerifier.Engine.allCases {
            let verifier = try JWTVerifier(keys: keys.map(\.publicKey), engine: engine, clock: .fixed(t))
            let ok = await withTaskGroup(of: Bool.self) { group in
                for i in 0..<300 {
                    let token = tokens[i % tokens.count]
                    group.addTask { (try? verifier.verify(token)) != nil }
                }
                var all = true
                for await result in group { all = all && result }
                return all
            }
            #expect(ok, "engine \(engine)")
        }
    }

    /// Runs `body` on `count` new threads at once (more threads than a verifier has shards, so
    /// every shard and a shared one are used) and returns each thread's result.
    static func onThreads<R: Sendable>(_ count: Int, _ body: @escaping @Sendable (Int) -> R) -> [R] {
        let results = Mutex<[Int: R]>([:])
        let done = DispatchGroup()
        for index in 0..<count {
            done.enter()
            let thread = Thread {
                let result = body(index)
                results.withLock { $0[index] = result }
                done.leave()
            }
            thread.start()
        }
        done.wait()
        return results.withLock { all in (0..<count).compactMap { all[$0] } }
    }

    /// A verifier keeps a copy of its keys and policy per stripe of threads; every copy must
    /// refuse and accept exactly what the original does.
    @Test func everyShardAppliesTheWholePolicy() throws {
        let policy = ClaimsPolicy(
            issuers: ["issuer.example.hubat.net"], audiences: ["the-service-audience"], requiredClaims: ["sub", "application-name"],
            expectedType: "JWT")
        let base: [String: JSONValue] = [
            "iss": .string("issuer.example.hubat.net"), "aud": .string("the-service-audience"), "sub": .string("u"),
            "application-name": .string("a"), "exp": .integer(Int(t) + 60),
        ]
        func with(_ name: String, _ value: JSONValue?) -> [String: JSONValue] {
            var claims = base
            claims[name] = value
            return claims
        }
        let typ: [String: JSONValue] = ["typ": .string("JWT")]
        let cases: [(String, TokenError.Code?)] = [
            (try token(base, header: typ), nil),
            (try token(with("iss", .string("issuer.example.hubat.nex")), header: typ), .issuerMismatch),
            (try token(with("aud", .string("the-service-audiencE")), header: typ), .audienceMismatch),
            (try token(with("application-name", nil), header: typ), .missingClaim),
            (try token(with("exp", .integer(Int(t) - 120)), header: typ), .expired),
            (try token(base, header: ["typ": .string("at+jwt")]), .typeMismatch),
            (try token(base, header: ["typ": .string("JWT"), "crit": .array([.string("x-unknown")]), "x-unknown": .bool(true)]), .unsupportedCritical),
            (try token(base, header: typ).dropLast(2) + "AA", .badSignature),
        ]
        let verifier = try JWTVerifier(key: hs256Key, policy: policy, clock: .fixed(t))
        let tokens = cases.map(\.0)
        let expected = cases.map(\.1)
        #expect(tokens.map { token in code { _ = try verifier.verify(token) } } == expected)
        let perThread = Self.onThreads(24) { _ in
            // Twice, so the second round goes through each shard's header cache.
            (0..<2).flatMap { _ in tokens.map { token in code { _ = try verifier.verify(token) } } }
        }
        #expect(perThread.count == 24)
        for (index, outcome) in perThread.enumerated() {
            #expect(outcome == expected + expected, "thread \(index)")
        }
        // The verified token carries the key and claims whichever shard verified it.
        let subjects = Self.onThreads(20) { _ in try? verifier.verify(tokens[0]).claims.subject }
        #expect(subjects == Array(repeating: "u", count: 20))
        #expect(verifier.keys.count == 1 && verifier.keys[0].kid == hs256Key.kid)
    }

    @Test func threadsGetDistinctIndexes() {
        let indexes = Self.onThreads(16) { _ in (ThreadIndex.current, ThreadIndex.current) }
        #expect(indexes.allSatisfy { $0.0 == $0.1 }, "a thread's index changed")
        #expect(Set(indexes.map(\.0)).count == 16)
    }
}
