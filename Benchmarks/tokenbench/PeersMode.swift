import Foundation
import TokenKit

/// Prints the two lines the peer harness (`shared/peers/run.sh`, PROJECT_BENCH_CMD) reads, timed
/// the way its other rows are: a checked warm-up pass, then `reps` repetitions of the 1000-token
/// batch for at least `seconds` each.
enum PeersMode {
    /// The harness's security cases: RS256 cases get the RSA public key, HS256 cases the secret,
    /// each verifier configured as an application would (default claims policy).
    static func check(directory: String) throws {
        let dir = URL(fileURLWithPath: directory)
        let rsa = try JWTVerifier(key: JWTKey(pem: String(contentsOf: dir.appendingPathComponent("rsa_public.pem"), encoding: .utf8)))
        let hmac = try JWTVerifier(key: JWTKey.hmac(secret: Array(try Data(contentsOf: dir.appendingPathComponent("hs256_secret.bin")))))
        let cases = try String(contentsOf: dir.appendingPathComponent("cases.tsv"), encoding: .utf8)
        for line in cases.split(separator: "\n") {
            let fields = line.split(separator: "\t").map(String.init)
            guard fields.count == 4 else { continue }
            let verifier = fields[1] == "hmac" ? hmac : rsa
            let verdict = (try? verifier.verify(fields[3])) == nil ? "REJECT" : "ACCEPT"
            print("\(fields[0]) \(verdict)")
        }
    }

    static func run(directory: String, seconds: Double, reps: Int) throws {
        let dir = URL(fileURLWithPath: directory)
        func text(_ name: String) throws -> String { try String(contentsOf: dir.appendingPathComponent(name), encoding: .utf8) }
        let policy = ClaimsPolicy(issuers: ["postman.hubat.net"], requiredClaims: ["sub", "iat"])
        let rsa = try JWTVerifier(key: JWTKey(pem: text("rsa_public.pem")), policy: policy)
        let secret = Array(try Data(contentsOf: dir.appendingPathComponent("hs256_secret.bin")))
        let hmac = try JWTVerifier(key: JWTKey.hmac(secret: secret), policy: policy)
        for (alg, file, verifier) in [("RS256", "rs256_tokens.txt", rsa), ("HS256", "hs256_tokens.txt", hmac)] {
            let tokens = try text(file).split(separator: "\n").map(String.init).filter { !$0.isEmpty }
            for (i, token) in tokens.enumerated() {
                do { _ = try verifier.verify(token) } catch { throw BenchError("\(alg) token \(i) failed: \(error)") }
            }
            let m = measure(count: tokens.count, seconds: seconds, reps: reps) { i in (try? verifier.verify(tokens[i])) != nil }
            print(String(format: "%@ %.0f %.0f", alg, m.tokensPerSecond, m.nanosecondsPerToken))
        }
    }
}
