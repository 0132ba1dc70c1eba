import Foundation
@testable import PeerCA
import TestSupport
import Testing
import TokenKit

@Suite("CA keys encrypted with a passphrase")
struct KeyEncryptionTests {
    @Test func encryptedKeysRoundTripAndInteroperateWithOpenSSL() throws {
        let openssl = try OpenSSL()
        let material = try CertificateAuthority.create(name: "Sealed", algorithm: .p256, withIntermediate: true)
        let sealed = try material.issuerKeyPEM(passphrase: "correct horse battery")
        #expect(sealed.hasPrefix("-----BEGIN ENCRYPTED PRIVATE KEY-----"))
        #expect(!sealed.contains(try material.issuerKeyPEM()))
        try openssl.write("sealed.key", sealed)
        // openssl opens it with the passphrase, and not without.
        #expect(try openssl.run(["pkey", "-in", "sealed.key", "-passin", "pass:correct horse battery", "-noout"]).status == 0)
        #expect(try openssl.run(["pkey", "-in", "sealed.key", "-passin", "pass:wrong", "-noout"]).status != 0)
        let authority = material.authority
        let loaded = try CertificateAuthority(
            rootPEM: authority.root.pemString, issuerCertificatePEM: authority.issuer.pemString, issuerKeyPEM: sealed,
            passphrase: "correct horse battery")
        #expect(loaded.issuer == authority.issuer)
        for passphrase in ["wrong", nil] as [String?] {
            let error = #expect(throws: PeerCAError.self) {
                _ = try CertificateAuthority(
                    rootPEM: authority.root.pemString, issuerCertificatePEM: authority.issuer.pemString, issuerKeyPEM: sealed, passphrase: passphrase)
            }
            #expect(error?.code == .invalidCAMaterial)
            #expect(error.map { !$0.message.contains("BEGIN") } ?? false)
        }
        // A key openssl encrypted opens here.
        try openssl.write("plain.key", try material.issuerKeyPEM())
        try openssl.must(["pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", "plain.key", "-passout", "pass:from openssl", "-out", "theirs.key"])
        let theirs = String(decoding: try openssl.read("theirs.key"), as: UTF8.self)
        let opened = try EncryptedPrivateKey.decrypt(theirs, passphrase: "from openssl")
        _ = try CertificateAuthority(
            rootPEM: authority.root.pemString, issuerCertificatePEM: authority.issuer.pemString, issuerKeyPEM: opened)
        #expect(throws: TokenError.self) { _ = try EncryptedPrivateKey.encrypt(privateKeyPEM: try material.issuerKeyPEM(), passphrase: "") }
    }
}
