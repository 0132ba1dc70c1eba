import Foundation
import SwiftASN1
import X509

/// The DER of a peer certificate, written directly: what swift-certificates' generic builders
/// (`DistinguishedName`, `Certificate.Extensions`, `TBSCertificate`) produce for a leaf, byte for
/// byte (`theLeafTemplateWritesWhatTheGenericBuilderWrites` compares the two), at a fraction of
/// their cost — no intermediate objects, the key's SubjectPublicKeyInfo copied from the CSR
/// instead of encoded again (for an EC key, a field inversion), and no parse of the result.
///
/// The parts that do not change between leaves — the signature algorithm, the issuer's name, the
/// constant extensions (basic constraints, key usage, extended key usage) and the authority key
/// identifier — are encoded once, by swift-certificates, when the CA starts.
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
        var algorithm = DER.Serializer()
        try ASN1Support.writeAlgorithm(authority.signatureAlgorithm, into: &algorithm)
        signatureAlgorithm = algorithm.serializedBytes
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

    /// The certificate: `SEQUENCE { tbsCertificate, signatureAlgorithm, signature BIT STRING }`.
    func certificate(tbsCertificate: [UInt8], signature: [UInt8]) -> [UInt8] {
        var body: [UInt8] = []
        body.reserveCapacity(tbsCertificate.count + signatureAlgorithm.count + signature.count + 8)
        body += tbsCertificate
        body += signatureAlgorithm
        var bits: [UInt8] = [0]  // no unused bits
        bits += signature
        DERWriter.append(tag: 0x03, content: bits, to: &body)
        return DERWriter.wrap(tag: 0x30, body)
    }
}

/// Minimal DER writing: definite lengths in the fewest octets, single-octet tags.
enum DERWriter {
    static func appendLength(_ length: Int, to out: inout [UInt8]) {
        if length < 0x80 {
            out.append(UInt8(length))
            return
        }
        let octets = (Int.bitWidth - length.leadingZeroBitCount + 7) / 8
        out.append(0x80 | UInt8(octets))
        for i in stride(from: octets - 1, through: 0, by: -1) { out.append(UInt8(truncatingIfNeeded: length >> (8 * i))) }
    }

    static func append<C: Collection>(tag: UInt8, content: C, to out: inout [UInt8]) where C.Element == UInt8 {
        out.append(tag)
        appendLength(content.count, to: &out)
        out.append(contentsOf: content)
    }

    static func wrap(tag: UInt8, _ content: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(content.count + 6)
        append(tag: tag, content: content, to: &out)
        return out
    }

    /// RFC 5280 §4.1.2.5 Time, whole seconds in UTC: UTCTime (`YYMMDDHHMMSSZ`) for 1950–2049,
    /// GeneralizedTime (`YYYYMMDDHHMMSSZ`) otherwise; years outside 0–9999 cannot be written.
    static func appendTime(_ date: Date, to out: inout [UInt8]) throws(LeafTemplate.Unencodable) {
        let seconds = date.timeIntervalSince1970.rounded(.down)
        // 0000-01-01 and 9999-12-31T23:59:59 relative to 1970.
        guard seconds >= -62_167_219_200, seconds <= 253_402_300_799 else {
            throw LeafTemplate.Unencodable(description: "the date \(date) has no RFC 5280 encoding")
        }
        let total = Int(seconds)
        let days = total >= 0 ? total / 86_400 : (total - 86_399) / 86_400
        let secondOfDay = total - days * 86_400
        let (year, month, day) = civil(daysSince1970: days)
        let utc = (1950..<2050).contains(year)
        out.append(utc ? 0x17 : 0x18)
        out.append(utc ? 13 : 15)
        func two(_ value: Int) {
            out.append(0x30 + UInt8(value / 10))
            out.append(0x30 + UInt8(value % 10))
        }
        if !utc { two(year / 100) }
        two(year % 100)
        two(month)
        two(day)
        two(secondOfDay / 3600)
        two(secondOfDay / 60 % 60)
        two(secondOfDay % 60)
        out.append(0x5a)  // Z
    }

    /// The proleptic Gregorian date `days` after 1970-01-01 (H. Hinnant's civil_from_days).
    static func civil(daysSince1970 days: Int) -> (year: Int, month: Int, day: Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
