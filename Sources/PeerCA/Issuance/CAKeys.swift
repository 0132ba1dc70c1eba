import Crypto
import _CryptoExtras
import SwiftASN1
import Foundation
import TokenKit
public import X509

/// The key types a CA can be created with.
public enum CAKeyAlgorithm: String, Sendable, CaseIterable, Hashable {
    /// ECDSA P-256 with SHA-256 (the default: fast, small, universally supported).
    case p256
    /// ECDSA P-384 with SHA-384.
    case p384
    /// Ed25519.
    case ed25519
    /// RSA 3072 with PKCS#1 v1.5 and SHA-256 (about 30× slower to sign than P-256).
    case rsa3072

    /// A new private key of this type.
    public func generate() throws(PeerCAError) -> Certificate.PrivateKey {
        switch self {
        case .p256: return Certificate.PrivateKey(P256.Signing.PrivateKey())
        case .p384: return Certificate.PrivateKey(P384.Signing.PrivateKey())
        case .ed25519: return Certificate.PrivateKey(Curve25519.Signing.PrivateKey())
        case .rsa3072:
            do { return Certificate.PrivateKey(try _RSA.Signing.PrivateKey(keySize: .bits3072)) } catch {
                throw PeerCAError(.invalidCAMaterial, "RSA key generation failed")
            }
        }
    }
}

/// What kind of public key a certificate or CSR carries.
public enum PublicKeyKind: Sendable, Hashable, CustomStringConvertible {
    case p256, p384, p521, ed25519
    case rsa(bits: Int)

    public init(_ key: Certificate.PublicKey) {
        if P256.Signing.PublicKey(key) != nil { self = .p256 }
        else if P384.Signing.PublicKey(key) != nil { self = .p384 }
        else if P521.Signing.PublicKey(key) != nil { self = .p521 }
        else if Curve25519.Signing.PublicKey(key) != nil { self = .ed25519 }
        else { self = .rsa(bits: _RSA.Signing.PublicKey(key)?.keySizeInBits ?? 0) }
    }

    public var description: String {
        switch self {
        case .p256: "P-256"
        case .p384: "P-384"
        case .p521: "P-521"
        case .ed25519: "Ed25519"
        case .rsa(let bits): "RSA-\(bits)"
        }
    }

    /// The signature algorithm a key of this kind signs certificates with.
    var signatureAlgorithm: Certificate.SignatureAlgorithm {
        switch self {
        case .p256: .ecdsaWithSHA256
        case .p384: .ecdsaWithSHA384
        case .p521: .ecdsaWithSHA512
        case .ed25519: .ed25519
        case .rsa: .sha256WithRSAEncryption
        }
    }
}

extension Certificate.PublicKey {
    /// SHA-256 of the DER SubjectPublicKeyInfo, lower-case hex: the key's fingerprint in the ledger.
    public var sha256Fingerprint: String {
        var serializer = DER.Serializer()
        let der = (try? serializer.serialize(self)).map { serializer.serializedBytes } ?? Array(subjectPublicKeyInfoBytes)
        return Certificate.PublicKey.sha256Fingerprint(ofSubjectPublicKeyInfo: der)
    }

    /// The fingerprint of a DER SubjectPublicKeyInfo already encoded.
    static func sha256Fingerprint(ofSubjectPublicKeyInfo spki: [UInt8]) -> String { SHA256.hash(data: spki).withUnsafeBytes { Hex.encode($0) } }
}
