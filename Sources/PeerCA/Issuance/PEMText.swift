import Crypto
import Foundation
import SwiftASN1
import TokenKit
import X509

/// PEM text helpers.
public enum PEMText {
    /// DER bytes as a PEM block with `label` (e.g. `X509 CRL`).
    public static func encode(_ der: [UInt8], label: String) -> String {
        PEM.encode(label: label, der: der)
    }

    static func privateKey(_ key: Certificate.PrivateKey, passphrase: String? = nil) throws(PeerCAError) -> String {
        let pem: String
        do { pem = try key.serializeAsPEM().pemString + "\n" } catch { throw PeerCAError(.invalidCAMaterial, "the key cannot be written as PEM") }
        guard let passphrase else { return pem }
        do { return try EncryptedPrivateKey.encrypt(privateKeyPEM: pem, passphrase: passphrase) } catch {
            throw PeerCAError(.invalidCAMaterial, "cannot encrypt the key: \(error.message)")
        }
    }
}
