import Foundation
import Testing
@testable import TokenKit

/// The peer harness's tokens (made by PyJWT) and its security cases, which libjwt 1.10.2 fails.
@Suite("Peer tokens and libjwt 1.10 failures")
struct PeerCasesTests {
    static func keys() throws -> (rsa: JWTKey, hmac: JWTKey) {
        let rsa = try JWTKey(pem: Fixtures.text("peers/rsa_public.pem"))
        let hmac = try JWTKey.hmac(secret: Array(Fixtures.data("peers/hs256_secret.bin")))
        return (rsa, hmac)
    }

    @Test(arguments: JWTVerifier.Engine.allCases)
    func pyjwtTokensVerify(engine: JWTVerifier.Engine) throws {
        let (rsa, hmac) = try Self.keys()
        let policy = ClaimsPolicy(maxAge: nil, issuers: ["postman.hubat.net"], requiredClaims: ["sub", "jti", "iat"], expectedType: "JWT")
        let rsaVerifier = try JWTVerifier(key: rsa, policy: policy, engine: engine)
        let hmacVerifier = try JWTVerifier(key: hmac, policy: policy, engine: engine)
        for (file, verifier) in [("peers/rs256_tokens.txt", rsaVerifier), ("peers/hs256_tokens.txt", hmacVerifier)] {
            let tokens = try Fixtures.text(file).split(separator: "\n").map(String.init)
            #expect(tokens.count == 100)
            for token in tokens {
                let verified = try verifier.verify(token)
                #expect(verified.payload["application"] == .string("testing"))
            }
        }
    }

    /// cases.tsv: every case gets the expected verdict from both engines (libjwt 1.10.2 alone
    /// accepts the expired and algorithm-confusion tokens).
    @Test(arguments: JWTVerifier.Engine.allCases)
    func securityCases(engine: JWTVerifier.Engine) throws {
        let (rsa, hmac) = try Self.keys()
        let lines = try Fixtures.text("peers/cases.tsv").split(separator: "\n")
        #expect(lines.count >= 8)
        for line in lines {
            let fields = line.split(separator: "\t").map(String.init)
            guard fields.count == 4 else { Issue.record("bad case line"); continue }
            let verifier = try JWTVerifier(key: fields[1] == "rsa" ? rsa : hmac, engine: engine)
            let accepted = (try? verifier.verify(fields[3])) != nil
            #expect(accepted == (fields[2] == "ACCEPT"), "\(fields[0]) via \(engine)")
        }
    }

    /// The attacks that pass libjwt 1.10.2, each refused with the rule that stops it.
    @Test(arguments: JWTVerifier.Engine.allCases)
    func libjwtKnownFailuresAreRefused(engine: JWTVerifier.Engine) throws {
        let (rsa, _) = try Self.keys()
        let cases = try Fixtures.text("peers/cases.tsv").split(separator: "\n").map { $0.split(separator: "\t").map(String.init) }
        func token(_ name: String) throws -> String { try #require(cases.first { $0[0] == name })[3] }
        let verifier = try JWTVerifier(key: rsa, engine: engine)
        #expect(code { _ = try verifier.verify(token("confusion_hs256_pem")) } == .algorithmNotAllowed)
        #expect(code { _ = try verifier.verify(token("confusion_hs256_pem_lowercase_alg")) } == .unsupportedAlgorithm)
        #expect(code { _ = try verifier.verify(token("alg_none")) } == .forbiddenAlgorithm)
        #expect(code { _ = try verifier.verify(token("rs256_expired")) } == .expired)
        #expect(code { _ = try verifier.verify(token("rs256_tampered")) } == .badSignature)
        // An empty key never reaches an engine: refused at creation.
        #expect(code { _ = try JWTKey.hmac(secret: []) } == .weakKey)
        #expect(code { _ = try JWTKey(pem: "") } == .invalidKey)
        #expect(code { _ = try JWTKey(der: []) } == .invalidKey)
    }
}
