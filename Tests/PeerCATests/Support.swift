import Foundation
@testable import PeerCA
import TestSupport
import TokenKit
import X509

/// The real `openssl` binary, run in a scratch directory.
struct OpenSSL {
    let dir: URL

    init() throws { dir = try temporaryDirectory() }

    func path(_ name: String) -> String { dir.appendingPathComponent(name).path }

    /// Runs openssl; returns stdout+stderr and the exit status.
    @discardableResult
    func run(_ arguments: [String], stdin: Data? = nil) throws -> (status: Int32, output: String) {
        guard let openssl = which("openssl") else { throw SupportError("openssl is not installed") }
        let result = try TestSupport.run(openssl, arguments, stdin: stdin, cwd: dir)
        return (result.status, result.out + result.err)
    }

    /// Runs openssl and throws unless it succeeds.
    @discardableResult
    func must(_ arguments: [String]) throws -> String {
        let result = try run(arguments)
        guard result.status == 0 else { throw SupportError("openssl \(arguments.joined(separator: " ")) failed: \(result.output)") }
        return result.output
    }

    func write(_ name: String, _ text: String) throws { try text.write(toFile: path(name), atomically: true, encoding: .utf8) }
    func write(_ name: String, _ bytes: [UInt8]) throws { try Data(bytes).write(to: dir.appendingPathComponent(name)) }
    func read(_ name: String) throws -> [UInt8] { Array(try Data(contentsOf: dir.appendingPathComponent(name))) }

    /// A new device key and a CSR for it made by `openssl req`, asking for names the CA must ignore.
    func csr(_ keyType: String, name: String) throws -> [UInt8] {
        var keyArguments: [String]
        switch keyType {
        case "p256": keyArguments = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
        case "p384": keyArguments = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384"]
        case "rsa2048": keyArguments = ["-newkey", "rsa:2048"]
        case "rsa1024": keyArguments = ["-newkey", "rsa:1024"]
        case "ed25519": keyArguments = ["-newkey", "ed25519"]
        default: throw SupportError("unknown key type \(keyType)")
        }
        try must(["req", "-new"] + keyArguments + [
            "-nodes", "-keyout", "\(name).key", "-out", "\(name).csr", "-subj", "/CN=admin/O=Evil Corp",
            "-addext", "subjectAltName=DNS:evil.example,URI:spiffe://evil/admin", "-addext", "basicConstraints=critical,CA:TRUE",
        ])
        return try read("\(name).csr")
    }
}

struct SupportError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

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
