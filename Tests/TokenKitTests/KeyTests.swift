import Foundation
import Testing
@testable import TokenKit

/// Key parsing in every accepted form, made by the real `openssl` binary, plus the refusals.
@Suite("Keys")
struct KeyTests {
    static let openssl: URL? = which("openssl")

    /// Runs openssl in `dir`; fails the test with its stderr when it fails.
    @discardableResult
    static func ssl(_ dir: URL, _ args: [String]) throws -> String {
        guard let openssl else { throw FixtureError("the openssl binary is required (apt-get install openssl)") }
        let result = try run(openssl, args, cwd: dir)
        guard result.status == 0 else { throw FixtureError("openssl \(args.joined(separator: " ")) failed: \(result.err)") }
        return result.out
    }

    static func read(_ dir: URL, _ name: String) throws -> [UInt8] {
        Array(try Data(contentsOf: dir.appendingPathComponent(name)))
    }

    /// Every PEM and DER form of one key verifies what the private key signs, and a signature
    /// made by `openssl dgst -sign` verifies with TokenKit.
    @Test(arguments: [
        ("rsa", ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "key.pem"], JWTAlgorithm.rs256, "-sha256"),
        ("ec256", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "key.pem"], .es256, "-sha256"),
        ("ec384", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384", "-out", "key.pem"], .es384, "-sha384"),
        ("ec521", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-521", "-out", "key.pem"], .es512, "-sha512"),
        ("ed25519", ["genpkey", "-algorithm", "ED25519", "-out", "key.pem"], .eddsa, ""),
    ])
    func opensslKeyForms(name: String, generate: [String], algorithm: JWTAlgorithm, digest: String) throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        try Self.ssl(dir, generate)
        try Self.ssl(dir, ["pkey", "-in", "key.pem", "-pubout", "-out", "pub.pem"])
        try Self.ssl(dir, ["pkey", "-in", "key.pem", "-pubout", "-outform", "DER", "-out", "pub.der"])
        try Self.ssl(dir, ["pkey", "-in", "key.pem", "-outform", "DER", "-out", "key.der"])
        try Self.ssl(dir, ["req", "-x509", "-new", "-key", "key.pem", "-subj", "/CN=tokentool test", "-days", "1", "-out", "cert.pem"])
        var publicForms = ["pub.pem", "pub.der", "cert.pem"]
        var privateForms = ["key.pem", "key.der"]
        if name == "rsa" {
            try Self.ssl(dir, ["rsa", "-in", "key.pem", "-traditional", "-out", "trad.pem"])
            try Self.ssl(dir, ["rsa", "-in", "key.pem", "-RSAPublicKey_out", "-out", "pkcs1pub.pem"])
            try Self.ssl(dir, ["rsa", "-in", "key.pem", "-RSAPublicKey_out", "-outform", "DER", "-out", "pkcs1pub.der"])
            publicForms += ["pkcs1pub.pem", "pkcs1pub.der"]
            privateForms.append("trad.pem")
        } else if name.hasPrefix("ec") {
            try Self.ssl(dir, ["ec", "-in", "key.pem", "-out", "trad.pem"])
            privateForms.append("trad.pem")
        }
        let signing = try JWTKey(pemOrDER: Self.read(dir, "key.pem"))
        #expect(signing.isPrivate)
        #expect(signing.algorithms == [algorithm])
        let token = try JWTSigner(key: signing).sign(claims: ["exp": .integer(4_102_444_800)])
        for form in publicForms + privateForms {
            let key = try JWTKey(pemOrDER: Self.read(dir, form))
            #expect(key.isPrivate == privateForms.contains(form), "\(form)")
            #expect(try key.thumbprint() == signing.thumbprint(), "\(form)")
            for engine in JWTVerifier.Engine.allCases {
                #expect(throws: Never.self, "\(form) via \(engine)") { try JWTVerifier(key: key, engine: engine).verify(token) }
            }
        }
        // openssl signs the signing input; TokenKit verifies (ECDSA: DER → raw r‖s here).
        let header = Base64URL.encode(Array(#"{"alg":"\#(algorithm.rawValue)"}"#.utf8))
        let payload = Base64URL.encode(Array(#"{"exp":4102444800}"#.utf8))
        try Data((header + "." + payload).utf8).write(to: dir.appendingPathComponent("input"))
        let signArgs = algorithm == .eddsa
            ? ["pkeyutl", "-sign", "-rawin", "-inkey", "key.pem", "-in", "input", "-out", "sig"]
            : ["dgst", digest, "-sign", "key.pem", "-out", "sig", "input"]
        try Self.ssl(dir, signArgs)
        var signature = try Self.read(dir, "sig")
        if let curve = algorithm.curve {
            signature = try #require(ECDSASignature.rawFromDER(signature, coordinateLength: curve.coordinateLength))
        }
        let opensslToken = header + "." + payload + "." + Base64URL.encode(signature)
        let publicKey = try JWTKey(pemOrDER: Self.read(dir, "pub.pem"))
        for engine in JWTVerifier.Engine.allCases {
            #expect(throws: Never.self) { try JWTVerifier(key: publicKey, engine: engine).verify(opensslToken) }
        }
        // And openssl verifies what TokenKit signed.
        let parts = token.split(separator: ".").map(String.init)
        try Data((parts[0] + "." + parts[1]).utf8).write(to: dir.appendingPathComponent("ours"))
        var ours = try #require(Base64URL.decode(parts[2]))
        if algorithm.curve != nil { ours = try #require(ECDSASignature.derFromRaw(ours.withUnsafeBytes { UnsafeRawBufferPointer($0) }, coordinateLength: algorithm.curve?.coordinateLength ?? 0)) }
        try Data(ours).write(to: dir.appendingPathComponent("oursig"))
        let verifyArgs = algorithm == .eddsa
            ? ["pkeyutl", "-verify", "-rawin", "-pubin", "-inkey", "pub.pem", "-in", "ours", "-sigfile", "oursig"]
            : ["dgst", digest, "-verify", "pub.pem", "-signature", "oursig", "ours"]
        #expect(try Self.ssl(dir, verifyArgs).contains("Verified") || algorithm == .eddsa)
    }

    @Test func refusedKeys() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        try Self.ssl(dir, ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024", "-out", "rsa1024.pem"])
        try Self.ssl(dir, ["ecparam", "-name", "prime256v1", "-genkey", "-param_enc", "explicit", "-out", "explicit.pem"])
        try Self.ssl(dir, ["ecparam", "-name", "secp256k1", "-genkey", "-out", "k1.pem"])
        try Self.ssl(dir, ["genpkey", "-algorithm", "ED448", "-out", "ed448.pem"])
        try Self.ssl(dir, ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-pkeyopt", "rsa_keygen_pubexp:3", "-out", "e3.pem"])
        #expect(code { _ = try JWTKey(pemOrDER: Self.read(dir, "rsa1024.pem")) } == .weakKey)
        #expect(code { _ = try JWTKey(pemOrDER: Self.read(dir, "explicit.pem")) } == .unsupportedKey)
        #expect(code { _ = try JWTKey(pemOrDER: Self.read(dir, "k1.pem")) } == .unsupportedKey)
        #expect(code { _ = try JWTKey(pemOrDER: Self.read(dir, "ed448.pem")) } == .unsupportedKey)
        #expect(code { _ = try JWTKey(pemOrDER: Self.read(dir, "e3.pem")) } == nil)  // e = 3 is allowed
        #expect(code { _ = try JWTKey(pem: "") } == .invalidKey)
        #expect(code { _ = try JWTKey(der: []) } == .invalidKey)
        #expect(code { _ = try JWTKey(der: [0x30, 0x03, 0x02, 0x01, 0x00]) } == .invalidKey)
        #expect(code { _ = try JWTKey.hmac(secret: []) } == .weakKey)
        #expect(code { _ = try JWTKey.hmac(secret: Array(repeating: 1, count: 31)) } == .weakKey)
        #expect(code { _ = try JWTKey.hmac(secret: Array(repeating: 1, count: 32), algorithms: [.hs384]) } == .weakKey)
        #expect(code { _ = try JWTKey.hmac(secret: Array(repeating: 1, count: 64), algorithms: [.rs256]) } == .invalidKey)
        #expect(code { _ = try JWTKey.generate(.rsa(bits: 1024)) } == .weakKey)
        let ec = try JWTKey.generate(.ec(.p256))
        #expect(code { _ = try ec.with(algorithms: [.es384]) } == .invalidKey)
        #expect(code { _ = try ec.with(algorithms: [.rs256]) } == .invalidKey)
        #expect(code { _ = try JWTSigner(key: ec.publicKey) } == .privateKeyRequired)
        #expect(code { _ = try JWTKey(pem: "-----BEGIN PUBLIC KEY-----\nnot base64!\n-----END PUBLIC KEY-----\n") } == .invalidKey)
        #expect(code { _ = try JWTKey(pem: "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PRIVATE KEY-----\n") } == .invalidKey)
        #expect(code { _ = try JWTKey(pem: "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n") } == .unsupportedKey)
    }

    @Test func rocaFingerprintIsRefused() throws {
        let document = try Fixtures.json("wycheproof/json_web_key_test.json")
        let groups = try #require(document["testGroups"] as? [[String: Any]])
        let roca = try #require(groups.first { ($0["tests"] as? [[String: Any]])?.first?["comment"] as? String == "rejectsKeyWithRocaVulnerability" })
        let set = try #require((roca["public"] as? [String: Any])?["keys"] as? [Any])
        #expect(code { _ = try JWTKey(jwk: Fixtures.jsonText(set[0])) } == .weakKey)
        // An ordinary key passes the same check.
        #expect(code { _ = try JWTKey.generate(.rsa(bits: 2048)) } == nil)
    }

    @Test func malformedJWKs() throws {
        let good = try JWTKey.generate(.ec(.p256)).publicKey.jwk()
        var offCurve = good
        if case .string(let y)? = good["y"], var bytes = Base64URL.decode(y) {
            bytes[31] ^= 1
            offCurve["y"] = .string(Base64URL.encode(bytes))
        }
        #expect(code { _ = try JWTKey(jwk: offCurve) } == .invalidKey)
        var short = good
        short["x"] = .string(Base64URL.encode([1, 2, 3]))
        #expect(code { _ = try JWTKey(jwk: short) } == .invalidKey)
        #expect(code { _ = try JWTKey(jwk: #"{"kty":"EC","crv":"secp256k1","x":"AA","y":"AA"}"#) } == .unsupportedKey)
        #expect(code { _ = try JWTKey(jwk: #"{"kty":"OKP","crv":"Ed448","x":"AA"}"#) } == .unsupportedKey)
        #expect(code { _ = try JWTKey(jwk: #"{"kty":"oct","k":""}"#) } == .weakKey)
        #expect(code { _ = try JWTKey(jwk: #"{"kty":"oct","k":"AA=="}"#) } == .invalidKey)
        #expect(code { _ = try JWTKey(jwk: #"{"kty":"RSA","n":"AQAB"}"#) } == .invalidKey)
        #expect(code { _ = try JWTKey(jwk: #"{"kty":"XYZ"}"#) } == .unsupportedKey)
        #expect(code { _ = try JWTKey(jwk: #"{"k":"AAAA"}"#) } == .invalidKey)
        #expect(code { _ = try JWTKey(jwk: #"{"kty":"oct","k":"AAAA","kty":"RSA"}"#) } == .duplicateMember)
        #expect(code { _ = try JWTKey(jwk: "[]") } == .invalidKey)
        // Ed25519 private key whose x does not match d.
        let ed = try JWTKey.generate(.ed25519).jwk(includePrivate: true)
        var mismatched = ed
        mismatched["x"] = try JWTKey.generate(.ed25519).jwk()["x"]
        #expect(code { _ = try JWTKey(jwk: mismatched) } == .invalidKey)
    }

    @Test func keySetRules() throws {
        let a = try JWTKey.generate(.ec(.p256), kid: "a")
        let b = try JWTKey.generate(.ec(.p256), kid: "a")
        #expect(code { _ = try JWKSet(keys: [a.publicKey, b.publicKey]) } == .invalidKeySet)
        #expect(code { _ = try JWKSet(keys: [a.publicKey, JWTKey.hmac(secret: Array(0..<32), kid: "h")]) } == .invalidKeySet)
        #expect(code { _ = try JWKSet(keys: [a, b.publicKey.with(kid: "b")]) } == .invalidKeySet)
        let set = try JWKSet(keys: [a.publicKey, b.publicKey.with(kid: "b")])
        let reparsed = try JWKSet(json: set.jsonText())
        #expect(try reparsed.keys.map { try $0.thumbprint() } == set.keys.map { try $0.thumbprint() })
        #expect(code { _ = try JWKSet(json: #"{"keys":{}}"#) } == .invalidKeySet)
        #expect(code { _ = try JWKSet(json: #"{"keys":[1]}"#) } == .invalidKeySet)
    }

    /// Every generatable key: JWK and PEM round trips, then sign and verify with both engines.
    @Test(arguments: JWTKey.Spec.allForTests)
    func generatedKeysRoundTrip(spec: JWTKey.Spec) throws {
        let key = try JWTKey.generate(spec, kid: "k")
        let viaJWK = try JWTKey(jwk: key.jwkText(includePrivate: true))
        #expect(try viaJWK.thumbprint() == key.thumbprint())
        #expect(viaJWK.isPrivate)
        if case .hmac = key.type {
            #expect(code { _ = try key.publicPEM() } == .unsupportedKey)
        } else {
            let viaPEM = try JWTKey(pem: key.privatePEM(), kid: "k")
            #expect(try viaPEM.thumbprint() == key.thumbprint())
            #expect(try JWTKey(pem: key.publicPEM()).isPrivate == false)
            #expect(try key.publicKey.jwk()["d"] == nil)
        }
        for algorithm in key.algorithms {
            let token = try JWTSigner(key: key, algorithm: algorithm).sign(claims: ["exp": .integer(4_102_444_800)])
            for engine in JWTVerifier.Engine.allCases {
                let verified = try JWTVerifier(key: key.publicKey, engine: engine).verify(token)
                #expect(verified.header.algorithm == algorithm)
                #expect(verified.header.keyID == "k")
            }
        }
    }

    @Test(arguments: [JWTAlgorithm.ps256, .ps384, .ps512, .rs384, .rs512])
    func rsaAlgorithmsOnOneKey(algorithm: JWTAlgorithm) throws {
        let key = try Self.rsaKey.with(algorithms: [algorithm])
        let token = try JWTSigner(key: key).sign(claims: ["exp": .integer(4_102_444_800)])
        for engine in JWTVerifier.Engine.allCases {
            #expect(try JWTVerifier(key: key.publicKey, engine: engine).verify(token).header.algorithm == algorithm)
        }
        // The same key bound to RS256 refuses it.
        let rs256Only = try Self.rsaKey.publicKey.with(algorithms: [.rs256])
        if algorithm != .rs256 { #expect(code { _ = try JWTVerifier(key: rs256Only).verify(token) } == .algorithmNotAllowed) }
    }

    static let rsaKey: JWTKey = {
        do { return try JWTKey.generate(.rsa(bits: 2048)) } catch { fatalError("\(error)") }
    }()

    @Test func descriptionsAndErrorsNeverShowKeyMaterial() throws {
        let secret = Array("correct horse battery staple 123".utf8)
        let key = try JWTKey.hmac(secret: secret, kid: "s")
        let secretB64 = Base64URL.encode(secret)
        #expect(!key.description.contains(secretB64) && !key.description.contains("correct horse"))
        let ec = try JWTKey.generate(.ec(.p256))
        let pem = try ec.privatePEM()
        let body = pem.split(separator: "\n")[1]
        #expect(!ec.description.contains(String(body.prefix(20))))
        // A broken PEM's error does not echo its body.
        let broken = pem.replacingOccurrences(of: String(body.prefix(8)), with: "!!!!!!!!")
        do {
            _ = try JWTKey(pem: broken)
            Issue.record("a broken PEM was accepted")
        } catch {
            #expect(!error.message.contains(String(body.dropFirst(8).prefix(16))))
        }
    }
}

extension JWTKey.Spec {
    static let allForTests: [JWTKey.Spec] = [.rsa(bits: 2048), .ec(.p256), .ec(.p384), .ec(.p521), .ed25519, .hmac(.hs256), .hmac(.hs384), .hmac(.hs512)]
}
