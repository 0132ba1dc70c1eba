import Crypto
import Foundation
import SwiftASN1
import TokenKit
public import X509

/// A PKCS#10 certificate signing request that passed the CA's checks: parsed (PEM or DER), its
/// self-signature verified (proof that the requester holds the private key), and its key one of
/// P-256, P-384, Ed25519 or RSA ≥ 2048.
///
/// Names, extensions and attributes the CSR asks for are *not* used: a peer certificate's
/// identity comes only from the verified token.
public struct ValidatedCSR: Sendable {
    /// The request's DER (decoded from the PEM when given as text).
    public let derBytes: [UInt8]
    /// The request parsed by swift-certificates. Parsed from ``derBytes`` on each use: the CA's
    /// own checks read the DER directly for the common P-256 request and need no parsed copy.
    public var request: CertificateSigningRequest {
        get throws(PeerCAError) {
            do { return try CertificateSigningRequest(derEncoded: derBytes) } catch { throw PeerCAError(.invalidCSR, "the CSR does not parse") }
        }
    }
    /// The key to certify, parsed from its SubjectPublicKeyInfo.
    public var publicKey: Certificate.PublicKey {
        get throws(PeerCAError) {
            do { return try Certificate.PublicKey(derEncoded: subjectPublicKeyInfo) } catch { throw PeerCAError(.unsupportedKey, "the CSR's key does not parse") }
        }
    }
    /// Its type.
    public let keyKind: PublicKeyKind
    /// SHA-256 of the key's DER SubjectPublicKeyInfo, lower-case hex: the ledger's key fingerprint
    /// (the same as `publicKey.sha256Fingerprint`, computed once).
    public let keyFingerprint: String
    /// SHA-1 of the key's bits: the issued certificate's subject key identifier (RFC 5280 §4.2.1.2, method 1).
    package let keyIdentifier: [UInt8]
    /// The key's SubjectPublicKeyInfo, DER, as swift-certificates encodes it: what the issued
    /// certificate carries.
    package let subjectPublicKeyInfo: [UInt8]
    /// Whether the request went the direct P-256 path (`CSRFastPath`) rather than swift-certificates' parser.
    package let checkedDirectly: Bool

    static let badSignatureMessage = "the CSR's self-signature does not verify with its own key (no proof of possession)"

    /// Largest accepted CSR, PEM or DER.
    public static let maximumBytes = 16 * 1024

    /// Parses and checks a CSR given as PEM text (labels `CERTIFICATE REQUEST` or
    /// `NEW CERTIFICATE REQUEST`) or DER bytes.
    ///
    /// The usual request — a P-256 key signed with ECDSA-SHA256, in canonical PEM or DER,
    /// whatever its subject and attributes (those are checked by swift-certificates' parsers for
    /// them) — is checked by reading its DER directly; any other goes through swift-certificates'
    /// parser. Both give the same result for the requests the first accepts.
    public init(_ bytes: [UInt8]) throws(PeerCAError) {
        try self.init(bytes, fastPath: true)
    }

    /// `init(_:)` with the direct P-256 path on or off: tests and the CSR fuzzer compare the two.
    @_spi(Testing) public init(_ bytes: [UInt8], fastPath: Bool) throws(PeerCAError) {
        guard !bytes.isEmpty else { throw PeerCAError(.invalidCSR, "the CSR is empty") }
        guard bytes.count <= ValidatedCSR.maximumBytes else {
            throw PeerCAError(.invalidCSR, "the CSR is \(bytes.count) bytes; at most \(ValidatedCSR.maximumBytes) are accepted")
        }
        let der: [UInt8]
        if bytes.first == 0x30 {
            der = bytes
        } else if fastPath, let body = CSRFastPath.canonicalPEMBody(bytes) {
            der = body
        } else {
            guard let text = String(validating: bytes, as: UTF8.self) else { throw PeerCAError(.invalidCSR, "the CSR is neither DER nor PEM text") }
            // TokenKit's reader, as for keys: base64 lines of any length (RFC 7468 §3 asks parsers
            // to be lax; swift-certificates' wanted exactly 64 and refused 76-column PEM as "not
            // valid PEM").
            let documents: [PEM.Block]
            do { documents = try PEM.parse(text) } catch {
                throw PeerCAError(.invalidCSR, "the CSR is not valid PEM (\(error.message))")
            }
            guard documents.count == 1, let document = documents.first else {
                throw PeerCAError(.invalidCSR, "expected exactly one PEM block, found \(documents.count)")
            }
            guard document.label == "CERTIFICATE REQUEST" || document.label == "NEW CERTIFICATE REQUEST" else {
                throw PeerCAError(.invalidCSR, "the PEM block is \"\(document.label)\", not \"CERTIFICATE REQUEST\"")
            }
            der = document.der
        }
        derBytes = der
        let kind: PublicKeyKind, spki: [UInt8]
        if fastPath, let covered = try CSRFastPath.check(der) {
            (kind, spki, checkedDirectly) = (.p256, Array(covered), true)
        } else {
            (kind, spki) = try ValidatedCSR.checkGenerically(der)
            checkedDirectly = false
        }
        guard let bits = ValidatedCSR.keyBits(ofSubjectPublicKeyInfo: spki) else { throw PeerCAError(.unsupportedKey, "the CSR's key cannot be encoded") }
        keyKind = kind
        subjectPublicKeyInfo = spki
        keyFingerprint = Certificate.PublicKey.sha256Fingerprint(ofSubjectPublicKeyInfo: spki)
        keyIdentifier = Array(Insecure.SHA1.hash(data: bits))
    }

    /// Any request, through swift-certificates' parser: its key's kind and SubjectPublicKeyInfo
    /// when it parses, its self-signature verifies and its key is one the CA certifies.
    static func checkGenerically(_ der: [UInt8]) throws(PeerCAError) -> (PublicKeyKind, [UInt8]) {
        let request: CertificateSigningRequest
        do {
            request = try CertificateSigningRequest(derEncoded: der)
        } catch let error as CertificateError where error.code == .unsupportedPublicKeyAlgorithm {
            throw PeerCAError(.unsupportedKey, "the CSR's key is not P-256, P-384, Ed25519 or RSA ≥ 2048 (explicit curve parameters and other curves are refused)")
        } catch let error as CertificateError where error.code == .unsupportedSignatureAlgorithm {
            throw PeerCAError(.unsupportedKey, "the CSR is signed with an unsupported algorithm (accepted: ECDSA with SHA-256/384/512, RSA PKCS#1 v1.5 with SHA-256/384/512, Ed25519)")
        } catch {
            if UpstreamErrors.isShortRSAKey(error) {
                // swift-crypto says the same for an EC point of the wrong size (a compressed one).
                if ValidatedCSR.hasECKey(request: der) {
                    throw PeerCAError(.unsupportedKey, "the CSR's EC key is not an uncompressed point (04 X Y) on P-256 or P-384; compressed points are not accepted")
                }
                throw PeerCAError(.unsupportedKey, "the CSR's RSA key is shorter than 2048 bits")
            }
            throw PeerCAError(.invalidCSR, "the CSR is not a well-formed PKCS#10 request")
        }
        guard request.version == .v1 else { throw PeerCAError(.invalidCSR, "the CSR's version is not 1 (0 in DER)") }
        switch request.signatureAlgorithm {
        case .sha1WithRSAEncryption:
            throw PeerCAError(.unsupportedKey, "the CSR is signed with SHA-1")
        default: break
        }
        guard request.publicKey.isValidSignature(request.signature, for: request) else {
            throw PeerCAError(.badCSRSignature, ValidatedCSR.badSignatureMessage)
        }
        let kind = PublicKeyKind(request.publicKey)
        switch kind {
        case .p256, .p384, .ed25519: break
        case .rsa(let bits) where bits >= 2048 && bits <= 8192: break
        case .rsa(let bits): throw PeerCAError(.unsupportedKey, "the CSR's RSA key has \(bits) bits; 2048 to 8192 are accepted")
        case .p521: throw PeerCAError(.unsupportedKey, "P-521 keys are not accepted for peer certificates (P-256, P-384, Ed25519, RSA ≥ 2048)")
        }
        // The fingerprint, the key identifier and the certificate all use one encoding of the key:
        // the CSR's own bytes when they are already the canonical one, else swift-certificates'
        // (each encoding of an EC key converts its point to affine coordinates: a field inversion).
        let spki: [UInt8]
        if let canonical = ValidatedCSR.canonicalSubjectPublicKeyInfo(ofRequest: der, kind: kind) {
            spki = canonical
        } else {
            var serializer = DER.Serializer()
            do { try serializer.serialize(request.publicKey) } catch { throw PeerCAError(.unsupportedKey, "the CSR's key cannot be encoded") }
            spki = serializer.serializedBytes
        }
        return (kind, spki)
    }

    /// The SubjectPublicKeyInfo element (header included) of a DER CSR: CertificationRequest is
    /// `SEQUENCE { CertificationRequestInfo SEQUENCE { version INTEGER, subject Name, spki, … }, … }`.
    static func subjectPublicKeyInfo(inRequest der: [UInt8]) -> ArraySlice<UInt8>? {
        var reader = DERReader(der)
        guard reader.enter(tag: 0x30), reader.enter(tag: 0x30), reader.skip(tag: 0x02), reader.skip(tag: 0x30) else { return nil }
        return reader.element(tag: 0x30)
    }

    /// Whether the CSR's SubjectPublicKeyInfo names id-ecPublicKey.
    static func hasECKey(request der: [UInt8]) -> Bool {
        guard let spki = subjectPublicKeyInfo(inRequest: der) else { return false }
        var reader = DERReader(Array(spki))
        guard reader.enter(tag: 0x30), reader.enter(tag: 0x30), let oid = reader.element(tag: 0x06) else { return false }
        return oid.elementsEqual([0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01])
    }

    /// The SubjectPublicKeyInfo bytes inside a (parsed, DER) CSR when they are exactly what
    /// encoding its key again gives: a named-curve P-256 or P-384 key with an uncompressed point
    /// (the parse already checked the point is on the curve with coordinates below the field
    /// prime, so it encodes back to the same bytes), or an Ed25519 key. Nil otherwise (RSA, whose
    /// encoding varies, for one in its parameters): the caller encodes the parsed key.
    static func canonicalSubjectPublicKeyInfo(ofRequest der: [UInt8], kind: PublicKeyKind) -> [UInt8]? {
        let prefix: [UInt8]
        switch kind {
        case .p256:  // SEQUENCE { SEQUENCE { id-ecPublicKey, prime256v1 }, BIT STRING 0x04 X Y }
            prefix = [0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00, 0x04]
        case .p384:
            prefix = [0x30, 0x76, 0x30, 0x10, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22, 0x03, 0x62, 0x00, 0x04]
        case .ed25519:
            prefix = [0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00]
        case .p521, .rsa:
            return nil
        }
        guard let spki = subjectPublicKeyInfo(inRequest: der), spki.count == Int(prefix[1]) + 2, spki.starts(with: prefix) else { return nil }
        return Array(spki)
    }

    /// The subjectPublicKey BIT STRING's bytes inside a DER SubjectPublicKeyInfo (`SEQUENCE {
    /// algorithm SEQUENCE, subjectPublicKey BIT STRING }`; a key is whole octets: no unused bits).
    static func keyBits(ofSubjectPublicKeyInfo spki: [UInt8]) -> ArraySlice<UInt8>? {
        var reader = DERReader(spki)
        guard reader.enter(tag: 0x30), reader.skip(tag: 0x30), let content = reader.contents(tag: 0x03), content.first == 0 else { return nil }
        return content.dropFirst()
    }
}

/// Walks DER headers (single-octet tags, definite lengths) over bytes a DER parser accepted.
struct DERReader {
    private let bytes: [UInt8]
    private var position = 0
    /// Where the innermost entered element ends.
    private var end: Int

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
        end = bytes.count
    }

    /// The tag, content start and content end of the element at the position.
    private func header(tag: UInt8) -> (start: Int, end: Int)? {
        guard position + 2 <= end, bytes[position] == tag else { return nil }
        let first = Int(bytes[position + 1])
        var start = position + 2
        var length = first
        if first >= 0x80 {
            let octets = first & 0x7f
            guard octets >= 1, octets <= 3, start + octets <= end else { return nil }
            length = 0
            for i in 0..<octets { length = length << 8 | Int(bytes[start + i]) }
            start += octets
        }
        guard length <= end - start else { return nil }
        return (start, start + length)
    }

    /// Moves into the element with `tag` at the position.
    mutating func enter(tag: UInt8) -> Bool {
        guard let (start, contentEnd) = header(tag: tag) else { return false }
        position = start
        end = contentEnd
        return true
    }

    /// Moves past the element with `tag` at the position.
    mutating func skip(tag: UInt8) -> Bool {
        guard let (_, contentEnd) = header(tag: tag) else { return false }
        position = contentEnd
        return true
    }

    /// The contents (header excluded) of the element with `tag` at the position; moves past it.
    mutating func contents(tag: UInt8) -> ArraySlice<UInt8>? {
        guard let (start, contentEnd) = header(tag: tag) else { return nil }
        position = contentEnd
        return bytes[start..<contentEnd]
    }

    /// The whole encoding (header included) of the element with `tag` at the position; moves past it.
    mutating func element(tag: UInt8) -> ArraySlice<UInt8>? {
        let begin = position
        guard let (_, contentEnd) = header(tag: tag) else { return nil }
        position = contentEnd
        return bytes[begin..<contentEnd]
    }
}

/// Making CSRs and reading certificates, for devices.
public enum DeviceCSR {
    /// A PEM CSR for `key`, with an empty subject (the CA takes the identity from the token).
    public static func make(key: Certificate.PrivateKey) throws(PeerCAError) -> String {
        do {
            let request = try CertificateSigningRequest(
                version: .v1, subject: DistinguishedName(), privateKey: key, attributes: CertificateSigningRequest.Attributes(),
                signatureAlgorithm: PublicKeyKind(key.publicKey).signatureAlgorithm)
            return try request.serializeAsPEM().pemString + "\n"
        } catch {
            throw PeerCAError(.invalidCSR, "cannot sign the CSR (\(error))")
        }
    }

    /// The key as PEM (PKCS#8; PKCS#1 for RSA).
    public static func keyPEM(_ key: Certificate.PrivateKey) throws(PeerCAError) -> String { try PEMText.privateKey(key) }

    /// Every certificate in PEM text, in order.
    public static func certificates(pem: String) throws(PeerCAError) -> [Certificate] {
        do {
            return try PEMDocument.parseMultiple(pemString: pem).map { try Certificate(pemDocument: $0) }
        } catch {
            throw PeerCAError(.invalidCAMaterial, "not PEM certificates")
        }
    }
}
