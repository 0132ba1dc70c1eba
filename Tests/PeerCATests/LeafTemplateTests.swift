import Crypto
import _CryptoExtras
import Foundation
@testable import PeerCA
import SwiftASN1
import TestSupport
import Testing
import TokenKit
import X509

/// The leaf's DER is written by hand (LeafTemplate): it must be what swift-certificates' generic
/// builders write for the same certificate, byte for byte.
@Suite("PeerCA leaf template")
struct LeafTemplateTests {
    /// The leaf as swift-certificates builds it (how PeerCertificateAuthority made every leaf
    /// before the template), from the issued leaf's serial, validity and key.
    static func reference(for leaf: Certificate, identity: PeerIdentity, authority: CertificateAuthority) throws -> Certificate {
        let issuerSKI = try #require(try authority.issuer.extensions.subjectKeyIdentifier?.keyIdentifier)
        let extensions = try Certificate.Extensions {
            Critical(BasicConstraints.notCertificateAuthority)
            Critical(KeyUsage(digitalSignature: true))
            try ExtendedKeyUsage([.serverAuth, .clientAuth])
            SubjectKeyIdentifier(hash: leaf.publicKey)
            AuthorityKeyIdentifier(keyIdentifier: issuerSKI)
            SubjectAlternativeNames([.uniformResourceIdentifier(identity.spiffeID)])
        }
        return try Certificate(
            version: .v3, serialNumber: leaf.serialNumber, publicKey: leaf.publicKey, notValidBefore: leaf.notValidBefore,
            notValidAfter: leaf.notValidAfter, issuer: authority.issuer.subject, subject: try DistinguishedName { CommonName(identity.accountUID) },
            signatureAlgorithm: authority.signatureAlgorithm, extensions: extensions, issuerPrivateKey: authority.issuerKey)
    }

    @Test(arguments: [CAKeyAlgorithm.p256, .p384, .ed25519])
    func theLeafTemplateWritesWhatTheGenericBuilderWrites(algorithm: CAKeyAlgorithm) async throws {
        let openssl = try OpenSSL()
        let now = Date().timeIntervalSince1970.rounded(.down)
        let test = try TestCA(algorithm: algorithm, clock: .fixed(now))
        let authority = test.material.authority
        // Short and long names (a CN and SAN over 127 bytes take long-form DER lengths), and every key type.
        // A CN of 64 bytes (the most a CN may have) and a SPIFFE ID over 127 bytes (long-form DER lengths).
        let subjects = ["user-42", String(repeating: "account-", count: 8), "ünïcødé-名前"]
        let issuers = ["https://idp.example/", "https://" + String(repeating: "idp.", count: 30) + "example/", "https://idp.example/"]
        for (index, keyType) in ["p256", "p384", "ed25519", "rsa2048"].enumerated() {
            let csr = try ValidatedCSR(try openssl.csr(keyType, name: "device-\(keyType)"))
            let token = try Tokens.verified(
                Tokens.claims(sub: subjects[index % subjects.count], iss: issuers[index % issuers.count], now: now), now: now)
            let issued = try await test.ca.issue(token: token, csr: csr)
            let leaf = try issued.certificate
            let reference = try Self.reference(for: leaf, identity: issued.identity, authority: authority)
            #expect(leaf.tbsCertificateBytes == reference.tbsCertificateBytes, "\(keyType), CA \(algorithm)")
            #expect(leaf.signatureAlgorithm == reference.signatureAlgorithm)
            #expect(authority.issuer.publicKey.isValidSignature(leaf.signature, for: leaf))
            #expect(leaf.publicKey == (try csr.publicKey))
            // What was recorded is what was returned.
            #expect(try await test.ca.ledger.entry(serial: issued.serial)?.der == issued.derBytes)
            var serializer = DER.Serializer()
            try serializer.serialize(leaf)
            #expect(issued.derBytes == serializer.serializedBytes)
            #expect(issued.notBefore == leaf.notValidBefore && issued.notAfter == leaf.notValidAfter)
            if index == 1 { #expect(issued.identity.spiffeID.utf8.count > 127 && issued.identity.accountUID.utf8.count == 64) }
        }
    }

    /// A property test: for random identities — account names of 1 to 64 bytes (ASCII and not),
    /// SPIFFE IDs of 20 to 400 bytes, so that the SAN, the extensions and the whole TBSCertificate
    /// cross DER's 128- and 256-byte length forms — random serials and validity, every key type a
    /// device may present (P-256, P-384, Ed25519, RSA 2048 and 3072) and every CA key type, the
    /// template writes what swift-certificates' builder writes, byte for byte.
    @Test(arguments: [CAKeyAlgorithm.p256, .p384, .ed25519])
    func theTemplateEqualsTheBuilderOverRandomLeaves(algorithm: CAKeyAlgorithm) throws {
        let material = try CertificateAuthority.create(name: "Property", algorithm: algorithm, withIntermediate: algorithm != .ed25519)
        let authority = material.authority
        let aki = try #require(try authority.issuer.extensions.subjectKeyIdentifier?.keyIdentifier)
        let template = try LeafTemplate(authority: authority, issuerKeyIdentifier: aki)
        let keys: [Certificate.PublicKey] = [
            Certificate.PublicKey(P256.Signing.PrivateKey().publicKey), Certificate.PublicKey(P384.Signing.PrivateKey().publicKey),
            Certificate.PublicKey(Curve25519.Signing.PrivateKey().publicKey),
            Certificate.PublicKey(try _RSA.Signing.PrivateKey(keySize: .bits2048).publicKey),
            Certificate.PublicKey(try _RSA.Signing.PrivateKey(keySize: .bits3072).publicKey),
        ]
        var generator = SystemRandomNumberGenerator()
        let ascii = Array("abcdefghijklmnopqrstuvwxyz0123456789-._")
        let wide: [Character] = ["é", "名", "ü", "ß", "😀", "a", "-"]
        var crossed = Set<Int>()
        for round in 0..<120 {
            var name = ""
            let nameBytes = Int.random(in: 1...64, using: &generator)
            while true {
                let next = round % 2 == 0 ? ascii.randomElement(using: &generator)! : wide.randomElement(using: &generator)!
                if name.utf8.count + String(next).utf8.count > nameBytes { break }
                name.append(next)
            }
            if name.isEmpty { name = "x" }
            let uriLength = Int.random(in: 20...400, using: &generator)
            let uri = "spiffe://peers.example/" + String((0..<max(1, uriLength - 23)).map { _ in ascii.randomElement(using: &generator)! })
            crossed.insert(uri.utf8.count < 120 ? 0 : uri.utf8.count < 250 ? 1 : 2)
            let start = Date(timeIntervalSince1970: Double(Int64.random(in: 0...4_102_444_800, using: &generator)))
            let key = keys[round % keys.count]
            let problem = template.mismatch(
                authority: authority, issuerKeyIdentifier: aki, serial: SerialNumbers.random(now: start), notBefore: start,
                notAfter: start.addingTimeInterval(Double(Int.random(in: 1...90_000_000, using: &generator))), commonName: name, publicKey: key,
                uri: uri)
            #expect(problem == nil, "CA \(algorithm), name \(name.debugDescription), URI of \(uri.utf8.count) bytes: \(problem ?? "")")
        }
        #expect(crossed == [0, 1, 2], "short, middle and long SANs were all drawn")
    }

    /// The check a CA runs when it is loaded passes for a sound template, and refuses one that
    /// writes anything else (here one extension changed): issuance then fails, saying why, rather
    /// than hand out a leaf swift-certificates would not have written.
    @Test func theLoadCheckRefusesATemplateThatDiffers() async throws {
        let test = try TestCA()
        #expect(test.ca.templateProblem == nil)
        let authority = test.material.authority
        let aki = try #require(try authority.issuer.extensions.subjectKeyIdentifier?.keyIdentifier)
        let sound = try LeafTemplate(authority: authority, issuerKeyIdentifier: aki)
        #expect(sound.sampleMismatch(authority: authority, issuerKeyIdentifier: aki) == nil)
        var serializer = DER.Serializer()
        try serializer.serialize(try Certificate.Extension(KeyUsage(digitalSignature: true, keyEncipherment: true), critical: true))
        let changed = LeafTemplate(
            signatureAlgorithm: sound.signatureAlgorithm, issuerName: sound.issuerName,
            leadingExtensions: Array(sound.leadingExtensions.prefix(12)) + serializer.serializedBytes, authorityKeyIdentifier: sound.authorityKeyIdentifier)
        let problem = changed.sampleMismatch(authority: authority, issuerKeyIdentifier: aki)
        #expect(problem?.contains("differ from byte") == true, "\(problem ?? "no mismatch found")")
    }

    /// The CSR's own SubjectPublicKeyInfo bytes stand in for encoding its key only when they are
    /// that encoding (EC and Ed25519; RSA keys are encoded again).
    @Test func theCertifiedKeyIsTheCanonicalEncodingOfTheCSRKey() throws {
        let openssl = try OpenSSL()
        func encoded(_ key: Certificate.PublicKey) throws -> [UInt8] {
            var serializer = DER.Serializer()
            try serializer.serialize(key)
            return serializer.serializedBytes
        }
        for keyType in ["p256", "p384", "ed25519", "rsa2048"] {
            let csr = try ValidatedCSR(try openssl.csr(keyType, name: "canonical-\(keyType)"))
            #expect(csr.subjectPublicKeyInfo == (try encoded(csr.publicKey)), "\(keyType)")
            let der = try IssuanceTestsSupport.der(ofCSR: try openssl.read("canonical-\(keyType).csr"))
            let fast = ValidatedCSR.canonicalSubjectPublicKeyInfo(ofRequest: der, kind: csr.keyKind)
            #expect((fast != nil) == (keyType != "rsa2048"), "\(keyType): the CSR's bytes are used for EC and Ed25519 keys only")
        }
        // swift-crypto takes no compressed EC point: refused, and said so (it used to be called a short RSA key).
        try openssl.must(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "plain.key"])
        try openssl.must(["ec", "-in", "plain.key", "-conv_form", "compressed", "-out", "compressed.key"])
        try openssl.must(["req", "-new", "-key", "compressed.key", "-subj", "/CN=x", "-outform", "DER", "-out", "compressed.csr"])
        let compressed = try openssl.read("compressed.csr")
        #expect(ValidatedCSR.hasECKey(request: compressed))
        let refused = #expect(throws: PeerCAError.self) { _ = try ValidatedCSR(compressed) }
        #expect(refused?.code == .unsupportedKey)
        #expect(refused?.message.contains("compressed points are not accepted") == true, "\(refused?.message ?? "")")
        let short = #expect(throws: PeerCAError.self) { _ = try ValidatedCSR(try openssl.csr("rsa1024", name: "short")) }
        #expect(short?.message.contains("RSA key is shorter than 2048 bits") == true)
    }

    /// Validity times (leaves and CRLs): UTCTime through 2049, GeneralizedTime from 2050 and before
    /// 1950, exactly as a Calendar-based encoder writes them (from 1900: Foundation's Gregorian
    /// calendar turns Julian before 1582, the template's is proleptic, as ISO 8601's).
    @Test func timesAreEncodedAsRFC5280Says() throws {
        var dates: [Double] = [
            0, -1, 951_782_400 /* 2000-02-29 */, -631_152_000 /* 1950-01-01 */, -631_152_001, 2_524_607_999 /* 2049-12-31T23:59:59 */,
            2_524_608_000, 4_107_542_400 /* 2100-03-01 */, 253_402_300_799 /* 9999-12-31T23:59:59 */,
        ]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 { dates.append(Double(Int64.random(in: -2_208_988_800...7_258_118_400, using: &generator))) }
        for seconds in dates {
            let date = Date(timeIntervalSince1970: seconds)
            var fast: [UInt8] = []
            try DERWriter.appendTime(date, to: &fast)
            #expect(fast == (try Self.calendarTime(date)), "\(date)")
        }
        var out: [UInt8] = []
        try DERWriter.appendTime(Date(timeIntervalSince1970: -62_135_596_800), to: &out)
        #expect(out == [0x18, 15] + Array("00010101000000Z".utf8))
        #expect(throws: LeafTemplate.Unencodable.self) { try DERWriter.appendTime(Date(timeIntervalSince1970: 253_402_300_800), to: &out) }
        #expect(throws: LeafTemplate.Unencodable.self) { try DERWriter.appendTime(Date(timeIntervalSince1970: -62_167_219_201), to: &out) }
    }

    /// RFC 5280 Time through Foundation's Calendar and SwiftASN1's time types (how CRLs wrote it
    /// before the leaf's writer served them too): the reference.
    static func calendarTime(_ date: Date) throws -> [UInt8] {
        let c = ASN1Support.components(date)
        let year = c.year ?? 1970
        var serializer = DER.Serializer()
        if (1950..<2050).contains(year) {
            try serializer.serialize(
                UTCTime(year: year, month: c.month ?? 1, day: c.day ?? 1, hours: c.hour ?? 0, minutes: c.minute ?? 0, seconds: c.second ?? 0))
        } else {
            try serializer.serialize(ASN1Support.generalizedTime(date))
        }
        return serializer.serializedBytes
    }

    /// A P-256 issuing key signs through swift-crypto directly, its signature written as DER by
    /// `ECDSASignatureDER`: the same bytes as BoringSSL's encoding, leading zeros and top bits included.
    @Test func p256SignaturesAreWrittenAsBoringSSLWritesThem() throws {
        let key = P256.Signing.PrivateKey()
        var raws: [[UInt8]] = (0..<2000).map { i in Array((try? key.signature(for: SHA256.hash(data: [UInt8(i & 0xff), UInt8(i >> 8)])))?.rawRepresentation ?? Data()) }
        let one = [UInt8](repeating: 0, count: 31) + [1], top = [0x80] + [UInt8](repeating: 0x11, count: 31)
        let short = [0, 0, 0x7f] + [UInt8](repeating: 0xee, count: 29), zeroTop = [0, 0x80] + [UInt8](repeating: 0x22, count: 30)
        raws += [one + top, top + one, short + zeroTop, zeroTop + short, top + top]
        for raw in raws {
            #expect(raw.count == 64)
            let reference = try P256.Signing.ECDSASignature(rawRepresentation: raw).derRepresentation
            #expect(ECDSASignatureDER.encode(raw: raw) == Array(reference), "\(raw)")
        }
        // Among the real signatures, some r or s shorter than 32 bytes (each about 1 in 256): the
        // leading-zero case was met by signatures, not only by the crafted values.
        #expect(raws.prefix(2000).contains { $0[0] == 0 || $0[32] == 0 })
        // A P-256 CA takes the direct signer; its leaves verify (the other algorithms: above).
        let p256 = try TestCA(algorithm: .p256).material.authority
        #expect(p256.p256IssuerKey != nil)
        #expect(try TestCA(algorithm: .p384).material.authority.p256IssuerKey == nil)
        let tbs = Array("to be signed".utf8)
        let signature = try P256.Signing.ECDSASignature(derRepresentation: try p256.sign(tbs))
        #expect(try #require(P256.Signing.PublicKey(p256.issuer.publicKey)).isValidSignature(signature, for: SHA256.hash(data: tbs)))
    }

    @Test func derLengthsTakeTheFewestOctets() {
        for (length, expected) in [(0, [0x00]), (127, [0x7f]), (128, [0x81, 0x80]), (255, [0x81, 0xff]), (256, [0x82, 0x01, 0x00]), (65_536, [0x83, 0x01, 0x00, 0x00])] {
            var out: [UInt8] = []
            DERWriter.appendLength(length, to: &out)
            #expect(out == expected.map(UInt8.init), "\(length)")
        }
    }
}

enum IssuanceTestsSupport {
    /// The DER of a CSR file, PEM or DER.
    static func der(ofCSR bytes: [UInt8]) throws -> [UInt8] {
        if bytes.first == 0x30 { return bytes }
        return try #require(try PEM.parse(String(decoding: bytes, as: UTF8.self)).first).der
    }
}
