import Crypto
import Foundation
import SwiftASN1
import X509

/// The DER of a peer certificate, written directly: what swift-certificates' generic builders
/// (`DistinguishedName`, `Certificate.Extensions`, `TBSCertificate`) produce for a leaf, byte for
/// byte — every CA checks a sample leaf when it is loaded (``sampleMismatch(authority:issuerKeyIdentifier:)``),
/// and the tests compare the two over random identities and keys — at a fraction of
/// their cost — no intermediate objects, the key's SubjectPublicKeyInfo copied from the CSR
/// instead of encoded again (for an EC key, a field inversion), and no parse of the result.
///
/// The parts that do not change between leaves — the issuer's name, the constant extensions
/// (basic constraints, key usage, extended key usage) and the authority key identifier — are
/// encoded once, by swift-certificates, when the CA starts; the signature algorithm's identifier
/// and the signed outer SEQUENCE come from `ASN1Support`, as for CRLs and OCSP responses.
struct LeafTemplate: Sendable {
    /// `AlgorithmIdentifier` of the issuing key's signature algorithm.
    let signatureAlgorithm: [UInt8]
    /// The issuer's `Name`: the issuing certificate's subject.
    let issuerName: [UInt8]
    /// The extensions before the subject key identifier, encoded: basicConstraints (critical,
    /// CA:FALSE), keyUsage (critical, digitalSignature), extKeyUsage (serverAuth, clientAuth).
    let leadingExtensions: [UInt8]
    /// The authorityKeyIdentifier extension, encoded.
    let authorityKeyIdentifier: [UInt8]

    init(authority: CertificateAuthority, issuerKeyIdentifier: ArraySlice<UInt8>) throws {
        signatureAlgorithm = try ASN1Support.algorithmIdentifier(authority.signatureAlgorithm)
        var name = DER.Serializer()
        try name.serialize(authority.issuer.subject)
        issuerName = name.serializedBytes
        var leading = DER.Serializer()
        for element in [
            try Certificate.Extension(BasicConstraints.notCertificateAuthority, critical: true),
            try Certificate.Extension(KeyUsage(digitalSignature: true), critical: true),
            try Certificate.Extension(try ExtendedKeyUsage([.serverAuth, .clientAuth]), critical: false),
        ] {
            try leading.serialize(element)
        }
        leadingExtensions = leading.serializedBytes
        var aki = DER.Serializer()
        try aki.serialize(try Certificate.Extension(AuthorityKeyIdentifier(keyIdentifier: issuerKeyIdentifier), critical: false))
        authorityKeyIdentifier = aki.serializedBytes
    }

    /// Why a leaf cannot be written.
    struct Unencodable: Error, CustomStringConvertible {
        let description: String
    }

    /// The TBSCertificate of a leaf (RFC 5280 §4.1): v3, `serial` (a positive INTEGER's
    /// content octets), the validity in whole seconds, subject `CN=commonName` (UTF8String), the
    /// key `subjectPublicKeyInfo` (DER), then the extensions: the leading ones, the subject key
    /// identifier `keyIdentifier`, the authority key identifier, and one URI SAN `uri` (IA5String).
    func tbsCertificate(
        serial: [UInt8], notBefore: Date, notAfter: Date, commonName: String, subjectPublicKeyInfo: [UInt8], keyIdentifier: [UInt8],
        uri: String
    ) throws(Unencodable) -> [UInt8] {
        guard uri.utf8.allSatisfy({ $0 < 0x80 }) else { throw Unencodable(description: "the URI SAN is not ASCII (IA5String)") }
        guard let first = serial.first, first != 0, first < 0x80 else { throw Unencodable(description: "the serial is not a minimal positive INTEGER") }

        var validity: [UInt8] = []
        validity.reserveCapacity(34)
        try DERWriter.appendTime(notBefore, to: &validity)
        try DERWriter.appendTime(notAfter, to: &validity)

        var subject: [UInt8] = [0x06, 0x03, 0x55, 0x04, 0x03]  // id-at-commonName
        DERWriter.append(tag: 0x0c, content: commonName.utf8, to: &subject)  // UTF8String
        subject = DERWriter.wrap(tag: 0x30, subject)  // AttributeTypeAndValue
        subject = DERWriter.wrap(tag: 0x31, subject)  // RelativeDistinguishedName (SET OF)
        subject = DERWriter.wrap(tag: 0x30, subject)  // RDNSequence

        var san: [UInt8] = []
        DERWriter.append(tag: 0x86, content: uri.utf8, to: &san)  // [6] IMPLICIT IA5String
        san = DERWriter.wrap(tag: 0x30, san)  // GeneralNames
        var sanExtension: [UInt8] = [0x06, 0x03, 0x55, 0x1d, 0x11]  // id-ce-subjectAltName
        DERWriter.append(tag: 0x04, content: san, to: &sanExtension)

        var skiExtension: [UInt8] = [0x06, 0x03, 0x55, 0x1d, 0x0e]  // id-ce-subjectKeyIdentifier
        var ski: [UInt8] = []
        DERWriter.append(tag: 0x04, content: keyIdentifier, to: &ski)
        DERWriter.append(tag: 0x04, content: ski, to: &skiExtension)

        var extensions: [UInt8] = []
        extensions.reserveCapacity(leadingExtensions.count + authorityKeyIdentifier.count + skiExtension.count + sanExtension.count + 12)
        extensions += leadingExtensions
        DERWriter.append(tag: 0x30, content: skiExtension, to: &extensions)
        extensions += authorityKeyIdentifier
        DERWriter.append(tag: 0x30, content: sanExtension, to: &extensions)

        var body: [UInt8] = [0xa0, 0x03, 0x02, 0x01, 0x02]  // [0] EXPLICIT version v3
        body.reserveCapacity(
            16 + serial.count + signatureAlgorithm.count + issuerName.count + validity.count + subject.count + subjectPublicKeyInfo.count
                + extensions.count)
        DERWriter.append(tag: 0x02, content: serial, to: &body)
        body += signatureAlgorithm
        body += issuerName
        DERWriter.append(tag: 0x30, content: validity, to: &body)
        body += subject
        body += subjectPublicKeyInfo
        DERWriter.append(tag: 0xa3, content: DERWriter.wrap(tag: 0x30, extensions), to: &body)  // [3] EXPLICIT Extensions
        return DERWriter.wrap(tag: 0x30, body)
    }
}

extension LeafTemplate {
    /// A template of given parts (tests give a wrong one, to see the check refuse it).
    init(signatureAlgorithm: [UInt8], issuerName: [UInt8], leadingExtensions: [UInt8], authorityKeyIdentifier: [UInt8]) {
        self.signatureAlgorithm = signatureAlgorithm
        self.issuerName = issuerName
        self.leadingExtensions = leadingExtensions
        self.authorityKeyIdentifier = authorityKeyIdentifier
    }

    /// The TBSCertificate swift-certificates' generic builder writes for the leaf that
    /// ``tbsCertificate(serial:notBefore:notAfter:commonName:subjectPublicKeyInfo:keyIdentifier:uri:)``
    /// writes for the same values: the reference the template must equal byte for byte. (It
    /// signs the reference with the issuing key: the signature is thrown away.)
    static func reference(
        authority: CertificateAuthority, issuerKeyIdentifier: ArraySlice<UInt8>, serial: Certificate.SerialNumber, notBefore: Date,
        notAfter: Date, commonName: String, publicKey: Certificate.PublicKey, uri: String
    ) throws -> [UInt8] {
        let extensions = try Certificate.Extensions {
            Critical(BasicConstraints.notCertificateAuthority)
            Critical(KeyUsage(digitalSignature: true))
            try ExtendedKeyUsage([.serverAuth, .clientAuth])
            SubjectKeyIdentifier(hash: publicKey)
            AuthorityKeyIdentifier(keyIdentifier: issuerKeyIdentifier)
            SubjectAlternativeNames([.uniformResourceIdentifier(uri)])
        }
        let certificate = try Certificate(
            version: .v3, serialNumber: serial, publicKey: publicKey, notValidBefore: notBefore, notValidAfter: notAfter,
            issuer: authority.issuer.subject, subject: try DistinguishedName { CommonName(commonName) },
            signatureAlgorithm: authority.signatureAlgorithm, extensions: extensions, issuerPrivateKey: authority.issuerKey)
        return Array(certificate.tbsCertificateBytes)
    }

    /// The template's TBSCertificate and the builder's (``reference(authority:issuerKeyIdentifier:serial:notBefore:notAfter:commonName:publicKey:uri:)``)
    /// for one leaf: nil when they are the same bytes, else what differs.
    func mismatch(
        authority: CertificateAuthority, issuerKeyIdentifier: ArraySlice<UInt8>, serial: Certificate.SerialNumber, notBefore: Date,
        notAfter: Date, commonName: String, publicKey: Certificate.PublicKey, uri: String
    ) -> String? {
        do {
            var spki = DER.Serializer()
            try spki.serialize(publicKey)
            let written = try tbsCertificate(
                serial: Array(serial.bytes), notBefore: notBefore, notAfter: notAfter, commonName: commonName,
                subjectPublicKeyInfo: spki.serializedBytes, keyIdentifier: Array(SubjectKeyIdentifier(hash: publicKey).keyIdentifier), uri: uri)
            let expected = try Self.reference(
                authority: authority, issuerKeyIdentifier: issuerKeyIdentifier, serial: serial, notBefore: notBefore, notAfter: notAfter,
                commonName: commonName, publicKey: publicKey, uri: uri)
            guard written != expected else { return nil }
            let at = zip(written, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? min(written.count, expected.count)
            return "the leaf template writes \(written.count) bytes, swift-certificates \(expected.count); they differ from byte \(at)"
        } catch {
            return "the sample leaf cannot be written (\(error))"
        }
    }

    /// The check a CA runs when it is loaded: a sample leaf — a new P-256 key, a short name and a
    /// SPIFFE ID long enough for the long DER length forms — written by the template and by
    /// swift-certificates' builder, compared byte for byte. nil when they agree.
    func sampleMismatch(authority: CertificateAuthority, issuerKeyIdentifier: ArraySlice<UInt8>) -> String? {
        let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
        return mismatch(
            authority: authority, issuerKeyIdentifier: issuerKeyIdentifier, serial: SerialNumbers.random(now: now), notBefore: now,
            notAfter: now.addingTimeInterval(3600), commonName: "leaf-template-check",
            publicKey: Certificate.PublicKey(P256.Signing.PrivateKey().publicKey),
            uri: "spiffe://leaf-template.check/" + String(repeating: "sample/", count: 20))
    }
}
