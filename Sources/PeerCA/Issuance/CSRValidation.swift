import Crypto
import Foundation
import SwiftASN1
public import X509

/// A PKCS#10 certificate signing request that passed the CA's checks: parsed (PEM or DER), its
/// self-signature verified (proof that the requester holds the private key), and its key one of
/// P-256, P-384, Ed25519 or RSA ≥ 2048.
///
/// Names, extensions and attributes the CSR asks for are *not* used: a peer certificate's
/// identity comes only from the verified token.
public struct ValidatedCSR: Sendable {
    /// The parsed request.
    public let request: CertificateSigningRequest
    /// The key to certify.
    public var publicKey: Certificate.PublicKey { request.publicKey }
    /// Its type.
    public let keyKind: PublicKeyKind
    /// SHA-256 of the key's DER SubjectPublicKeyInfo, lower-case hex: the ledger's key fingerprint
    /// (the same as `request.publicKey.sha256Fingerprint`, computed once).
    public let keyFingerprint: String
    /// SHA-1 of the key's bits: the issued certificate's subject key identifier (RFC 5280 §4.2.1.2, method 1).
    package let keyIdentifier: [UInt8]

    /// Largest accepted CSR, PEM or DER.
    public static let maximumBytes = 16 * 1024

    /// Parses and checks a CSR given as PEM text (labels `CERTIFICATE REQUEST` or
    /// `NEW CERTIFICATE REQUEST`) or DER bytes.
    public init(_ bytes: [UInt8]) throws(PeerCAError) {
        guard !bytes.isEmpty else { throw PeerCAError(.invalidCSR, "the CSR is empty") }
        guard bytes.count <= ValidatedCSR.maximumBytes else {
            throw PeerCAError(.invalidCSR, "the CSR is \(bytes.count) bytes; at most \(ValidatedCSR.maximumBytes) are accepted")
        }
        let der: [UInt8]
        if bytes.first == 0x30 {
            der = bytes
        } else {
            guard let text = String(validating: bytes, as: UTF8.self) else { throw PeerCAError(.invalidCSR, "the CSR is neither DER nor PEM text") }
            let documents: [PEMDocument]
            do { documents = try PEMDocument.parseMultiple(pemString: text) } catch {
                throw PeerCAError(.invalidCSR, "the CSR is not valid PEM")
            }
            guard documents.count == 1, let document = documents.first else {
                throw PeerCAError(.invalidCSR, "expected exactly one PEM block, found \(documents.count)")
            }
            guard document.discriminator == "CERTIFICATE REQUEST" || document.discriminator == "NEW CERTIFICATE REQUEST" else {
                throw PeerCAError(.invalidCSR, "the PEM block is \"\(document.discriminator)\", not \"CERTIFICATE REQUEST\"")
            }
            der = document.derBytes
        }
        let request: CertificateSigningRequest
        do {
            request = try CertificateSigningRequest(derEncoded: der)
        } catch let error as CertificateError where error.code == .unsupportedPublicKeyAlgorithm {
            throw PeerCAError(.unsupportedKey, "the CSR's key is not P-256, P-384, Ed25519 or RSA ≥ 2048 (explicit curve parameters and other curves are refused)")
        } catch let error as CertificateError where error.code == .unsupportedSignatureAlgorithm {
            throw PeerCAError(.unsupportedKey, "the CSR is signed with an unsupported algorithm (accepted: ECDSA with SHA-256/384/512, RSA PKCS#1 v1.5 with SHA-256/384/512, Ed25519)")
        } catch {
            if UpstreamErrors.isShortRSAKey(error) {
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
            throw PeerCAError(.badCSRSignature, "the CSR's self-signature does not verify with its own key (no proof of possession)")
        }
        let kind = PublicKeyKind(request.publicKey)
        switch kind {
        case .p256, .p384, .ed25519: break
        case .rsa(let bits) where bits >= 2048 && bits <= 8192: break
        case .rsa(let bits): throw PeerCAError(.unsupportedKey, "the CSR's RSA key has \(bits) bits; 2048 to 8192 are accepted")
        case .p521: throw PeerCAError(.unsupportedKey, "P-521 keys are not accepted for peer certificates (P-256, P-384, Ed25519, RSA ≥ 2048)")
        }
        self.request = request
        self.keyKind = kind
        // Both digests from one encoding of the key: each encoding of an EC key converts its
        // point to affine coordinates (a field inversion), and the certificate needs it once more.
        var serializer = DER.Serializer()
        do { try serializer.serialize(request.publicKey) } catch { throw PeerCAError(.unsupportedKey, "the CSR's key cannot be encoded") }
        let spki = serializer.serializedBytes
        guard let bits = ValidatedCSR.keyBits(ofSubjectPublicKeyInfo: spki) else { throw PeerCAError(.unsupportedKey, "the CSR's key cannot be encoded") }
        keyFingerprint = Certificate.PublicKey.sha256Fingerprint(ofSubjectPublicKeyInfo: spki)
        keyIdentifier = Array(Insecure.SHA1.hash(data: bits))
    }

    /// The subjectPublicKey BIT STRING's bytes inside a DER SubjectPublicKeyInfo.
    static func keyBits(ofSubjectPublicKeyInfo spki: [UInt8]) -> ArraySlice<UInt8>? {
        guard let root = try? DER.parse(spki), case .constructed(let fields) = root.content else { return nil }
        var iterator = fields.makeIterator()
        guard iterator.next() != nil, let bits = iterator.next(), let bitString = try? ASN1BitString(derEncoded: bits) else { return nil }
        return bitString.bytes
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
