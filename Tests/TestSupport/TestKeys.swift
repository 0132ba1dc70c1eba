import Foundation
public import TokenKit

/// Keys made once per test process (RSA generation is slow in debug builds).
public enum TestKeys {
    public static let rsa: JWTKey = make(.rsa(bits: 2048))
    public static let rsa2: JWTKey = make(.rsa(bits: 2048))
    public static let ec: JWTKey = make(.ec(.p256))

    private static func make(_ spec: JWTKey.Spec) -> JWTKey {
        do { return try JWTKey.generate(spec) } catch { fatalError("key generation failed: \(error)") }
    }

    public static func publicPEM(_ key: JWTKey) -> String {
        (try? key.publicPEM()) ?? ""
    }

    /// A JWK Set text holding the public halves of `keys`, with the given kids.
    public static func jwks(_ keys: [(JWTKey, String)]) throws -> String {
        try JWKSet(keys: keys.map { $0.0.publicKey.with(kid: $0.1) }).jsonText()
    }
}

/// The claims of a HAT application token issued `age` seconds before `now`.
public func hatClaims(iss: String, now: Double, age: Double = 60, lifetime: Double = 3600, application: String? = "my-app") -> [String: JSONValue] {
    var claims: [String: JSONValue] = [
        "iss": .string(iss), "sub": .string("user-\(iss.prefix(5))"), "applicationVersion": .string("1.2.3"),
        "iat": .integer(Int(now - age)), "exp": .integer(Int(now - age + lifetime)), "jti": .string("jti-\(UUID().uuidString)"),
    ]
    if let application { claims["application"] = .string(application) }
    return claims
}

public func sign(_ claims: [String: JSONValue], with key: JWTKey, kid: String? = nil, header: [String: JSONValue] = [:]) throws -> String {
    var header = header
    if let kid { header["kid"] = .string(kid) }
    return try JWTSigner(key: key, algorithm: key.algorithms.contains(.rs256) ? .rs256 : nil).sign(claims: claims, header: header)
}
