import Foundation
import Testing
@testable import TokenKit

/// Wycheproof (C2SP/wycheproof, Apache-2.0; TestVectors/wycheproof/LICENSE).
///
/// Every vector runs through the native engine and, for the algorithms libjwt 1.10 implements, the
/// libjwt engine; both must give Wycheproof's verdict (and so agree with each other).
///
/// Documented choices:
/// - "acceptable" RSA PKCS#1 v1.5 vectors (flag MissingNull: DigestInfo without the NULL
///   parameter): we record whatever OpenSSL decides and require both engines to agree.
/// - HMAC groups with keys shorter than the hash output (128-bit keys for HMAC-SHA-256, …) are
///   refused at key creation with `weak_key`, whatever the vector's verdict: RFC 7518 §3.2 requires
///   a key at least as long as the hash. Groups with truncated tags are not JWS algorithms and are
///   skipped.
/// - libjwt takes C strings, so messages containing a NUL byte cannot be given to it; those
///   vectors run through the native engine only (JWT signing inputs never contain NUL).
@Suite("Wycheproof")
struct WycheproofTests {
    struct Outcome {
        var checked = 0
        var libjwtChecked = 0
        var failures: [String] = []
    }

    static func primitive(_ file: String, algorithm: JWTAlgorithm) throws -> Outcome {
        let document = try Fixtures.json("wycheproof/\(file)")
        var outcome = Outcome()
        for case let group as [String: Any] in document["testGroups"] as? [Any] ?? [] {
            guard let pem = group["publicKeyPem"] as? String else { throw FixtureError("no publicKeyPem in \(file)") }
            let key = try JWTKey(pem: pem, algorithms: [algorithm])
            let handle = LibJWTHandle.supported.contains(algorithm) ? try LibJWTHandle(algorithm: algorithm, key: key) : nil
            for case let test as [String: Any] in group["tests"] as? [Any] ?? [] {
                let id = test["tcId"] as? Int ?? -1
                let message = hex(test["msg"] as? String ?? "")
                let signature = hex(test["sig"] as? String ?? "")
                let result = test["result"] as? String ?? ""
                let native = verdict(algorithm, key: key, handle: nil, message: message, signature: signature)
                outcome.checked += 1
                if native == nil || (result != "acceptable" && native != (result == "valid")) {
                    outcome.failures.append("\(file) tcId \(id): native says \(String(describing: native)), expected \(result)")
                }
                if let handle, !message.contains(0) {
                    let viaLibjwt = verdict(algorithm, key: key, handle: handle, message: message, signature: signature)
                    outcome.libjwtChecked += 1
                    if viaLibjwt != native {
                        outcome.failures.append("\(file) tcId \(id): libjwt says \(String(describing: viaLibjwt)), native \(String(describing: native))")
                    }
                }
            }
        }
        return outcome
    }

    /// The verdict of the shared signature step. For the native engine, a context reused from
    /// a pool (the hot path) and a fresh one must agree; a disagreement
    /// returns nil, which matches no expected verdict.
    static func verdict(_ algorithm: JWTAlgorithm, key: JWTKey, handle: LibJWTHandle?, message: [UInt8], signature: [UInt8]) -> Bool? {
        let segment = Array(Base64URL.encode(signature).utf8)
        func check(_ pool: ContextPool?) -> Bool {
            message.withUnsafeBytes { m in
                segment.withUnsafeBytes { s in
                    signature.withUnsafeBytes { sig in
                        (try? JWTVerifier.checkSignature(algorithm, key: key, libjwt: handle, pool: pool, signingInput: m, signature: sig, signatureSegment: s)) != nil
                    }
                }
            }
        }
        if handle != nil { return check(nil) }
        let pooled = check(ContextPool(algorithm: algorithm, key: key))
        let oneShot = check(nil)
        return pooled == oneShot ? pooled : nil  // nil never equals an expected verdict
    }

    @Test(arguments: [
        ("rsa_signature_2048_sha256_test.json", JWTAlgorithm.rs256),
        ("rsa_signature_2048_sha384_test.json", .rs384),
        ("rsa_signature_2048_sha512_test.json", .rs512),
        ("rsa_pss_2048_sha256_mgf1_32_test.json", .ps256),
        ("rsa_pss_2048_sha384_mgf1_48_test.json", .ps384),
        ("rsa_pss_4096_sha512_mgf1_64_test.json", .ps512),
        ("ecdsa_secp256r1_sha256_p1363_test.json", .es256),
        ("ecdsa_secp384r1_sha384_p1363_test.json", .es384),
        ("ecdsa_secp521r1_sha512_p1363_test.json", .es512),
        ("ed25519_test.json", .eddsa),
    ])
    func signatureVectors(file: String, algorithm: JWTAlgorithm) throws {
        let outcome = try Self.primitive(file, algorithm: algorithm)
        #expect(outcome.failures.isEmpty, "\(outcome.failures.prefix(20).joined(separator: "\n"))")
        #expect(outcome.checked > 100)
        if LibJWTHandle.supported.contains(algorithm) { #expect(outcome.libjwtChecked > 100) }
    }

    @Test(arguments: [("hmac_sha256_test.json", JWTAlgorithm.hs256), ("hmac_sha384_test.json", .hs384), ("hmac_sha512_test.json", .hs512)])
    func hmacVectors(file: String, algorithm: JWTAlgorithm) throws {
        let document = try Fixtures.json("wycheproof/\(file)")
        var checked = 0, libjwtChecked = 0, refused = 0
        var failures: [String] = []
        for case let group as [String: Any] in document["testGroups"] as? [Any] ?? [] {
            guard group["tagSize"] as? Int == algorithm.hashLength * 8 else { continue }  // full tags only
            for case let test as [String: Any] in group["tests"] as? [Any] ?? [] {
                let id = test["tcId"] as? Int ?? -1
                let secret = hex(test["key"] as? String ?? "")
                let message = hex(test["msg"] as? String ?? "")
                let tag = hex(test["tag"] as? String ?? "")
                let valid = test["result"] as? String == "valid"
                let key: JWTKey
                do {
                    key = try JWTKey.hmac(secret: secret, algorithms: [algorithm])
                } catch {
                    #expect(error.code == .weakKey)
                    #expect(secret.count < algorithm.hashLength, "tcId \(id): a long enough key was refused")
                    refused += 1
                    continue
                }
                let native = Self.verdict(algorithm, key: key, handle: nil, message: message, signature: tag)
                checked += 1
                if native != valid { failures.append("tcId \(id): native \(String(describing: native)), expected \(valid)") }
                if !message.contains(0) {
                    let handle = try LibJWTHandle(algorithm: algorithm, key: key)
                    let viaLibjwt = Self.verdict(algorithm, key: key, handle: handle, message: message, signature: tag)
                    libjwtChecked += 1
                    if viaLibjwt != native { failures.append("tcId \(id): libjwt \(String(describing: viaLibjwt)), native \(String(describing: native))") }
                }
            }
        }
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
        #expect(checked >= 80)
        #expect(libjwtChecked >= 20)
        #expect(refused == 3)
    }

    /// Vectors of json_web_signature_test.json where TokenKit deliberately differs, each with the
    /// error code it gives instead (nil: TokenKit accepts what the file calls invalid).
    static let jwsDeviations: [Int: (TokenError.Code?, String)] = [
        346: (.algorithmNotAllowed, "RFC 7520 Figure 20: the JWK says alg PS256 but the token is PS384; the key's alg binds (RFC 7517 §4.4, RFC 8725 §3.1)"),
        350: (.algorithmNotAllowed, "same as 346, with key_ops"),
        347: (.unsupportedAlgorithm, "RFC 7520 Figure 27: the JWK says alg \"ES521\", which is no JWS algorithm; json_web_key_test tcId 19 expects that very key refused"),
        351: (.unsupportedAlgorithm, "same as 347, with key_ops"),
        367: (nil, "byte-identical to tcId 357, which the same file calls valid (the padding the comment names is not in the string)"),
        370: (nil, "byte-identical to tcId 357, as 367"),
        372: (.invalidBase64, "a '?' inside the header segment: strict base64url (RFC 7515 §2) refuses it; lenient decoders skip it"),
        373: (.badSignature, "a '?' at the end of the payload segment: not base64url, and not the signed input either"),
    ]

    /// json_web_signature_test.json: whole compact JWS through a verifier built from the group's
    /// public JWK (or private, for HMAC), with each engine.
    @Test(arguments: JWTVerifier.Engine.allCases)
    func jsonWebSignature(engine: JWTVerifier.Engine) throws {
        let document = try Fixtures.json("wycheproof/json_web_signature_test.json")
        var failures: [String] = []
        var compact = 0
        var jsonSerialized = 0
        for case let group as [String: Any] in document["testGroups"] as? [Any] ?? [] {
            let keyObject = group["public"] ?? group["private"]
            for case let test as [String: Any] in group["tests"] as? [Any] ?? [] {
                let id = test["tcId"] as? Int ?? -1
                let expected = test["result"] as? String == "valid"
                guard let jws = test["jws"] as? String else {
                    // JSON serialization (an object): TokenKit accepts only compact JWS, so a valid
                    // one is a failure and an invalid one is counted as refused.
                    jsonSerialized += 1
                    if expected { failures.append("tcId \(id): valid JSON-serialized JWS; compact only is supported") }
                    continue
                }
                compact += 1
                var reason = ""
                var code: TokenError.Code? = nil
                do {
                    let keyText = try Fixtures.jsonText(keyObject ?? [:])
                    let verifier = try JWTVerifier(key: JWTKey(jwk: keyText), engine: engine)
                    _ = try verifier.verifySignature(jws)
                } catch {
                    reason = "\(error)"
                    code = (error as? TokenError)?.code
                }
                if let deviation = Self.jwsDeviations[id] {
                    if code != deviation.0 || reason.isEmpty == expected {
                        failures.append("tcId \(id): documented deviation no longer holds (got \(reason.isEmpty ? "accepted" : reason))")
                    }
                    continue
                }
                if reason.isEmpty != expected { failures.append("tcId \(id) (\(test["comment"] ?? "")): expected \(expected), got \(reason.isEmpty ? "accepted" : reason)") }
            }
        }
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
        #expect(compact > 350)
        #expect(compact + jsonSerialized == document["numberOfTests"] as? Int, "every case in the file was run")
    }

    /// json_web_key_test.json: a JWK Set (public, or private for HMAC) and a token.
    @Test(arguments: JWTVerifier.Engine.allCases)
    func jsonWebKey(engine: JWTVerifier.Engine) throws {
        let document = try Fixtures.json("wycheproof/json_web_key_test.json")
        var failures: [String] = []
        var cases = 0
        for case let group as [String: Any] in document["testGroups"] as? [Any] ?? [] {
            let setObject = group["public"] ?? group["private"]
            for case let test as [String: Any] in group["tests"] as? [Any] ?? [] {
                cases += 1
                let id = test["tcId"] as? Int ?? -1
                let expected = test["result"] as? String == "valid"
                var reason = ""
                do {
                    let set = try JWKSet(json: Fixtures.jsonText(setObject ?? [:]))
                    let verifier = try JWTVerifier(keySet: set, engine: engine)
                    _ = try verifier.verifySignature(test["jws"] as? String ?? "")
                } catch {
                    reason = "\(error)"
                }
                if reason.isEmpty != expected { failures.append("tcId \(id) (\(test["comment"] ?? "")): expected \(expected), got \(reason.isEmpty ? "accepted" : reason)") }
            }
        }
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
        // A fixture that stops parsing would otherwise run zero cases and pass.
        #expect(cases > 20)
        #expect(cases == document["numberOfTests"] as? Int, "every case in the file was run")
    }
}
