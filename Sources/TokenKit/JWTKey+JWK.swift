internal import COpenSSL
import Foundation

extension JWTKey {
    /// Creates a key from a JSON Web Key (RFC 7517, RFC 7518 §6, RFC 8037).
    ///
    /// Supported: `kty` `RSA`, `EC` (P-256/384/521), `OKP` (Ed25519) and `oct`. When the JWK has an
    /// `alg`, the key is bound to exactly that algorithm; otherwise to the default for its type.
    /// `use` and `key_ops` are kept: a key with `use` other than `sig`, or `key_ops` without
    /// `verify`, is refused by verifiers.
    public init(jwk text: String) throws(TokenError) {
        let value = try JSONValue.parse(text)
        guard case .object(let members) = value else { throw TokenError(.invalidKey, "the JWK is not a JSON object") }
        try self.init(jwk: members)
    }

    /// Creates a key from the members of a parsed JWK object.
    public init(jwk: [String: JSONValue]) throws(TokenError) {
        let reader = JWKReader(members: jwk)
        guard let kty = try reader.string("kty") else { throw TokenError(.invalidKey, "the JWK has no \"kty\"") }
        let kid = try reader.string("kid")
        let use = try reader.string("use")
        let keyOps = try reader.stringArray("key_ops")
        var algorithms: Set<JWTAlgorithm>? = nil
        if let alg = try reader.string("alg") {
            guard let algorithm = JWTAlgorithm(rawValue: alg) else {
                throw TokenError(.unsupportedAlgorithm, "the JWK's alg \"\(JSONParser.printable(alg))\" is not a JWS algorithm TokenKit supports")
            }
            algorithms = [algorithm]
        }
        switch kty {
        case "RSA":
            let n = try reader.bytes("n", required: true) ?? []
            let e = try reader.bytes("e", required: true) ?? []
            var privateParts: [(StaticString, [UInt8])] = []
            if let d = try reader.bytes("d") {
                privateParts.append(("d", d))
                let crt: [(String, StaticString)] = [("p", "rsa-factor1"), ("q", "rsa-factor2"), ("dp", "rsa-exponent1"), ("dq", "rsa-exponent2"), ("qi", "rsa-coefficient1")]
                let values = try crt.map { name, param throws(TokenError) in (param, try reader.bytes(name)) }
                let present = values.filter { $0.1 != nil }.count
                if present == crt.count {
                    privateParts += values.compactMap { param, v in v.map { (param, $0) } }
                } else if present != 0 {
                    throw TokenError(.invalidKey, "the RSA JWK has some but not all of p, q, dp, dq, qi")
                }
                if jwk["oth"] != nil { throw TokenError(.unsupportedKey, "multi-prime RSA keys (\"oth\") are not supported") }
            }
            if n.first == 0 { throw TokenError(.invalidKey, "the RSA modulus \"n\" has a leading zero byte") }
            let pkey = try KeyCodec.rsa(n: n, e: e, privateParts: privateParts)
            try self.init(pkey: pkey, isPrivate: !privateParts.isEmpty, algorithms: algorithms, kid: kid, use: use, keyOperations: keyOps)
        case "EC":
            guard let crv = try reader.string("crv") else { throw TokenError(.invalidKey, "the EC JWK has no \"crv\"") }
            guard let curve = ECCurve(rawValue: crv) else {
                throw TokenError(.unsupportedKey, "EC curve \"\(JSONParser.printable(crv))\" is not supported (P-256, P-384, P-521 are)")
            }
            let length = curve.coordinateLength
            let x = try reader.bytes("x", required: true, length: length) ?? []
            let y = try reader.bytes("y", required: true, length: length) ?? []
            let d = try reader.bytes("d", length: length)
            let pkey = try KeyCodec.ec(curve: curve, x: x, y: y, d: d)
            try self.init(pkey: pkey, isPrivate: d != nil, algorithms: algorithms, kid: kid, use: use, keyOperations: keyOps)
        case "OKP":
            guard let crv = try reader.string("crv") else { throw TokenError(.invalidKey, "the OKP JWK has no \"crv\"") }
            guard crv == "Ed25519" else {
                throw TokenError(.unsupportedKey, "OKP curve \"\(JSONParser.printable(crv))\" is not supported (Ed25519 is)")
            }
            let x = try reader.bytes("x", required: true, length: 32) ?? []
            let d = try reader.bytes("d", length: 32)
            let pkey = try KeyCodec.ed25519(publicKey: x, privateKey: d)
            if d != nil, pkey.rawPublicKey() != x {
                throw TokenError(.invalidKey, "the Ed25519 private key does not match \"x\"")
            }
            try self.init(pkey: pkey, isPrivate: d != nil, algorithms: algorithms, kid: kid, use: use, keyOperations: keyOps)
        case "oct":
            guard let k = try reader.bytes("k") else { throw TokenError(.invalidKey, "the JWK has no \"k\"") }
            if k.isEmpty { throw TokenError(.weakKey, "the HMAC secret \"k\" is empty") }
            try self.init(
                material: .secret(SecretBytes(k)), type: .hmac(bytes: k.count), isPrivate: true,
                algorithms: algorithms, kid: kid, use: use, keyOperations: keyOps)
        default:
            throw TokenError(.unsupportedKey, "JWK kty \"\(JSONParser.printable(kty))\" is not supported")
        }
    }

    /// The key as a JWK object. Private members (`d`, …, `k`) only when `includePrivate` is true.
    public func jwk(includePrivate: Bool = false) throws(TokenError) -> [String: JSONValue] {
        var out = try publicJWKMembers(includeSecret: includePrivate)
        if includePrivate, isPrivate, case .pkey(let pkey) = material {
            switch type {
            case .rsa:
                let names = [("d", "d"), ("p", "rsa-factor1"), ("q", "rsa-factor2"), ("dp", "rsa-exponent1"), ("dq", "rsa-exponent2"), ("qi", "rsa-coefficient1")]
                for (member, param) in names {
                    guard let v = pkey.bigNumber(param) else { continue }
                    out[member] = .string(Base64URL.encode(v))
                }
            case .ec(let curve):
                if let d = pkey.bigNumber("priv", length: curve.coordinateLength) { out["d"] = .string(Base64URL.encode(d)) }
            case .ed25519:
                if let d = pkey.rawPrivateKey() { out["d"] = .string(Base64URL.encode(d)) }
            case .hmac:
                break
            }
        }
        if let kid { out["kid"] = .string(kid) }
        if let use { out["use"] = .string(use) }
        if let keyOperations { out["key_ops"] = .array(keyOperations.map { .string($0) }) }
        if algorithms.count == 1, let alg = algorithms.first { out["alg"] = .string(alg.rawValue) }
        return out
    }

    /// The JWK as compact JSON text (members sorted).
    public func jwkText(includePrivate: Bool = false) throws(TokenError) -> String {
        JSONValue.object(try jwk(includePrivate: includePrivate)).compactText
    }

    /// The members RFC 7638 requires, plus `k` for secrets when asked.
    private func publicJWKMembers(includeSecret: Bool) throws(TokenError) -> [String: JSONValue] {
        switch material {
        case .secret(let secret):
            guard includeSecret else {
                throw TokenError(.privateKeyRequired, "an HMAC key has no public form; export it with its secret")
            }
            return ["kty": .string("oct"), "k": .string(Base64URL.encode(secret.bytes))]
        case .pkey(let pkey):
            switch type {
            case .rsa:
                guard let n = pkey.bigNumber("n"), let e = pkey.bigNumber("e") else {
                    throw TokenError(.cryptoFailure, "cannot read the RSA key's components")
                }
                return ["kty": .string("RSA"), "n": .string(Base64URL.encode(n)), "e": .string(Base64URL.encode(e))]
            case .ec(let curve):
                guard let x = pkey.bigNumber("qx", length: curve.coordinateLength),
                    let y = pkey.bigNumber("qy", length: curve.coordinateLength)
                else { throw TokenError(.cryptoFailure, "cannot read the EC key's coordinates") }
                return ["kty": .string("EC"), "crv": .string(curve.rawValue), "x": .string(Base64URL.encode(x)), "y": .string(Base64URL.encode(y))]
            case .ed25519:
                guard let x = pkey.rawPublicKey() else { throw TokenError(.cryptoFailure, "cannot read the Ed25519 key") }
                return ["kty": .string("OKP"), "crv": .string("Ed25519"), "x": .string(Base64URL.encode(x))]
            case .hmac:
                throw TokenError(.cryptoFailure, "inconsistent key")
            }
        }
    }

    /// The RFC 7638 JWK thumbprint: SHA-256 over the required members in lexicographic order,
    /// base64url-encoded. For HMAC keys it is computed over the secret (`k`) and so is itself
    /// sensitive; do not publish it.
    public func thumbprint() throws(TokenError) -> String {
        let members = try publicJWKMembers(includeSecret: true)
        let canonical = Array(JSONValue.object(members).compactText.utf8)
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let ok = canonical.withUnsafeBufferPointer { input in
            EVP_Digest(input.baseAddress, input.count, &digest, &length, EVP_sha256(), nil)
        }
        guard ok == 1 else { throw OpenSSLError.take(.cryptoFailure, "SHA-256 failed") }
        return Base64URL.encode(digest)
    }
}

/// Typed access to JWK members, with errors that name the member.
private struct JWKReader {
    let members: [String: JSONValue]

    func string(_ name: String) throws(TokenError) -> String? {
        guard let value = members[name] else { return nil }
        guard case .string(let s) = value else { throw TokenError(.invalidKey, "JWK member \"\(name)\" must be a string") }
        return s
    }

    func stringArray(_ name: String) throws(TokenError) -> [String]? {
        guard let value = members[name] else { return nil }
        guard case .array(let items) = value else { throw TokenError(.invalidKey, "JWK member \"\(name)\" must be an array of strings") }
        var out: [String] = []
        for item in items {
            guard case .string(let s) = item else { throw TokenError(.invalidKey, "JWK member \"\(name)\" must be an array of strings") }
            if out.contains(s) { throw TokenError(.invalidKey, "JWK member \"\(name)\" repeats \"\(JSONParser.printable(s))\"") }
            out.append(s)
        }
        return out
    }

    func bytes(_ name: String, required: Bool = false, length: Int? = nil) throws(TokenError) -> [UInt8]? {
        guard let text = try string(name) else {
            if required { throw TokenError(.invalidKey, "the JWK has no \"\(name)\"") }
            return nil
        }
        guard let bytes = Base64URL.decode(text) else {
            throw TokenError(.invalidKey, "JWK member \"\(name)\" is not strict base64url")
        }
        if let length, bytes.count != length {
            throw TokenError(.invalidKey, "JWK member \"\(name)\" must be \(length) bytes; it is \(bytes.count)")
        }
        if required, bytes.isEmpty { throw TokenError(.invalidKey, "JWK member \"\(name)\" is empty") }
        return bytes
    }
}
