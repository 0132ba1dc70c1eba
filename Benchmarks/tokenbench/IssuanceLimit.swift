import COpenSSL
import Foundation
import PeerCA
import TokenKit

/// The limit of issuance, with OpenSSL directly: per certificate, the crypto no CA can skip — the
/// CSR's self-signature (SHA-256 over its CertificationRequestInfo, then ECDSA P-256 verify with
/// the CSR's key) and one ECDSA P-256 signature with the CA key over a precomputed TBS digest.
/// Keys are parsed once (one verify context per CSR key, one sign context for the CA key), the
/// CSRs taken apart beforehand. No token, no certificate building, no ledger.
final class IssuanceLimit {
    /// Per CSR: the signed part (CertificationRequestInfo DER), the signature (DER), and a verify
    /// context for its key.
    private let requestInfos: [[UInt8]]
    private let signatures: [[UInt8]]
    private let verifyContexts: [OpaquePointer]
    private let csrKeys: [OpaquePointer]
    /// The CA's issuing key and a sign context for it.
    private let caKey: OpaquePointer
    private let signContext: OpaquePointer
    private let md: OpaquePointer
    /// SHA-256 of a real leaf's TBSCertificate.
    private let tbsDigest: [UInt8]

    /// - Parameters:
    ///   - csrs: the devices' CSRs, PEM.
    ///   - caKeyPEM: the issuing key (PKCS#8 PEM).
    ///   - leafDER: a certificate that key issued; its TBS digest is what gets signed.
    init(csrs: [[UInt8]], caKeyPEM: String, leafDER: [UInt8]) throws {
        let tbs = try DERWalk.signed(leafDER).tbs
        var digest = [UInt8](repeating: 0, count: 32)
        _ = tbs.withUnsafeBufferPointer { t in digest.withUnsafeMutableBufferPointer { tt_sha2(32, t.baseAddress, t.count, $0.baseAddress) } }
        tbsDigest = digest
        guard let md = EVP_MD_fetch(nil, "SHA256", nil) else { throw BenchError("no SHA256") }
        self.md = md
        var infos: [[UInt8]] = [], signatures: [[UInt8]] = [], contexts: [OpaquePointer] = [], keys: [OpaquePointer] = []
        // Whatever was made before a throw is freed with the partial arrays.
        func freeAll() {
            contexts.forEach { EVP_PKEY_CTX_free($0) }
            keys.forEach { EVP_PKEY_free($0) }
            EVP_MD_free(md)
        }
        do {
            for pem in csrs {
                let der = try IssuanceWorkload.der(ofPEM: pem)
                let (info, signature, _) = try DERWalk.signed(der)
                let fields = try DERWalk.children(try DERWalk.element(info[...], at: 0).contents)
                guard fields.count >= 3, fields[2].tag == 0x30 else { throw BenchError("CSR: no SubjectPublicKeyInfo") }
                let spki = Array(fields[2].encoded)
                let key = spki.withUnsafeBufferPointer { buffer -> OpaquePointer? in
                    var cursor = buffer.baseAddress
                    return d2i_PUBKEY(nil, &cursor, buffer.count)
                }
                guard let key else { throw BenchError("CSR: OpenSSL cannot parse the key") }
                keys.append(key)
                guard let ctx = EVP_PKEY_CTX_new_from_pkey(nil, key, nil) else { throw BenchError("EVP_PKEY_CTX_new_from_pkey failed") }
                contexts.append(ctx)
                guard EVP_PKEY_verify_init(ctx) == 1, EVP_PKEY_CTX_set_signature_md(ctx, md) == 1 else { throw BenchError("EVP_PKEY_verify_init failed") }
                infos.append(info)
                signatures.append(signature)
            }
        } catch {
            freeAll()
            throw error
        }
        guard let keyDER = try? PEM.parse(caKeyPEM).first?.der else {
            freeAll()
            throw BenchError("the CA key is not PEM")
        }
        let parsed = keyDER.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            var cursor = buffer.baseAddress
            return d2i_AutoPrivateKey(nil, &cursor, buffer.count)
        }
        guard let parsed else {
            freeAll()
            throw BenchError("OpenSSL cannot parse the CA key")
        }
        guard let sctx = EVP_PKEY_CTX_new_from_pkey(nil, parsed, nil) else {
            EVP_PKEY_free(parsed)
            freeAll()
            throw BenchError("EVP_PKEY_CTX_new_from_pkey failed")
        }
        guard EVP_PKEY_sign_init(sctx) == 1, EVP_PKEY_CTX_set_signature_md(sctx, md) == 1 else {
            EVP_PKEY_CTX_free(sctx)
            EVP_PKEY_free(parsed)
            freeAll()
            throw BenchError("EVP_PKEY_sign_init failed")
        }
        caKey = parsed
        signContext = sctx
        requestInfos = infos
        self.signatures = signatures
        verifyContexts = contexts
        csrKeys = keys
    }

    deinit {
        verifyContexts.forEach { EVP_PKEY_CTX_free($0) }
        csrKeys.forEach { EVP_PKEY_free($0) }
        EVP_PKEY_CTX_free(signContext)
        EVP_PKEY_free(caKey)
        EVP_MD_free(md)
    }

    var count: Int { requestInfos.count }

    /// Verifies CSR `i`'s self-signature, then signs the TBS digest with the CA key.
    func issue(_ i: Int) -> Bool {
        var signature = (UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        return withUnsafeMutableBytes(of: &signature) { out in sign(into: out, csr: i) > 0 }
    }

    /// ``issue(_:)``, writing the CA signature into `out` (at least 72 bytes); its length, 0 on failure.
    private func sign(into out: UnsafeMutableRawBufferPointer, csr i: Int) -> Int {
        var digest = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        let verified = withUnsafeMutableBytes(of: &digest) { d -> Bool in
            let p = d.baseAddress?.assumingMemoryBound(to: UInt8.self)
            return requestInfos[i].withUnsafeBufferPointer { info in
                signatures[i].withUnsafeBufferPointer { sig in
                    tt_sha2(32, info.baseAddress, info.count, p) == 32
                        && EVP_PKEY_verify(verifyContexts[i], sig.baseAddress, sig.count, p, 32) == 1
                }
            }
        }
        guard verified else { return 0 }
        var length = out.count
        let ok = tbsDigest.withUnsafeBufferPointer { t in
            EVP_PKEY_sign(signContext, out.baseAddress?.assumingMemoryBound(to: UInt8.self), &length, t.baseAddress, t.count) == 1
        }
        return ok ? length : 0
    }

    /// Refuses to time a limit that does not do its work: every CSR must verify, the signature
    /// made must verify (OpenSSL) with the public key of `issuerCertificateDER` over the leaf's
    /// TBS, and a CSR whose signed part has one flipped bit must fail.
    func check(issuerCertificateDER: [UInt8]) throws {
        for i in 0..<count where !issue(i) { throw BenchError("limit check: CSR \(i) did not verify") }
        var out = [UInt8](repeating: 0, count: 80)
        let length = out.withUnsafeMutableBytes { sign(into: $0, csr: 3) }
        guard length > 0 else { throw BenchError("limit check: no signature") }
        // The issuing certificate's key, as OpenSSL reads it from the certificate.
        let certificate = issuerCertificateDER.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            var cursor = buffer.baseAddress
            return d2i_X509(nil, &cursor, buffer.count)
        }
        guard let certificate else { throw BenchError("limit check: OpenSSL cannot parse the issuing certificate") }
        defer { X509_free(certificate) }
        guard let publicKey = X509_get0_pubkey(certificate), let ctx = EVP_PKEY_CTX_new_from_pkey(nil, publicKey, nil) else {
            throw BenchError("limit check: no issuing key")
        }
        defer { EVP_PKEY_CTX_free(ctx) }
        let verifies = tbsDigest.withUnsafeBufferPointer { d in
            EVP_PKEY_verify_init(ctx) == 1 && EVP_PKEY_CTX_set_signature_md(ctx, md) == 1
                && EVP_PKEY_verify(ctx, out, length, d.baseAddress, d.count) == 1
        }
        guard verifies else { throw BenchError("limit check: the CA signature does not verify with the issuing certificate's key") }
        // A flipped bit in the signed part of a CSR must fail its verification.
        var info = requestInfos[5]
        info[info.count / 2] ^= 0x01
        var digest = [UInt8](repeating: 0, count: 32)
        let tampered = info.withUnsafeBufferPointer { i in
            digest.withUnsafeMutableBufferPointer { d in
                signatures[5].withUnsafeBufferPointer { s in
                    tt_sha2(32, i.baseAddress, i.count, d.baseAddress) == 32
                        && EVP_PKEY_verify(verifyContexts[5], s.baseAddress, s.count, d.baseAddress, 32) == 1
                }
            }
        }
        if tampered { throw BenchError("limit check: a CSR with a flipped bit verified") }
    }
}
