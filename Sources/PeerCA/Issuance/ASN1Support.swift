import Foundation
import SwiftASN1
import TokenKit
import X509

/// DER pieces swift-certificates keeps internal: times from `Date`, AlgorithmIdentifier.
enum ASN1Support {
    static func components(_ date: Date) -> DateComponents {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(secondsFromGMT: 0) ?? calendar.timeZone
        return calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
    }

    static func generalizedTime(_ date: Date) throws -> GeneralizedTime {
        let c = components(date)
        return try GeneralizedTime(
            year: c.year ?? 1970, month: c.month ?? 1, day: c.day ?? 1, hours: c.hour ?? 0, minutes: c.minute ?? 0, seconds: c.second ?? 0,
            fractionalSeconds: 0)
    }

    /// RFC 5280 Time: UTCTime for 1950–2049, GeneralizedTime otherwise (the leaves' writer,
    /// ``DERWriter/appendTime(_:to:)``).
    static func writeTime(_ date: Date, into serializer: inout DER.Serializer) throws {
        var bytes: [UInt8] = []
        try DERWriter.appendTime(date, to: &bytes)
        serializer.serializeRawBytes(bytes)
    }

    /// Reads an RFC 5280 Time (UTCTime or GeneralizedTime).
    static func readTime(_ node: ASN1Node) throws -> Date {
        let calendarDate: DateComponents
        if node.identifier == .utcTime {
            let t = try UTCTime(derEncoded: node)
            calendarDate = DateComponents(year: t.year, month: t.month, day: t.day, hour: t.hours, minute: t.minutes, second: t.seconds)
        } else {
            let t = try GeneralizedTime(derEncoded: node)
            calendarDate = DateComponents(year: t.year, month: t.month, day: t.day, hour: t.hours, minute: t.minutes, second: t.seconds)
        }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(secondsFromGMT: 0) ?? calendar.timeZone
        guard let date = calendar.date(from: calendarDate) else { throw ASN1Error.invalidASN1Object(reason: "bad time") }
        return date
    }

    /// `SEQUENCE { tbs, signatureAlgorithm, signature BIT STRING [, [0] certificates] }` signed by
    /// the CA's issuing key: the outer form of certificates, CRLs and BasicOCSPResponses.
    static func signed(_ tbs: [UInt8], by authority: CertificateAuthority, certificates: [Certificate] = []) throws -> [UInt8] {
        let signature = try authority.sign(tbs)
        var body: [UInt8] = []
        body.reserveCapacity(tbs.count + signature.count + 32)
        body += tbs
        body += try algorithmIdentifier(authority.signatureAlgorithm)
        body.append(0x03)  // BIT STRING, no unused bits
        DERWriter.appendLength(signature.count + 1, to: &body)
        body.append(0)
        body += signature
        if !certificates.isEmpty {
            var s = DER.Serializer()
            try s.serialize(explicitlyTaggedWithTagNumber: 0, tagClass: .contextSpecific) { s in try s.serializeSequenceOf(certificates) }
            body += s.serializedBytes
        }
        return DERWriter.wrap(tag: 0x30, body)
    }

    /// Each signature algorithm's AlgorithmIdentifier, encoded once.
    private static let algorithmIdentifiers: [Certificate.SignatureAlgorithm: [UInt8]] = oids.reduce(into: [:]) { encoded, entry in
        var serializer = DER.Serializer()
        guard (try? serializer.appendConstructedNode(identifier: .sequence) { s in
            try s.serialize(entry.value)
            if entry.key.isRSA { try s.serialize(ASN1Null()) }
        }) != nil else { return }
        encoded[entry.key] = serializer.serializedBytes
    }

    /// The AlgorithmIdentifier of `algorithm`, DER.
    static func algorithmIdentifier(_ algorithm: Certificate.SignatureAlgorithm) throws(PeerCAError) -> [UInt8] {
        guard let encoded = algorithmIdentifiers[algorithm] else { throw PeerCAError(.invalidCAMaterial, "unsupported signature algorithm \(algorithm)") }
        return encoded
    }

    static let oids: [Certificate.SignatureAlgorithm: ASN1ObjectIdentifier] = [
        .ecdsaWithSHA256: [1, 2, 840, 10045, 4, 3, 2], .ecdsaWithSHA384: [1, 2, 840, 10045, 4, 3, 3],
        .ecdsaWithSHA512: [1, 2, 840, 10045, 4, 3, 4], .ed25519: [1, 3, 101, 112],
        .sha256WithRSAEncryption: [1, 2, 840, 113549, 1, 1, 11], .sha384WithRSAEncryption: [1, 2, 840, 113549, 1, 1, 12],
        .sha512WithRSAEncryption: [1, 2, 840, 113549, 1, 1, 13],
    ]

    static func writeAlgorithm(_ algorithm: Certificate.SignatureAlgorithm, into serializer: inout DER.Serializer) throws {
        serializer.serializeRawBytes(try algorithmIdentifier(algorithm))
    }

    static func readAlgorithm(_ node: ASN1Node) throws -> Certificate.SignatureAlgorithm {
        let oid = try DER.sequence(node, identifier: .sequence) { nodes in
            let oid = try ASN1ObjectIdentifier(derEncoded: &nodes)
            while nodes.next() != nil {}
            return oid
        }
        guard let algorithm = oids.first(where: { $0.value == oid })?.key else {
            throw ASN1Error.invalidASN1Object(reason: "unsupported signature algorithm \(oid)")
        }
        return algorithm
    }
}

extension Certificate.SignatureAlgorithm {
    var isRSA: Bool {
        self == .sha256WithRSAEncryption || self == .sha384WithRSAEncryption || self == .sha512WithRSAEncryption
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
            // The seconds, not `date`: Date's description traps for NaN.
            throw LeafTemplate.Unencodable(description: "a date \(seconds) s from 1970 has no RFC 5280 encoding")
        }
        let time = ISO8601Text.fields(secondsSince1970: Int(seconds))
        let utc = (1950..<2050).contains(time.year)
        out.append(utc ? 0x17 : 0x18)
        out.append(utc ? 13 : 15)
        time.appendDigits(to: &out, yearDigits: utc ? 2 : 4, separated: false)
    }
}

/// ECDSA-Sig-Value (`SEQUENCE { r INTEGER, s INTEGER }`, RFC 3279 §2.2.3) from a raw signature
/// (r then s, each as many bytes as the curve's order).
enum ECDSASignatureDER {
    static func encode<Raw: Collection<UInt8>>(raw: Raw) -> [UInt8] {
        let bytes = Array(raw)
        let half = bytes.count / 2
        var body: [UInt8] = []
        body.reserveCapacity(bytes.count + 6)
        for part in [bytes[..<half], bytes[half...]] {
            // Minimal two's complement: no leading zero octets, one added when the top bit is set.
            var value = part.drop(while: { $0 == 0 })
            if value.isEmpty { value = part.suffix(1) }
            let pad = value.first.map { $0 >= 0x80 } ?? false
            body.append(0x02)
            DERWriter.appendLength(value.count + (pad ? 1 : 0), to: &body)
            if pad { body.append(0) }
            body += value
        }
        return DERWriter.wrap(tag: 0x30, body)
    }
}
