import Crypto
import Foundation
import SwiftASN1
import Synchronization
import X509

/// An RFC 6960 OCSP responder for the CA's own certificates, answering from the ledger.
/// swift-certificates keeps its OCSP types internal, so requests and responses are read and
/// written with swift-asn1 here.
enum OCSPResponder {
    static let sha1OID: ASN1ObjectIdentifier = [1, 3, 14, 3, 2, 26]
    static let sha256OID: ASN1ObjectIdentifier = [2, 16, 840, 1, 101, 3, 4, 2, 1]
    static let sha384OID: ASN1ObjectIdentifier = [2, 16, 840, 1, 101, 3, 4, 2, 2]
    static let sha512OID: ASN1ObjectIdentifier = [2, 16, 840, 1, 101, 3, 4, 2, 3]
    static let nonceOID: ASN1ObjectIdentifier = [1, 3, 6, 1, 5, 5, 7, 48, 1, 2]
    static let basicOID: ASN1ObjectIdentifier = [1, 3, 6, 1, 5, 5, 7, 48, 1, 1]

    struct Query {
        let certIDBytes: ArraySlice<UInt8>
        let hashAlgorithm: ASN1ObjectIdentifier
        let issuerNameHash: ArraySlice<UInt8>
        let issuerKeyHash: ArraySlice<UInt8>
        let serial: Certificate.SerialNumber
    }

    enum Status: Hashable {
        case good, unknown
        case revoked(Date, LedgerEntry.RevocationReason)

        /// A certificate's status as the ledger has it (nil: not in the ledger).
        init(_ recorded: LedgerEntry.Status?) {
            switch recorded {
            case nil: self = .unknown
            case .valid?: self = .good
            case .revoked(let at, let reason)?: self = .revoked(at, reason)
            }
        }
    }

    /// One CertID of a request and the status the response gives it.
    struct Answer: Hashable {
        let certID: [UInt8]
        let status: Status
    }

    /// Signed responses to requests without a nonce, given again while they say the same thing
    /// (RFC 5019's pre-produced responses): keyed by the request's CertIDs, each one's status as
    /// the ledger says now, and the validity. A response is reused until half its validity has
    /// passed. Requests with a nonce are signed each time (the nonce is echoed).
    final class Reuse: Sendable {
        struct Key: Hashable {
            let answers: [Answer]
            let validity: TimeInterval
        }

        private struct Signed {
            let producedAt: Date
            let der: [UInt8]
        }

        /// The most responses kept: past it, those half through their validity go, and if that
        /// is not room enough, all of them.
        static let capacity = 4096
        private let responses = Mutex<[Key: Signed]>([:])

        init() {}

        func response(for key: Key, now: Date) -> [UInt8]? {
            responses.withLock { responses in
                guard let signed = responses[key], Reissue.stillCurrent(madeAt: signed.producedAt, validity: key.validity, now: now) else { return nil }
                return signed.der
            }
        }

        func keep(_ der: [UInt8], for key: Key, producedAt: Date) {
            responses.withLock { responses in
                if responses.count >= Self.capacity {
                    responses = responses.filter { Reissue.stillCurrent(madeAt: $0.value.producedAt, validity: $0.key.validity, now: producedAt) }
                    if responses.count >= Self.capacity { responses.removeAll(keepingCapacity: true) }
                }
                responses[key] = Signed(producedAt: producedAt, der: der)
            }
        }

        var count: Int { responses.withLock { $0.count } }
    }

    /// Response status codes (RFC 6960 §4.2.1).
    enum ResponseStatus: Int { case successful = 0, malformedRequest = 1, internalError = 2, tryLater = 3, unauthorized = 6 }

    /// A nonce that is not an OCTET STRING of 1 to 32 octets.
    struct OCSPNonceError: Error {}

    static func respond(
        to request: [UInt8], authority: CertificateAuthority, ledger: any CertificateLedger, now: Date, validity: TimeInterval,
        issuer: IssuerHashes, reuse: Reuse
    ) async -> [UInt8] {
        guard request.count <= 64 * 1024, let (queries, nonce) = try? parse(request), !queries.isEmpty, queries.count <= 32 else {
            return errorResponse(.malformedRequest)
        }
        var answers: [Answer] = []
        for query in queries {
            var status = Status.unknown
            if issuer.match(query) {
                do { status = Status(try await ledger.entry(serial: SerialNumbers.hex(query.serial))?.status) } catch {
                    return errorResponse(.internalError)
                }
            }
            answers.append(Answer(certID: Array(query.certIDBytes), status: status))
        }
        let key = nonce == nil ? Reuse.Key(answers: answers, validity: validity) : nil
        if let key, let reused = reuse.response(for: key, now: now) { return reused }
        do {
            let der = try encode(answers, nonce: nonce, authority: authority, now: now, validity: validity)
            if let key { reuse.keep(der, for: key, producedAt: now) }
            return der
        } catch {
            return errorResponse(.internalError)
        }
    }

    /// The issuer's name and key hashes a CertID carries (RFC 6960 §4.1.1), by SHA-1, SHA-256,
    /// SHA-384 and SHA-512: computed once per CA rather than for every query. (With SHA-384 or
    /// SHA-512, a good certificate was answered unknown.)
    struct IssuerHashes: Sendable {
        let hashes: [ASN1ObjectIdentifier: (name: [UInt8], key: [UInt8])]

        init(_ issuer: Certificate) {
            var nameDER = DER.Serializer()
            guard (try? nameDER.serialize(issuer.subject)) != nil else {
                hashes = [:]
                return
            }
            let name = nameDER.serializedBytes, keyBits = issuer.publicKey.subjectPublicKeyInfoBytes
            hashes = [
                sha1OID: (Array(Insecure.SHA1.hash(data: name)), Array(Insecure.SHA1.hash(data: keyBits))),
                sha256OID: (Array(SHA256.hash(data: name)), Array(SHA256.hash(data: keyBits))),
                sha384OID: (Array(SHA384.hash(data: name)), Array(SHA384.hash(data: keyBits))),
                sha512OID: (Array(SHA512.hash(data: name)), Array(SHA512.hash(data: keyBits))),
            ]
        }

        func match(_ query: Query) -> Bool {
            guard let hashes = hashes[query.hashAlgorithm] else { return false }
            return hashes.name[...] == query.issuerNameHash && hashes.key[...] == query.issuerKeyHash
        }
    }

    static func parse(_ der: [UInt8]) throws -> ([Query], Certificate.Extension?) {
        var queries: [Query] = []
        var nonce: Certificate.Extension?
        try DER.sequence(try DER.parse(der), identifier: .sequence) { nodes in
            guard let tbs = nodes.next() else { throw ASN1Error.invalidASN1Object(reason: "tbsRequest") }
            while nodes.next() != nil {}
            try DER.sequence(tbs, identifier: .sequence) { nodes in
                _ = try DER.optionalExplicitlyTagged(&nodes, tagNumber: 0, tagClass: .contextSpecific) { try Int(derEncoded: $0) }
                _ = try DER.optionalExplicitlyTagged(&nodes, tagNumber: 1, tagClass: .contextSpecific) { $0 }
                guard let list = nodes.next(), list.identifier == .sequence, case .constructed(let requests) = list.content else {
                    throw ASN1Error.invalidASN1Object(reason: "requestList")
                }
                for request in requests {
                    try DER.sequence(request, identifier: .sequence) { nodes in
                        guard let certID = nodes.next() else { throw ASN1Error.invalidASN1Object(reason: "reqCert") }
                        while nodes.next() != nil {}
                        try DER.sequence(certID, identifier: .sequence) { nodes in
                            guard let algorithm = nodes.next() else { throw ASN1Error.invalidASN1Object(reason: "hashAlgorithm") }
                            let oid = try DER.sequence(algorithm, identifier: .sequence) { nodes in
                                let oid = try ASN1ObjectIdentifier(derEncoded: &nodes)
                                while nodes.next() != nil {}
                                return oid
                            }
                            let nameHash = try ASN1OctetString(derEncoded: &nodes)
                            let keyHash = try ASN1OctetString(derEncoded: &nodes)
                            let serial = try ArraySlice<UInt8>(derEncoded: &nodes)
                            queries.append(Query(
                                certIDBytes: certID.encodedBytes, hashAlgorithm: oid, issuerNameHash: nameHash.bytes, issuerKeyHash: keyHash.bytes,
                                serial: Certificate.SerialNumber(bytes: serial)))
                        }
                    }
                }
                if let extensions = try DER.optionalExplicitlyTagged(&nodes, tagNumber: 2, tagClass: .contextSpecific, { node in
                    try DER.sequence(of: Certificate.Extension.self, identifier: .sequence, rootNode: node)
                }) {
                    nonce = extensions.first { $0.oid == nonceOID }
                    // RFC 8954 §2.1: Nonce ::= OCTET STRING (SIZE(1..32)); a request with a nonce
                    // outside that is malformed (it was echoed, up to the request's 64 KiB, into
                    // a signed response).
                    if let value = nonce?.value {
                        guard let octets = try? ASN1OctetString(derEncoded: value), (1...32).contains(octets.bytes.count) else {
                            throw OCSPNonceError()
                        }
                    }
                }
            }
        }
        return (queries, nonce)
    }

    static func encode(
        _ answers: [Answer], nonce: Certificate.Extension?, authority: CertificateAuthority, now: Date, validity: TimeInterval
    ) throws -> [UInt8] {
        var data = DER.Serializer()
        try data.appendConstructedNode(identifier: .sequence) { s in
            // responderID byName [1]
            try s.appendConstructedNode(identifier: ASN1Identifier(tagWithNumber: 1, tagClass: .contextSpecific)) { s in
                try s.serialize(authority.issuer.subject)
            }
            try s.serialize(ASN1Support.generalizedTime(now))
            try s.appendConstructedNode(identifier: .sequence) { s in
                for answer in answers {
                    try s.appendConstructedNode(identifier: .sequence) { s in
                        s.serializeRawBytes(answer.certID)
                        switch answer.status {
                        case .good:
                            ASN1Null().serialize(into: &s, withIdentifier: ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific))
                        case .unknown:
                            ASN1Null().serialize(into: &s, withIdentifier: ASN1Identifier(tagWithNumber: 2, tagClass: .contextSpecific))
                        case .revoked(let at, let reason):
                            try s.appendConstructedNode(identifier: ASN1Identifier(tagWithNumber: 1, tagClass: .contextSpecific)) { s in
                                try s.serialize(ASN1Support.generalizedTime(at))
                                try s.serialize(explicitlyTaggedWithTagNumber: 0, tagClass: .contextSpecific) { s in
                                    try reason.rawValue.serialize(into: &s, withIdentifier: .enumerated)
                                }
                            }
                        }
                        try s.serialize(ASN1Support.generalizedTime(now))
                        try s.serialize(explicitlyTaggedWithTagNumber: 0, tagClass: .contextSpecific) { s in
                            try s.serialize(ASN1Support.generalizedTime(now.addingTimeInterval(validity)))
                        }
                    }
                }
            }
            if let nonce {
                try s.serialize(explicitlyTaggedWithTagNumber: 1, tagClass: .contextSpecific) { s in try s.serializeSequenceOf([nonce]) }
            }
        }
        // When the responder is the intermediate, include it so clients can check its signature.
        let basic = try ASN1Support.signed(data.serializedBytes, by: authority, certificates: authority.intermediates)
        var out = DER.Serializer()
        try out.appendConstructedNode(identifier: .sequence) { s in
            try ResponseStatus.successful.rawValue.serialize(into: &s, withIdentifier: .enumerated)
            try s.serialize(explicitlyTaggedWithTagNumber: 0, tagClass: .contextSpecific) { s in
                try s.appendConstructedNode(identifier: .sequence) { s in
                    try s.serialize(basicOID)
                    try s.serialize(ASN1OctetString(contentBytes: basic[...]))
                }
            }
        }
        return out.serializedBytes
    }

    static func errorResponse(_ status: ResponseStatus) -> [UInt8] {
        var out = DER.Serializer()
        try? out.appendConstructedNode(identifier: .sequence) { s in
            try status.rawValue.serialize(into: &s, withIdentifier: .enumerated)
        }
        return out.serializedBytes
    }
}
