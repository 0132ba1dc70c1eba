import Foundation
import PeerCA
import TokenKit
import X509

/// What the issuance rows issue: a P-256 CA with an intermediate that signs (as `tokentool ca
/// init` makes by default), 1000 distinct device CSRs (P-256, PEM as a device sends them) and
/// 1000 distinct HS256 tokens (own `sub` and `jti` each), all made before timing.
struct IssuanceWorkload: Sendable {
    static let count = 1000
    static let issuer = "https://idp.bench.example/"
    let material: CertificateAuthority.Material
    let policy: IssuancePolicy
    let verifier: JWTVerifier
    /// The tokens, compact JWS.
    let tokens: [String]
    /// The CSRs, PEM bytes.
    let csrs: [[UInt8]]

    init() throws {
        material = try CertificateAuthority.create(name: "tokenbench", algorithm: .p256, withIntermediate: true)
        policy = try IssuancePolicy(appID: "bench", provider: "bench")
        let key = try JWTKey.generate(.hmac(.hs256))
        verifier = try JWTVerifier(key: key, policy: ClaimsPolicy(issuers: [IssuanceWorkload.issuer], requiredClaims: ["sub", "jti", "iat"]))
        let signer = try JWTSigner(key: key)
        let now = Int(Date().timeIntervalSince1970)
        tokens = try (0..<IssuanceWorkload.count).map { i in
            try signer.sign(claims: [
                "iss": .string(IssuanceWorkload.issuer), "sub": .string("device-\(i)"), "name": .string("Device \(i)"),
                "iat": .integer(now), "exp": .integer(now + 86_400), "jti": .string(UUID().uuidString.lowercased()),
            ])
        }
        csrs = try (0..<IssuanceWorkload.count).map { _ in Array(try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate()).utf8) }
    }

    /// Everything a real issuance does for request `i`: verify the token (HS256 and claims), parse
    /// and check the CSR (proof of possession), then sign and record the certificate.
    @inline(__always)
    func issue(_ i: Int, with ca: PeerCertificateAuthority) async throws -> IssuedCertificate {
        let token = try verifier.verify(tokens[i % IssuanceWorkload.count])
        let csr = try ValidatedCSR(csrs[i % IssuanceWorkload.count])
        return try await ca.issue(token: token, csr: csr)
    }

    /// Refuses to time a path that does not do what it claims: an issued certificate must be
    /// signed by the issuing CA and certify the CSR's key, and a CSR with a flipped signature bit
    /// and a token with a flipped signature bit must be refused.
    func check(with ca: PeerCertificateAuthority) async throws {
        let issued = try await issue(7, with: ca)
        let issuerCertificate = ca.authority.issuer
        let leaf = try issued.certificate
        guard issuerCertificate.publicKey.isValidSignature(leaf.signature, for: leaf) else {
            throw BenchError("issuance check: the certificate's signature does not verify with the issuing CA's key")
        }
        guard leaf.publicKey == (try ValidatedCSR(csrs[7]).publicKey) else {
            throw BenchError("issuance check: the certificate does not certify the CSR's key")
        }
        guard try await ca.ledger.entry(serial: issued.serial) != nil else { throw BenchError("issuance check: the certificate is not in the ledger") }
        var csrDER = try IssuanceWorkload.der(ofPEM: csrs[7])
        csrDER[csrDER.count - 10] ^= 0x01  // inside the signature
        do {
            _ = try ValidatedCSR(csrDER)
            throw BenchError("issuance check: a CSR with a broken signature was accepted")
        } catch let error as PeerCAError where error.code == .badCSRSignature || error.code == .invalidCSR {}
        var parts = tokens[7].split(separator: ".").map(String.init)
        var signature = Base64URL.decode(parts[2]) ?? []
        signature[0] ^= 0x40
        parts[2] = Base64URL.encode(signature)
        if (try? verifier.verify(parts.joined(separator: "."))) != nil { throw BenchError("issuance check: a tampered token was accepted") }
    }

    /// The DER inside a PEM text.
    static func der(ofPEM pem: [UInt8]) throws -> [UInt8] {
        guard let block = try PEM.parse(String(decoding: pem, as: UTF8.self)).first else { throw BenchError("no PEM block") }
        return block.der
    }
}

/// The children of a DER SEQUENCE (tag, whole encoding), enough to take a CSR or certificate
/// apart for the OpenSSL limit row.
enum DERWalk {
    struct Element {
        let tag: UInt8
        /// Tag, length and contents.
        let encoded: ArraySlice<UInt8>
        /// Contents only.
        let contents: ArraySlice<UInt8>
    }

    /// The element starting at `start`.
    static func element(_ bytes: ArraySlice<UInt8>, at start: Int) throws -> Element {
        var i = start
        guard i + 2 <= bytes.endIndex else { throw BenchError("DER: truncated") }
        let tag = bytes[i]
        i += 1
        var length = Int(bytes[i])
        i += 1
        if length & 0x80 != 0 {
            let n = length & 0x7f
            guard n >= 1, n <= 4, i + n <= bytes.endIndex else { throw BenchError("DER: bad length") }
            length = 0
            for _ in 0..<n {
                length = length << 8 | Int(bytes[i])
                i += 1
            }
        }
        guard i + length <= bytes.endIndex else { throw BenchError("DER: truncated") }
        return Element(tag: tag, encoded: bytes[start..<(i + length)], contents: bytes[i..<(i + length)])
    }

    /// The elements inside a constructed element's contents.
    static func children(_ contents: ArraySlice<UInt8>) throws -> [Element] {
        var out: [Element] = []
        var i = contents.startIndex
        while i < contents.endIndex {
            let e = try element(contents, at: i)
            out.append(e)
            i = e.encoded.endIndex
        }
        return out
    }

    /// A SIGNED{…} structure (certificate, CSR): the signed part, and the signature's bytes.
    static func signed(_ der: [UInt8]) throws -> (tbs: [UInt8], signature: [UInt8], top: [Element]) {
        let outer = try element(der[...], at: 0)
        let parts = try children(outer.contents)
        guard parts.count == 3, parts[2].tag == 0x03, parts[2].contents.first == 0 else { throw BenchError("DER: not a signed structure") }
        return (Array(parts[0].encoded), Array(parts[2].contents.dropFirst()), parts)
    }
}
