import Foundation
@testable import PeerCA
import TestSupport
import TokenKit
import X509

/// Tokens signed and then verified through TokenKit, as a real issuance would get them.
enum Tokens {
    static let key: JWTKey = {
        do { return try JWTKey.generate(.ec(.p256), kid: "idp-1") } catch { fatalError("\(error)") }
    }()

    static func verified(_ claims: [String: JSONValue], now: Double = Date().timeIntervalSince1970) throws -> VerifiedToken {
        let token = try JWTSigner(key: key).sign(claims: claims)
        let verifier = try JWTVerifier(key: key.publicKey, policy: ClaimsPolicy(), clock: .fixed(now))
        return try verifier.verify(token)
    }

    static func claims(
        sub: String = "user-42", iss: String = "https://idp.example/", jti: String? = UUID().uuidString, lifetime: Double = 3600,
        now: Double = Date().timeIntervalSince1970, extra: [String: JSONValue] = [:]
    ) -> [String: JSONValue] {
        var claims: [String: JSONValue] = [
            "iss": .string(iss), "sub": .string(sub), "iat": .integer(Int(now) - 10), "exp": .integer(Int(now + lifetime)),
        ]
        if let jti { claims["jti"] = .string(jti) }
        claims.merge(extra) { $1 }
        return claims
    }
}

/// A CA with an intermediate, a policy and a fresh SQLite ledger in a scratch directory.
struct TestCA {
    let material: CertificateAuthority.Material
    let ca: PeerCertificateAuthority
    let dir: URL

    init(
        algorithm: CAKeyAlgorithm = .p256, intermediate: Bool = true, clock: VerificationClock = .system,
        configure: (inout IssuancePolicy) -> Void = { _ in }
    ) throws {
        dir = try temporaryDirectory()
        material = try CertificateAuthority.create(name: "Test devices", algorithm: algorithm, withIntermediate: intermediate)
        var policy = try IssuancePolicy(appID: "app-1234", trustDomainSuffix: "peers.example", provider: "idp")
        configure(&policy)
        let ledger = try SQLiteLedger(path: dir.appendingPathComponent("ledger.sqlite").path)
        ca = PeerCertificateAuthority(authority: material.authority, policy: policy, ledger: ledger, clock: clock)
    }

    var root: Certificate { material.authority.root }
}
