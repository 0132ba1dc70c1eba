import Foundation
import Testing
@testable import TokenKit

/// RFC 7515 appendix A, RFC 7520 §4, RFC 8037 and RFC 7638 examples (copies in
/// TestVectors/jose: latchset/jose, Apache-2.0, COPYING; ietf-jose/cookbook, Unlicense).
@Suite("RFC examples")
struct RFCVectorTests {
    static func latchset(_ name: String) throws -> String {
        var text = try Fixtures.text("jose/latchset/\(name)").trimmingCharacters(in: .whitespacesAndNewlines)
        // A 15-byte .jwk file names another .jwk file.
        if name.hasSuffix(".jwk"), !text.hasPrefix("{") { text = try latchset(text) }
        return text
    }

    @Test(arguments: [
        ("rfc7515_A.1", JWTAlgorithm.hs256), ("rfc7515_A.2", .rs256), ("rfc7515_A.3", .es256), ("rfc7515_A.4", .es512),
        ("rfc7520_4.1", .rs256), ("rfc7520_4.2", .ps384), ("rfc7520_4.3", .es512), ("rfc7520_4.4", .hs256),
    ], JWTVerifier.Engine.allCases)
    func compactExamplesVerify(example: (name: String, algorithm: JWTAlgorithm), engine: JWTVerifier.Engine) throws {
        let (name, algorithm) = example
        let jwk = try Self.latchset("\(name).jwk")
        let token = try Self.latchset("\(name).jwsc")
        var key = try JWTKey(jwk: jwk)
        if key.kid == nil || !key.algorithms.contains(algorithm) { key = try key.with(algorithms: [algorithm]) }
        let verifier = try JWTVerifier(key: key.publicKey, engine: engine)
        let jws = try verifier.verifySignature(token)
        #expect(jws.header.algorithm == algorithm)
        #expect(!jws.payload.isEmpty)

        // Flip one bit of the signature: must fail with bad_signature.
        var parts = token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        var signature = Base64URL.decode(parts[2]) ?? []
        signature[signature.count / 2] ^= 0x01
        parts[2] = Base64URL.encode(signature)
        #expect(throws: TokenError(.badSignature, "the \(algorithm) signature does not verify")) {
            try verifier.verifySignature(parts.joined(separator: "."))
        }
    }

    /// RFC 7515 A.1's payload is a JWT (iss "joe", exp 1300819380): its claims check at its own time.
    @Test func rfc7515A1ClaimsAtItsTime() throws {
        let key = try JWTKey(jwk: Self.latchset("rfc7515_A.1.jwk"))
        let token = try Self.latchset("rfc7515_A.1.jwsc")
        let atTime = try JWTVerifier(key: key, policy: ClaimsPolicy(issuers: ["joe"]), clock: .fixed(1_300_819_000))
        let verified = try atTime.verify(token)
        #expect(verified.claims.issuer == "joe")
        #expect(verified.claims.expiration == 1_300_819_380)
        #expect(verified.payload["http://example.com/is_root"] == .bool(true))
        let now = try JWTVerifier(key: key)
        #expect(throws: TokenError.self) { try now.verify(token) }
        do {
            _ = try now.verify(token)
        } catch {
            #expect(error.code == .expired)
        }
    }

    /// The deterministic algorithms reproduce the RFC signatures byte for byte.
    @Test(arguments: [("rfc7515_A.1", JWTAlgorithm.hs256), ("rfc7515_A.2", .rs256), ("rfc7520_4.1", .rs256), ("rfc7520_4.4", .hs256)])
    func deterministicSignaturesReproduce(name: String, algorithm: JWTAlgorithm) throws {
        let key = try JWTKey(jwk: Self.latchset("\(name).jwk")).with(algorithms: [algorithm])
        let token = try Self.latchset("\(name).jwsc")
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        let signingInput = Array((parts[0] + "." + parts[1]).utf8)
        let signature = try NativeSignatures.sign(algorithm, key: key, message: signingInput)
        #expect(Base64URL.encode(signature) == String(parts[2]))
    }

    @Test func rfc7515A5UnsecuredIsRefused() throws {
        let key = try JWTKey(jwk: Self.latchset("rfc7515_A.1.jwk"))
        let verifier = try JWTVerifier(key: key, clock: .fixed(1_300_819_000))
        #expect(throws: TokenError(.forbiddenAlgorithm, #"alg "none" (unsecured JWS) is never accepted"#)) {
            try verifier.verify(Self.latchset("rfc7515_A.5.jwsc"))
        }
    }

    /// RFC 8037 A.4: Ed25519 signing is deterministic, so our signature must equal the RFC's.
    @Test func rfc8037Ed25519() throws {
        let document = try Fixtures.json("jose/cookbook/curve25519/jws.json")
        let input = try #require(document["input"] as? [String: Any])
        let signing = try #require(document["signing"] as? [String: Any])
        let output = try #require(document["output"] as? [String: Any])
        let key = try JWTKey(jwk: Fixtures.jsonText(try #require(input["key"])))
        #expect(key.type == .ed25519 && key.isPrivate)
        let sigInput = try #require(signing["sig-input"] as? String)
        let signature = try NativeSignatures.sign(.eddsa, key: key, message: Array(sigInput.utf8))
        #expect(Base64URL.encode(signature) == signing["sig"] as? String)
        let compact = try #require(output["compact"] as? String)
        for engine in JWTVerifier.Engine.allCases {
            let jws = try JWTVerifier(key: key.publicKey, engine: engine).verifySignature(compact)
            #expect(String(decoding: jws.payload, as: UTF8.self) == "Example of Ed25519 signing")
        }
    }

    @Test func rfc7638Thumbprint() throws {
        let key = try JWTKey(jwk: Self.latchset("rfc7638_3.1.jwk"))
        let expected = try Self.latchset("rfc7638_3.1.thp")
        #expect(try key.thumbprint() == expected)
    }

    @Test func rfc7517KeySets() throws {
        let publicSet = try JWKSet(json: Self.latchset("rfc7517_A.1.jwkset"))
        // A.1's EC key has "use": "enc": not a signature key, so skipped and reported.
        #expect(publicSet.keys.map(\.type) == [.rsa(bits: 2048)])
        #expect(publicSet.skipped.count == 1 && publicSet.skipped[0].contains("enc"))
        #expect(publicSet.keys.allSatisfy { !$0.isPrivate })
        let privateSet = try JWKSet(json: Self.latchset("rfc7517_A.2.jwkset"))
        #expect(privateSet.keys.allSatisfy { $0.isPrivate })
        // A.3: an A128KW key (not for JWS) is skipped; the HMAC key stays.
        let symmetric = try JWKSet(json: Self.latchset("rfc7517_A.3.jwkset"))
        #expect(symmetric.keys.count == 1)
        #expect(symmetric.skipped.count == 1)
        #expect(symmetric.keys.first?.kid == "HMACkeyusedinJWSspecAppendixA.1example")
    }

    /// RFC 7520 §3 keys round-trip through JWK export unchanged (public and private members).
    @Test(arguments: ["rfc7520_3.1.jwk", "rfc7520_3.2.jwk", "rfc7520_3.3.jwk", "rfc7520_3.4.jwk", "rfc7520_3.5.jwk"])
    func jwkRoundTrip(file: String) throws {
        let text = try Self.latchset(file)
        guard case .object(var original) = try JSONValue.parse(text) else { Issue.record("not an object"); return }
        let key = try JWTKey(jwk: original)
        let exported = try key.jwk(includePrivate: true)
        original["alg"] = exported["alg"]  // alg is added when the key has exactly one
        #expect(exported == original)
        let again = try JWTKey(jwk: exported).thumbprint()
        #expect(try again == key.thumbprint())
    }
}
