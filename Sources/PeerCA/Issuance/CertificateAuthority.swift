import Crypto
public import Foundation
import SwiftASN1
import TokenKit
public import X509

/// The CA's certificates and the key that signs peer certificates.
///
/// A CA is a self-signed root, and optionally an intermediate that does the issuing so the root
/// key can stay offline. ``create(name:algorithm:withIntermediate:rootValidity:intermediateValidity:now:)``
/// makes new material; ``init(rootPEM:issuerCertificatePEM:issuerKeyPEM:passphrase:)`` loads existing PEM.
///
/// ```swift
/// let material = try CertificateAuthority.create(name: "Example devices", algorithm: .p256, withIntermediate: true)
/// let ca = material.authority   // signs with the intermediate; material.rootKey can go offline
/// ```
public struct CertificateAuthority: Sendable {
    /// The self-signed root that peers trust.
    public let root: Certificate
    /// The certificate of the key that signs peer certificates: the intermediate, or the root.
    public let issuer: Certificate
    /// The issuing key (private).
    let issuerKey: Certificate.PrivateKey
    /// The same key as swift-crypto's P-256 key when it is one: signed with directly, without
    /// swift-certificates' `Certificate.Signature` round trip (≈ 2 µs a certificate). Every
    /// signature is swift-crypto's whole signature, with a fresh nonce (BoringSSL's, hedged with
    /// the key and the message); no nonce is ever computed beforehand, kept or reused.
    let p256IssuerKey: P256.Signing.PrivateKey?
    /// The algorithm the issuing key signs with.
    public let signatureAlgorithm: Certificate.SignatureAlgorithm

    /// Certificates to send after a leaf: the intermediate (if any); never the root.
    public var intermediates: [Certificate] { issuer == root ? [] : [issuer] }

    /// New CA material, generated in memory.
    public struct Material: Sendable {
        /// The CA that issues with the material's issuing key.
        public let authority: CertificateAuthority
        /// The root's private key (the same as the issuing key when there is no intermediate).
        public let rootKey: Certificate.PrivateKey
        /// The intermediate's private key, if one was made.
        public let intermediateKey: Certificate.PrivateKey?

        /// The issuing key as PEM (PKCS#8; PKCS#1 for RSA), or encrypted PKCS#8 under
        /// `passphrase`. Write it with mode 0600.
        public func issuerKeyPEM(passphrase: String? = nil) throws(PeerCAError) -> String {
            try PEMText.privateKey(intermediateKey ?? rootKey, passphrase: passphrase)
        }

        /// The root key as PEM (encrypted under `passphrase` if given). Write it with mode 0600,
        /// and keep it offline when an intermediate issues.
        public func rootKeyPEM(passphrase: String? = nil) throws(PeerCAError) -> String { try PEMText.privateKey(rootKey, passphrase: passphrase) }
    }

    /// Creates a root (and an intermediate that issues) with new keys of `algorithm`.
    public static func create(
        name: String, algorithm: CAKeyAlgorithm = .p256, withIntermediate: Bool = false,
        rootValidity: TimeInterval = 10 * 365 * 86_400, intermediateValidity: TimeInterval = 2 * 365 * 86_400, now: Date = Date()
    ) throws(PeerCAError) -> Material {
        guard !name.isEmpty, name.count <= 64 else { throw PeerCAError(.invalidCAMaterial, "the CA name must have 1 to 64 characters") }
        let rootKey = try algorithm.generate()
        func caName(_ commonName: String) throws(PeerCAError) -> DistinguishedName {
            do {
                return try DistinguishedName {
                    OrganizationName(name)
                    CommonName(commonName)
                }
            } catch { throw PeerCAError(.invalidCAMaterial, "cannot build the name \(commonName)") }
        }
        let rootName = try caName("\(name) root CA")
        let root = try makeCACertificate(
            subject: rootName, publicKey: rootKey.publicKey, issuer: rootName, issuerKey: rootKey, issuerSKI: nil,
            pathLength: withIntermediate ? 1 : 0, notBefore: now.addingTimeInterval(-300), notAfter: now.addingTimeInterval(rootValidity))
        guard withIntermediate else {
            let authority = try CertificateAuthority(root: root, issuer: root, issuerKey: rootKey)
            return Material(authority: authority, rootKey: rootKey, intermediateKey: nil)
        }
        let intermediateKey = try algorithm.generate()
        let intermediateName = try caName("\(name) issuing CA")
        let intermediate = try makeCACertificate(
            subject: intermediateName, publicKey: intermediateKey.publicKey, issuer: rootName, issuerKey: rootKey,
            issuerSKI: SubjectKeyIdentifier(hash: rootKey.publicKey).keyIdentifier, pathLength: 0,
            notBefore: now.addingTimeInterval(-300), notAfter: now.addingTimeInterval(min(intermediateValidity, rootValidity)))
        let authority = try CertificateAuthority(root: root, issuer: intermediate, issuerKey: intermediateKey)
        return Material(authority: authority, rootKey: rootKey, intermediateKey: intermediateKey)
    }

    /// A CA from its root and issuing certificate and key. The key must match the issuing
    /// certificate, which must be a CA certificate that chains to the root.
    public init(root: Certificate, issuer: Certificate, issuerKey: Certificate.PrivateKey) throws(PeerCAError) {
        guard issuerKey.publicKey == issuer.publicKey else {
            throw PeerCAError(.invalidCAMaterial, "the issuing key does not match the issuing certificate")
        }
        guard case .isCertificateAuthority? = try? issuer.extensions.basicConstraints else {
            throw PeerCAError(.invalidCAMaterial, "the issuing certificate is not a CA certificate (basicConstraints CA:TRUE)")
        }
        guard root.issuer == root.subject, root.publicKey.isValidSignature(root.signature, for: root) else {
            throw PeerCAError(.invalidCAMaterial, "the root certificate is not self-signed")
        }
        if issuer != root {
            guard issuer.issuer == root.subject, root.publicKey.isValidSignature(issuer.signature, for: issuer) else {
                throw PeerCAError(.invalidCAMaterial, "the issuing certificate was not signed by the root")
            }
        }
        self.root = root
        self.issuer = issuer
        self.issuerKey = issuerKey
        self.signatureAlgorithm = PublicKeyKind(issuer.publicKey).signatureAlgorithm
        if signatureAlgorithm == .ecdsaWithSHA256, let pem = try? issuerKey.serializeAsPEM(),
            let key = try? P256.Signing.PrivateKey(derRepresentation: pem.derBytes), key.publicKey.rawRepresentation == P256.Signing.PublicKey(issuer.publicKey)?.rawRepresentation
        {
            p256IssuerKey = key
        } else {
            p256IssuerKey = nil
        }
    }

    /// Loads a CA from PEM: the root certificate, the issuing certificate (the same text as the
    /// root when the root issues) and the issuing key (PKCS#8, SEC1 or PKCS#1; an `ENCRYPTED
    /// PRIVATE KEY` needs `passphrase`).
    public init(rootPEM: String, issuerCertificatePEM: String, issuerKeyPEM: String, passphrase: String? = nil) throws(PeerCAError) {
        let root: Certificate, issuer: Certificate, key: Certificate.PrivateKey
        var issuerKeyPEM = issuerKeyPEM
        if EncryptedPrivateKey.isEncrypted(issuerKeyPEM) {
            guard let passphrase else { throw PeerCAError(.invalidCAMaterial, "the issuing key is encrypted; a passphrase is needed") }
            do { issuerKeyPEM = try EncryptedPrivateKey.decrypt(issuerKeyPEM, passphrase: passphrase) } catch {
                throw PeerCAError(.invalidCAMaterial, "cannot decrypt the issuing key: \(error.message)")
            }
        }
        do { root = try Certificate(pemEncoded: rootPEM) } catch { throw PeerCAError(.invalidCAMaterial, "the root is not a PEM certificate") }
        do { issuer = try Certificate(pemEncoded: issuerCertificatePEM) } catch {
            throw PeerCAError(.invalidCAMaterial, "the issuing certificate is not a PEM certificate")
        }
        do { key = try Certificate.PrivateKey(pemEncoded: issuerKeyPEM) } catch {
            throw PeerCAError(.invalidCAMaterial, "the issuing key is not a PEM private key")
        }
        try self.init(root: root, issuer: issuer, issuerKey: key)
    }

    /// Signs `bytes` (a leaf's TBSCertificate, a CRL's or an OCSP response's signed part) with the
    /// issuing key: the signature's DER.
    func sign(_ bytes: [UInt8]) throws(PeerCAError) -> [UInt8] {
        if let p256IssuerKey {
            do { return ECDSASignatureDER.encode(raw: try p256IssuerKey.signature(for: SHA256.hash(data: bytes)).rawRepresentation) } catch {
                throw PeerCAError(.invalidCAMaterial, "the issuing key could not sign")
            }
        }
        do { return try issuerKey.sign(bytes: bytes, signatureAlgorithm: signatureAlgorithm).rawRepresentation } catch {
            throw PeerCAError(.invalidCAMaterial, "the issuing key could not sign")
        }
    }

    static func makeCACertificate(
        subject: DistinguishedName, publicKey: Certificate.PublicKey, issuer: DistinguishedName, issuerKey: Certificate.PrivateKey,
        issuerSKI: ArraySlice<UInt8>?, pathLength: Int, notBefore: Date, notAfter: Date
    ) throws(PeerCAError) -> Certificate {
        do {
            let extensions = try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: pathLength))
                Critical(KeyUsage(digitalSignature: true, keyCertSign: true, cRLSign: true))
                SubjectKeyIdentifier(hash: publicKey)
                if let issuerSKI { AuthorityKeyIdentifier(keyIdentifier: issuerSKI) }
            }
            return try Certificate(
                version: .v3, serialNumber: SerialNumbers.random(), publicKey: publicKey, notValidBefore: notBefore, notValidAfter: notAfter,
                issuer: issuer, subject: subject, signatureAlgorithm: PublicKeyKind(issuerKey.publicKey).signatureAlgorithm,
                extensions: extensions, issuerPrivateKey: issuerKey)
        } catch {
            throw PeerCAError(.invalidCAMaterial, "cannot sign the CA certificate (\(error))")
        }
    }
}
