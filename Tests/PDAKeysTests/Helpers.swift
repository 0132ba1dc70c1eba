import Foundation
@testable import PDAKeys
import TokenKit

/// Keys made once per test process (RSA generation is slow in debug builds).
enum TestKeys {
    static let rsa: JWTKey = make(.rsa(bits: 2048))
    static let rsa2: JWTKey = make(.rsa(bits: 2048))
    static let ec: JWTKey = make(.ec(.p256))

    private static func make(_ spec: JWTKey.Spec) -> JWTKey {
        do { return try JWTKey.generate(spec) } catch { fatalError("key generation failed: \(error)") }
    }

    static func publicPEM(_ key: JWTKey) -> String {
        (try? key.publicPEM()) ?? ""
    }

    /// A JWK Set text holding the public halves of `keys`, with the given kids.
    static func jwks(_ keys: [(JWTKey, String)]) throws -> String {
        try JWKSet(keys: keys.map { $0.0.publicKey.with(kid: $0.1) }).jsonText()
    }
}

/// The claims of a HAT application token issued `age` seconds before `now`.
func hatClaims(iss: String, now: Double, age: Double = 60, lifetime: Double = 3600, application: String? = "my-app") -> [String: JSONValue] {
    var claims: [String: JSONValue] = [
        "iss": .string(iss), "sub": .string("user-\(iss.prefix(5))"), "applicationVersion": .string("1.2.3"),
        "iat": .integer(Int(now - age)), "exp": .integer(Int(now - age + lifetime)), "jti": .string("jti-\(UUID().uuidString)"),
    ]
    if let application { claims["application"] = .string(application) }
    return claims
}

func sign(_ claims: [String: JSONValue], with key: JWTKey, kid: String? = nil, header: [String: JSONValue] = [:]) throws -> String {
    var header = header
    if let kid { header["kid"] = .string(kid) }
    return try JWTSigner(key: key, algorithm: key.algorithms.contains(.rs256) ? .rs256 : nil).sign(claims: claims, header: header)
}

/// Runs `body` with a started server and a fetcher/store around it, and stops them after.
func withServer<T>(
    plain: Bool = false, routes: [String: Route], clock: ManualClock = ManualClock(), policy: KeyStorePolicy = KeyStorePolicy(),
    configure: (inout KeyFetchConfiguration) -> Void = { _ in },
    _ body: (KeyServer, RemoteKeyStore) async throws -> T
) async throws -> T {
    let server = try KeyServer(plain: plain, routes: routes)
    defer { server.stop() }
    let fetcher = try testFetcher(server, configure)
    let store = RemoteKeyStore(fetcher: fetcher, policy: policy, clock: clock.verificationClock)
    do {
        let result = try await body(server, store)
        await fetcher.shutdown()
        return result
    } catch {
        await fetcher.shutdown()
        throw error
    }
}

/// The error `body` throws, or nil.
func thrown(_ body: () async throws -> Void) async -> (any Error)? {
    do { try await body() } catch { return error }
    return nil
}

func sourceCode(_ error: (any Error)?) -> String? {
    switch error {
    case let error as KeySourceError: error.code.rawValue
    case let error as TokenError: error.code.rawValue
    default: nil
    }
}
