public import Foundation
import SwiftASN1
import TokenKit
public import X509

/// RFC 5280 certificate revocation lists: encoded by the CA, parsed and verified by peers.
enum CRLEncoder {
    struct Revoked: Equatable, Sendable {
        let serial: Certificate.SerialNumber
        let at: Date
        let reason: LedgerEntry.RevocationReason
    }

    static let reasonCodeOID: ASN1ObjectIdentifier = [2, 5, 29, 21]
    static let crlNumberOID: ASN1ObjectIdentifier = [2, 5, 29, 20]

    static func encode(
        authority: CertificateAuthority, number: Int64, thisUpdate: Date, nextUpdate: Date, revoked: [Revoked]
    ) throws(PeerCAError) -> [UInt8] {
        do {
            var numberDER = DER.Serializer()
            try numberDER.serialize(number)
            let issuerSKI = try authority.issuer.extensions.subjectKeyIdentifier?.keyIdentifier
                ?? SubjectKeyIdentifier(hash: authority.issuer.publicKey).keyIdentifier
            let extensions = [
                try Certificate.Extension(AuthorityKeyIdentifier(keyIdentifier: issuerSKI), critical: false),
                Certificate.Extension(oid: crlNumberOID, critical: false, value: numberDER.serializedBytes[...]),
            ]
            var tbs = DER.Serializer()
            try tbs.appendConstructedNode(identifier: .sequence) { s in
                try s.serialize(1)  // v2
                try ASN1Support.writeAlgorithm(authority.signatureAlgorithm, into: &s)
                try s.serialize(authority.issuer.subject)
                try ASN1Support.writeTime(thisUpdate, into: &s)
                try ASN1Support.writeTime(nextUpdate, into: &s)
                if !revoked.isEmpty {
                    try s.appendConstructedNode(identifier: .sequence) { s in
                        for entry in revoked {
                            try s.appendConstructedNode(identifier: .sequence) { s in
                                try s.serialize(entry.serial.bytes)
                                try ASN1Support.writeTime(entry.at, into: &s)
                                var reason = DER.Serializer()
                                try entry.reason.rawValue.serialize(into: &reason, withIdentifier: .enumerated)
                                try s.serializeSequenceOf([Certificate.Extension(oid: reasonCodeOID, critical: false, value: reason.serializedBytes[...])])
                            }
                        }
                    }
                }
                try s.serialize(explicitlyTaggedWithTagNumber: 0, tagClass: .contextSpecific) { s in try s.serializeSequenceOf(extensions) }
            }
            return try ASN1Support.signed(tbs.serializedBytes, by: authority)
        } catch let error as PeerCAError {
            throw error
        } catch {
            throw PeerCAError(.invalidCAMaterial, "cannot encode the CRL (\(error))")
        }
    }
}

/// A CRL whose signature has been verified against its issuer: the revoked serials and the
/// update times. Peers use it to refuse revoked certificates.
public struct RevocationList: Sendable {
    /// The CRL's issuer name.
    public let issuer: DistinguishedName
    public let thisUpdate: Date
    public let nextUpdate: Date?
    /// The CRL number, if present.
    public let number: Int64?
    /// Revoked serial numbers (lower-case hex) with the revocation time.
    public let revoked: [String: Date]
    /// The key the CRL's signature verified with: ``PeerVerifier`` applies the CRL only to a leaf
    /// whose issuer, in the path it validated, has this key.
    public let signerKey: Certificate.PublicKey

    /// Parses a CRL (DER, or PEM `X509 CRL`) and verifies its signature with `issuer`'s key.
    public init(_ bytes: [UInt8], issuer: Certificate) throws(PeerCAError) {
        var der = bytes
        if bytes.first != 0x30 {
            guard let text = String(validating: bytes, as: UTF8.self), let document = try? PEMDocument(pemString: text),
                document.discriminator == "X509 CRL"
            else { throw PeerCAError(.invalidRevocationData, "the CRL is neither DER nor a PEM \"X509 CRL\"") }
            der = document.derBytes
        }
        do {
            let root = try DER.parse(der)
            let parsed = try DER.sequence(root, identifier: .sequence) { nodes -> (tbs: ASN1Node, algorithm: Certificate.SignatureAlgorithm, signature: ASN1BitString) in
                guard let tbs = nodes.next(), let algorithm = nodes.next() else { throw ASN1Error.invalidASN1Object(reason: "CertificateList") }
                let signature = try ASN1BitString(derEncoded: &nodes)
                return (tbs, try ASN1Support.readAlgorithm(algorithm), signature)
            }
            guard issuer.publicKey.isValidSignature(parsed.signature.bytes, for: parsed.tbs.encodedBytes, signatureAlgorithm: parsed.algorithm) else {
                throw PeerCAError(.invalidRevocationData, "the CRL's signature does not verify with the CA's key")
            }
            var revoked: [String: Date] = [:]
            var number: Int64?
            let fields = try DER.sequence(parsed.tbs, identifier: .sequence) { nodes -> (DistinguishedName, Date, Date?) in
                _ = try Int(derEncoded: &nodes)  // version
                _ = nodes.next()  // signature algorithm
                guard let nameNode = nodes.next() else { throw ASN1Error.invalidASN1Object(reason: "issuer") }
                let name = try DistinguishedName(derEncoded: nameNode)
                guard let thisNode = nodes.next() else { throw ASN1Error.invalidASN1Object(reason: "thisUpdate") }
                let thisUpdate = try ASN1Support.readTime(thisNode)
                var nextUpdate: Date?
                while let node = nodes.next() {
                    if node.identifier == .utcTime || node.identifier == .generalizedTime {
                        nextUpdate = try ASN1Support.readTime(node)
                    } else if node.identifier == .sequence {
                        guard case .constructed(let entries) = node.content else { continue }
                        for entry in entries {
                            try DER.sequence(entry, identifier: .sequence) { nodes in
                                let serial = try ArraySlice<UInt8>(derEncoded: &nodes)
                                guard let timeNode = nodes.next() else { throw ASN1Error.invalidASN1Object(reason: "revocationDate") }
                                let hex = SerialNumbers.hex(Certificate.SerialNumber(bytes: serial))
                                revoked[hex] = try ASN1Support.readTime(timeNode)
                                while nodes.next() != nil {}
                            }
                        }
                    } else if node.identifier == ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific) {
                        let extensions = try DER.explicitlyTagged(node, tagNumber: 0, tagClass: .contextSpecific) { inner in
                            try DER.sequence(of: Certificate.Extension.self, identifier: .sequence, rootNode: inner)
                        }
                        if let numberExtension = extensions.first(where: { $0.oid == CRLEncoder.crlNumberOID }) {
                            number = try Int64(derEncoded: numberExtension.value)
                        }
                    }
                }
                return (name, thisUpdate, nextUpdate)
            }
            guard fields.0 == issuer.subject else { throw PeerCAError(.invalidRevocationData, "the CRL was issued by another CA") }
            self.issuer = fields.0
            self.thisUpdate = fields.1
            self.nextUpdate = fields.2
            self.number = number
            self.revoked = revoked
            self.signerKey = issuer.publicKey
        } catch let error as PeerCAError {
            throw error
        } catch {
            throw PeerCAError(.invalidRevocationData, "the CRL is malformed (\(error))")
        }
    }

    /// Whether the certificate with this serial is listed.
    public func isRevoked(_ serial: Certificate.SerialNumber) -> Bool { revoked[SerialNumbers.hex(serial)] != nil }

    /// Nil when the list is current at `time` (thisUpdate at most ``PeerVerifier/crlClockSkew``
    /// ahead of it, time at most nextUpdate, which it must have); otherwise why not, in words. The
    /// one rule for the verifier's check of a leaf and a ``PeerTLS``'s update.
    package func notCurrent(at time: Date) -> String? {
        if let nextUpdate, thisUpdate <= time + PeerVerifier.crlClockSkew, time <= nextUpdate { return nil }
        let next = nextUpdate.map { ISO8601Text.string($0) } ?? "none"
        return "the CRL is not current (thisUpdate \(ISO8601Text.string(thisUpdate)), nextUpdate \(next)"
    }
}
