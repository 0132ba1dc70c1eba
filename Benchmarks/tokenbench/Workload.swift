import Foundation
import TokenKit

/// 1000 HAT-shaped tokens for one algorithm, with the keys that made them.
struct Workload {
    static let tokenCount = 1000
    /// Every token's `exp` (2100-01-01T00:00:00Z).
    static let expiry: NumericDate = 4_102_444_800
    /// An hour and a quarter of a second past every token's `exp`: the clock of the refusal rows
    /// (names ending `.expired`). A fraction, as a live clock always has, so the message's seconds
    /// take the path they take in a service.
    static let lateClock = VerificationClock.fixed(expiry + 3600.25)
    let algorithm: JWTAlgorithm
    let key: JWTKey
    let tokens: [String]
    let policy = ClaimsPolicy(issuers: ["postman.hubat.net"], requiredClaims: ["sub", "jti", "iat"])

    init(_ algorithm: JWTAlgorithm) throws {
        self.algorithm = algorithm
        switch algorithm {
        case .rs256: key = try JWTKey.generate(.rsa(bits: 2048))
        case .es256: key = try JWTKey.generate(.ec(.p256))
        case .eddsa: key = try JWTKey.generate(.ed25519)
        default: key = try JWTKey.generate(.hmac(.hs256))
        }
        let signer = try JWTSigner(key: key, algorithm: algorithm)
        let now = Int(Date().timeIntervalSince1970)
        tokens = try (0..<Workload.tokenCount).map { i in
            // The same claims, in the same order, as the peer harness's tokens.
            let payload = #"{"iss":"postman.hubat.net","sub":"1-\#(String(format: "%043d", i))","application":"testing","applicationVersion":"1.0.0","exp":\#(Int(Workload.expiry)),"iat":\#(now),"jti":"\#(UUID().uuidString.lowercased())"}"#
            return try signer.signJWS(payload: Array(payload.utf8))
        }
    }

    func verifier(engine: JWTVerifier.Engine, cache: VerifiedTokenCache? = nil, clock: VerificationClock = .system) throws -> JWTVerifier {
        try JWTVerifier(key: key.publicKey, policy: policy, engine: engine, clock: clock, cache: cache)
    }

    func rawLimit() throws -> RawLimit {
        if algorithm == .hs256 {
            guard case .string(let k)? = try key.jwk(includePrivate: true)["k"], let secret = Base64URL.decode(k) else {
                throw BenchError("no secret")
            }
            return try RawLimit(algorithm: algorithm, publicKeyPEM: nil, secret: secret, tokens: tokens)
        }
        return try RawLimit(algorithm: algorithm, publicKeyPEM: key.publicPEM(), secret: nil, tokens: tokens)
    }

    /// Refuses to time a row that does not do what it claims: `body` must hold for every token
    /// (a verify row: it verified; a refusal row, `.expired`: refused as expired), the header must
    /// name the algorithm, and a token with one flipped signature bit must fail — for a refusal row,
    /// on its own clock, with a signature error: so the row's refusals come after the signature
    /// check, never instead of it.
    func check(name: String, _ body: (Int) -> Bool) throws {
        let refusal = name.hasSuffix(".expired")
        for i in 0..<tokens.count where !body(i) { throw BenchError("\(name): token \(i) was not \(refusal ? "refused as expired" : "verified")") }
        let header = try UnverifiedToken(tokens[0]).header
        guard header["alg"] == .string(algorithm.rawValue) else { throw BenchError("\(name): tokens are not \(algorithm)") }
        var parts = tokens[0].split(separator: ".").map(String.init)
        var sig = Base64URL.decode(parts[2]) ?? []
        sig[sig.count / 2] ^= 0x40
        parts[2] = Base64URL.encode(sig)
        let tampered = Workload(copying: self, first: parts.joined(separator: "."))
        if name.hasPrefix("openssl-raw") {
            let raw = try tampered.rawLimit()
            if raw.verify(0) { throw BenchError("\(name): accepted a tampered signature") }
        } else {
            let engine: JWTVerifier.Engine = name.contains("libjwt") ? .libjwt : .native
            let cache = name.contains("cache") ? VerifiedTokenCache() : nil
            let verifier = try tampered.verifier(engine: engine, cache: cache, clock: refusal ? Workload.lateClock : .system)
            let refused: TokenError.Code?
            do throws(TokenError) {
                _ = try verifier.verify(tampered.tokens[0])
                refused = nil
            } catch { refused = error.code }
            guard let refused else { throw BenchError("\(name): accepted a tampered signature") }
            if refusal, refused == .expired { throw BenchError("\(name): refused a tampered signature as expired, before checking it") }
        }
    }

    private init(copying other: Workload, first: String) {
        algorithm = other.algorithm
        key = other.key
        tokens = [first]
    }
}
