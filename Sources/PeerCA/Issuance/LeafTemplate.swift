import Foundation
import SwiftASN1
import X509

/// The DER of a peer certificate, written directly: what swift-certificates' generic builders
/// (`DistinguishedName`, `Certificate.Extensions`, `TBSCertificate`) produce for a leaf, byte for
/// byte (`theLeafTemplateWritesWhatTheGenericBuilderWrites` compares the two), at a fraction of
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
