import ArgumentParser
import Foundation
import TokenKit

struct Demo: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a sign → verify round trip on built-in defaults and show what gets refused.",
        discussion: """
            Generates an ES256 key and an RS256 key in memory, signs a token shaped like a HAT PDA \
            application token, verifies it with both engines (native OpenSSL and libjwt), then shows \
            that a tampered token, an expired one, an "alg": "none" one and an HS256 token MACed with \
            the RSA public key's PEM bytes are all refused, each with its rule. Needs no files.
            """)

    func run() throws {
        let now = Int(Date().timeIntervalSince1970)
        let claims: [String: JSONValue] = [
            "iss": .string("demo.hubat.net"), "sub": .string("1-demo-user"), "application": .string("tokentool-demo"),
            "applicationVersion": .string("1.0.0"), "iat": .integer(now), "exp": .integer(now + 3600),
            "jti": .string(UUID().uuidString.lowercased()),
        ]
        let policy = ClaimsPolicy(maxAge: 30 * 24 * 3600, issuers: ["demo.hubat.net"], expectedType: "JWT")
        var failures = 0
        for (name, spec) in [("demo-ec", JWTKey.Spec.ec(.p256)), ("demo-rsa", .rsa(bits: 2048))] {
            let key = try JWTKey.generate(spec, kid: name)
            let token = try JWTSigner(key: key).sign(claims: claims)
            print("Signed with a new \(key.type) key: \(token.prefix(48))… (\(token.utf8.count) bytes)")
            for engine in JWTVerifier.Engine.allCases {
                let verifier = try JWTVerifier(key: key.publicKey, policy: policy, engine: engine)
                let verified = try verifier.verify(token)
                print("  VALID via \(engine.rawValue): \(verified.header.algorithm), sub \(verified.claims.subject ?? "-")")
            }
        }
        let rsa = try JWTKey.generate(.rsa(bits: 2048))
        let verifier = try JWTVerifier(key: rsa.publicKey, policy: policy)
        let good = try JWTSigner(key: rsa).sign(claims: claims)
        let parts = good.split(separator: ".").map(String.init)
        var expiredClaims = claims
        expiredClaims["exp"] = .integer(now - 3600)
        let pem = try rsa.publicPEM()
        let confusion = try JWTSigner(key: JWTKey.hmac(secret: Array(pem.utf8))).sign(claims: claims)
        let attacks: [(String, String)] = [
            ("tampered payload", parts[0] + "." + Base64URL.encode(Array(#"{"sub":"admin"}"#.utf8)) + "." + parts[2]),
            ("expired", try JWTSigner(key: rsa).sign(claims: expiredClaims)),
            ("alg none", Base64URL.encode(Array(#"{"alg":"none","typ":"JWT"}"#.utf8)) + "." + parts[1] + "."),
            ("HS256 MACed with the RSA public key PEM", confusion),
        ]
        for (name, token) in attacks {
            do {
                _ = try verifier.verify(token)
                print("  ACCEPTED \(name) — this is a bug")
                failures += 1
            } catch {
                print("  REFUSED \(name): \(error.code) — \(error.message)")
            }
        }
        if failures > 0 { throw CLIExit(code: 1, message: "demo: \(failures) attack(s) accepted") }
        print("Demo complete: valid tokens verified, attacks refused.")
    }
}
