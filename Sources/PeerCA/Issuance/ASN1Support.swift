import Foundation
import SwiftASN1
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
    /// the CA's issuing key: the outer form of CRLs and BasicOCSPResponses.
    static func signed(_ tbs: [UInt8], by authority: CertificateAuthority, certificates: [Certificate] = []) throws -> [UInt8] {
        let signature = try authority.sign(tbs)
        var out = DER.Serializer()
        try out.appendConstructedNode(identifier: .sequence) { s in
            s.serializeRawBytes(tbs)
            try writeAlgorithm(authority.signatureAlgorithm, into: &s)
            try s.serialize(ASN1BitString(bytes: signature[...]))
            if !certificates.isEmpty {
                try s.serialize(explicitlyTaggedWithTagNumber: 0, tagClass: .contextSpecific) { s in try s.serializeSequenceOf(certificates) }
            }
        }
        return out.serializedBytes
    }

    static let oids: [Certificate.SignatureAlgorithm: ASN1ObjectIdentifier] = [
        .ecdsaWithSHA256: [1, 2, 840, 10045, 4, 3, 2], .ecdsaWithSHA384: [1, 2, 840, 10045, 4, 3, 3],
        .ecdsaWithSHA512: [1, 2, 840, 10045, 4, 3, 4], .ed25519: [1, 3, 101, 112],
        .sha256WithRSAEncryption: [1, 2, 840, 113549, 1, 1, 11], .sha384WithRSAEncryption: [1, 2, 840, 113549, 1, 1, 12],
        .sha512WithRSAEncryption: [1, 2, 840, 113549, 1, 1, 13],
    ]

    static func writeAlgorithm(_ algorithm: Certificate.SignatureAlgorithm, into serializer: inout DER.Serializer) throws {
        guard let oid = oids[algorithm] else { throw PeerCAError(.invalidCAMaterial, "unsupported signature algorithm \(algorithm)") }
        try serializer.appendConstructedNode(identifier: .sequence) { s in
            try s.serialize(oid)
            if algorithm.isRSA { try s.serialize(ASN1Null()) }
        }
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
