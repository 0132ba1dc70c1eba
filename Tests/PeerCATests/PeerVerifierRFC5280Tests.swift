import Foundation
@testable import PeerCA
import TestSupport
import Testing
import TokenKit
import X509

/// Hand-built chains (roots, intermediates and SPIFFE leaves that our CA would never issue), run
/// through the public ``PeerVerifier/verify(chain:role:)``: the RFC 5280 rules PeerVerifier adds
/// to swift-certificates' RFC5280Policy, each found by the x509-limbo vectors (LimboTests).
@Suite("PeerVerifier: RFC 5280 rules beyond swift-certificates")
struct PeerVerifierRFC5280Tests {
    /// One certificate authority or peer key with its name.
    struct Party {
        let name: DistinguishedName
        let key: Certificate.PrivateKey

        init(_ commonName: String, key: Certificate.PrivateKey? = nil) throws {
            name = try DistinguishedName { CommonName(commonName) }
            self.key = try key ?? CAKeyAlgorithm.p256.generate()
        }
    }

    static let spiffeID = "spiffe://app-1234.peers.example/idp.example/alice"
    static let start = Date(timeIntervalSince1970: 1_700_000_000)
    static let end = Date(timeIntervalSince1970: 1_900_000_000)

    static func certificate(
        _ subject: Party, issuedBy issuer: Party, serial: Certificate.SerialNumber = .init(),
        notBefore: Date = start, notAfter: Date = end, extensions: Certificate.Extensions
    ) throws -> Certificate {
        try Certificate(
            version: .v3, serialNumber: serial, publicKey: subject.key.publicKey, notValidBefore: notBefore, notValidAfter: notAfter,
            issuer: issuer.name, subject: subject.name, signatureAlgorithm: .ecdsaWithSHA256, extensions: extensions,
            issuerPrivateKey: issuer.key)
    }

    static func ca(_ subject: Party, issuedBy issuer: Party, keyUsage: KeyUsage = KeyUsage(keyCertSign: true, cRLSign: true)) throws -> Certificate {
        try certificate(subject, issuedBy: issuer, extensions: try Certificate.Extensions {
            Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
            Critical(keyUsage)
        })
    }

    static func leaf(
        _ subject: Party, issuedBy issuer: Party, serial: Certificate.SerialNumber = .init(), notBefore: Date = start, notAfter: Date = end,
        keyUsage: KeyUsage = KeyUsage(digitalSignature: true), extraNames: [GeneralName] = []
    ) throws -> Certificate {
        try certificate(subject, issuedBy: issuer, serial: serial, notBefore: notBefore, notAfter: notAfter, extensions: try Certificate.Extensions {
            Critical(BasicConstraints.notCertificateAuthority)
            Critical(keyUsage)
            try ExtendedKeyUsage([.clientAuth, .serverAuth])
            SubjectAlternativeNames([.uniformResourceIdentifier(spiffeID)] + extraNames)
        })
    }

    static let now = VerificationClock.fixed(1_800_000_000)

    static func refusal(_ verifier: PeerVerifier, _ chain: [Certificate]) async -> PeerCAError? {
        do {
            _ = try await verifier.verify(chain: chain, role: .client)
            return nil
        } catch {
            return error
        }
    }

    /// RFC 5280 §6.1.4 (n): an intermediate whose key usage lacks keyCertSign cannot have issued
    /// the leaf. swift-certificates does not check key usage, and PeerVerifier accepted such a chain.
    @Test func aCACertificateWithoutKeyCertSignIssuesNothing() async throws {
        let root = try Party("Root"), intermediate = try Party("Intermediate"), alice = try Party("alice")
        let rootCertificate = try Self.ca(root, issuedBy: root)
        let leaf = try Self.leaf(alice, issuedBy: intermediate)
        let verifier = PeerVerifier(roots: [rootCertificate], clock: Self.now)

        let signing = try Self.ca(intermediate, issuedBy: root)
        #expect(try await verifier.verify(chain: [leaf, signing], role: .client).spiffeID == Self.spiffeID)

        let notSigning = try Self.ca(intermediate, issuedBy: root, keyUsage: KeyUsage(digitalSignature: true, cRLSign: true))
        let refused = await Self.refusal(verifier, [leaf, notSigning])
        #expect(refused?.code == .untrustedPeer)
        #expect(refused?.message.contains("lacks keyCertSign") == true, "\(String(describing: refused))")

        // The root is held to it as well.
        let inconsistentRoot = try Self.ca(root, issuedBy: root, keyUsage: KeyUsage(digitalSignature: true))
        let direct = try Self.leaf(alice, issuedBy: root)
        let strictRoot = await Self.refusal(PeerVerifier(roots: [inconsistentRoot], clock: Self.now), [direct])
        #expect(strictRoot?.message.contains("lacks keyCertSign") == true, "\(String(describing: strictRoot))")
    }

    /// RFC 5280 §4.2.1.9: a leaf that is not a CA must not assert keyCertSign.
    @Test func aLeafAssertingKeyCertSignIsRefused() async throws {
        let root = try Party("Root"), alice = try Party("alice")
        let verifier = PeerVerifier(roots: [try Self.ca(root, issuedBy: root)], clock: Self.now)
        let leaf = try Self.leaf(alice, issuedBy: root, keyUsage: KeyUsage(digitalSignature: true, keyCertSign: true))
        let refused = await Self.refusal(verifier, [leaf])
        #expect(refused?.message.contains("asserts keyCertSign") == true, "\(String(describing: refused))")
        _ = try await verifier.verify(chain: [try Self.leaf(alice, issuedBy: root)], role: .client)
    }

    /// The verification time is taken in whole seconds: swift-certificates rounds a fractional
    /// time to the nearest second, which accepted a certificate up to half a second before its
    /// notBefore (x509-limbo rfc5280::validity::notbefore-fractional).
    @Test func validityIsCheckedInWholeSeconds() async throws {
        let root = try Party("Root"), alice = try Party("alice")
        let rootCertificate = try Self.ca(root, issuedBy: root)
        let notBefore = Date(timeIntervalSince1970: 1_800_000_000), notAfter = Date(timeIntervalSince1970: 1_800_000_100)
        let leaf = try Self.leaf(alice, issuedBy: root, notBefore: notBefore, notAfter: notAfter)
        func accepted(at seconds: Double) async -> Bool {
            await Self.refusal(PeerVerifier(roots: [rootCertificate], clock: .fixed(seconds)), [leaf]) == nil
        }
        #expect(await accepted(at: 1_799_999_999.4) == false)
        #expect(await accepted(at: 1_799_999_999.6) == false)  // rounded, this was notBefore itself
        #expect(await accepted(at: 1_800_000_000))  // notBefore and notAfter are inclusive
        #expect(await accepted(at: 1_800_000_100))
        #expect(await accepted(at: 1_800_000_100.7))  // still the second of notAfter
        #expect(await accepted(at: 1_800_000_101) == false)
        // The system clock by default.
        let current = try Self.leaf(alice, issuedBy: root, notBefore: Date() - 60, notAfter: Date() + 3600)
        _ = try await PeerVerifier(roots: [rootCertificate]).verify(chain: [current], role: .client)
        #expect(await Self.refusal(PeerVerifier(roots: [rootCertificate]), [leaf])?.code == .untrustedPeer)
    }

    /// A CRL lists serial numbers of its own issuer's certificates (a serial number names a
    /// certificate only together with its issuer, RFC 5280 §4.1.2.2): another CA's certificate with
    /// the same serial is not revoked by it (x509-limbo crl::certificate-serial-on-crl-different-issuer).
    @Test func aCRLRevokesOnlyItsIssuersCertificates() async throws {
        let caA = try Party("CA A"), caB = try Party("CA B"), alice = try Party("alice")
        let rootA = try Self.ca(caA, issuedBy: caA), rootB = try Self.ca(caB, issuedBy: caB)
        let serial = Certificate.SerialNumber()
        let fromA = try Self.leaf(alice, issuedBy: caA, serial: serial)
        let fromB = try Self.leaf(alice, issuedBy: caB, serial: serial)
        let authorityA = try CertificateAuthority(root: rootA, issuer: rootA, issuerKey: caA.key)
        let crl = try CRLEncoder.encode(
            authority: authorityA, number: 1, thisUpdate: Date(timeIntervalSince1970: 1_800_000_000 - 60),
            nextUpdate: Date(timeIntervalSince1970: 1_800_000_000 + 3600),
            revoked: [.init(serial: serial, at: Date(timeIntervalSince1970: 1_800_000_000 - 60), reason: .keyCompromise)])
        let verifier = PeerVerifier(roots: [rootA, rootB], revocations: try RevocationList(crl, issuer: rootA), clock: Self.now)
        #expect(await Self.refusal(verifier, [fromA])?.code == .revoked)
        #expect(try await verifier.verify(chain: [fromB], role: .client).serial == SerialNumbers.hex(serial))
    }

    /// A CRL of the leaf's issuer counts only when it is current and signed by that issuer's key
    /// in the validated path: an old CRL from before the revocation (replayed to hide it), one
    /// whose thisUpdate is still to come, and one signed by another key
    /// under the issuer's name (a certificate the peer sent along) are refused, not read as
    /// "not revoked". A current one from the issuer revokes; one from further in the future than
    /// ``PeerVerifier/crlClockSkew`` does not serve.
    @Test func aCRLMustBeCurrentAndSignedByTheLeafsIssuer() async throws {
        let ca = try Party("CA"), alice = try Party("alice")
        let root = try Self.ca(ca, issuedBy: ca)
        let authority = try CertificateAuthority(root: root, issuer: root, issuerKey: ca.key)
        let leaf = try Self.leaf(alice, issuedBy: ca)
        let t = 1_800_000_000.0
        func list(_ thisUpdate: Double, _ nextUpdate: Double, revoked: Bool = false, signer: Party? = nil) throws -> RevocationList {
            let entries: [CRLEncoder.Revoked] = revoked ? [.init(serial: leaf.serialNumber, at: Date(timeIntervalSince1970: thisUpdate), reason: .keyCompromise)] : []
            if let signer {
                // The issuer's name with another key: a self-signed impostor certificate.
                let impostor = try Self.ca(Party("CA", key: signer.key), issuedBy: Party("CA", key: signer.key))
                let impostorAuthority = try CertificateAuthority(root: impostor, issuer: impostor, issuerKey: signer.key)
                let der = try CRLEncoder.encode(
                    authority: impostorAuthority, number: 1, thisUpdate: Date(timeIntervalSince1970: thisUpdate),
                    nextUpdate: Date(timeIntervalSince1970: nextUpdate), revoked: entries)
                return try RevocationList(der, issuer: impostor)
            }
            let der = try CRLEncoder.encode(
                authority: authority, number: 1, thisUpdate: Date(timeIntervalSince1970: thisUpdate), nextUpdate: Date(timeIntervalSince1970: nextUpdate),
                revoked: entries)
            return try RevocationList(der, issuer: root)
        }
        func outcome(_ revocations: RevocationList) async -> String {
            let refused = await Self.refusal(PeerVerifier(roots: [root], revocations: revocations, clock: Self.now), [leaf])
            return refused.map { $0.code == .revoked ? "revoked" : $0.message } ?? "trusted"
        }
        #expect(await outcome(try list(t - 60, t + 3600)) == "trusted")
        #expect(await outcome(try list(t - 60, t + 3600, revoked: true)) == "revoked")
        let stale = await outcome(try list(t - 7200, t - 3600))
        #expect(stale.contains("the CRL is not current"), "\(stale)")
        // The CA's clock a little ahead of this one: up to crlClockSkew, not further.
        #expect(await outcome(try list(t + PeerVerifier.crlClockSkew, t + 3600)) == "trusted")
        let early = await outcome(try list(t + PeerVerifier.crlClockSkew + 60, t + 3600))
        #expect(early.contains("the CRL is not current"), "\(early)")
        let impostor = await outcome(try list(t - 60, t + 3600, signer: try Party("CA")))
        #expect(impostor.contains("not signed by its key"), "\(impostor)")
    }

    /// A leaf whose basic constraints extension does not parse is refused, not read as "not a
    /// CA": OpenSSL reads this one (a BOOLEAN TRUE and an INTEGER, then a stray byte) as CA:TRUE.
    @Test func aLeafWithMalformedBasicConstraintsIsRefused() async throws {
        let ca = try Party("CA"), alice = try Party("alice")
        let root = try Self.ca(ca, issuedBy: ca)
        let malformed = try Self.certificate(alice, issuedBy: ca, extensions: try Certificate.Extensions {
            Certificate.Extension(oid: .X509ExtensionID.basicConstraints, critical: true, value: [0x30, 0x06, 0x01, 0x01, 0xFF, 0x02, 0x01, 0x01, 0xFF])
            Critical(KeyUsage(digitalSignature: true))
            try ExtendedKeyUsage([.clientAuth, .serverAuth])
            SubjectAlternativeNames([.uniformResourceIdentifier(Self.spiffeID)])
        })
        let refused = await Self.refusal(PeerVerifier(roots: [root], clock: Self.now), [malformed])
        #expect(refused?.message.contains("basic constraints extension is malformed") == true, "\(String(describing: refused))")
        #expect(await Self.refusal(PeerVerifier(roots: [root], clock: Self.now), [try Self.leaf(alice, issuedBy: ca)]) == nil)
    }

    /// A peer may send at most ``PeerVerifier/maxIntermediates`` certificates after its own:
    /// path building tried every presented certificate with a matching subject as an issuer, and
    /// x509-limbo's chain of 100 same-subject intermediates kept the verifier busy for 12 s. Within
    /// the cap, the worst case (certificates sharing subject and key, so each seems to have signed
    /// each other, with distinct SANs so none is taken for another) stays small.
    @Test(.timeLimit(.minutes(2))) func aPresentedChainIsBounded() async throws {
        let root = try Party("Root"), alice = try Party("alice")
        let verifier = PeerVerifier(roots: [try Self.ca(root, issuedBy: root)], clock: Self.now)
        let loopKey = try CAKeyAlgorithm.p256.generate()
        let loop = try Party("Loop", key: loopKey)
        let leaf = try Self.leaf(alice, issuedBy: loop)
        let tangle = try (0..<(PeerVerifier.maxIntermediates + 1)).map { index in
            try Self.certificate(loop, issuedBy: loop, extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                SubjectAlternativeNames([.dnsName("ca\(index).loop.example")])
            })
        }
        let tooMany = await Self.refusal(verifier, [leaf] + tangle)
        #expect(tooMany?.message.contains("at most \(PeerVerifier.maxIntermediates)") == true, "\(String(describing: tooMany))")

        // Bounded path building ends (an exponential search over the tangle would take hours:
        // the time limit is the check that it does not).
        let withinCap = await Self.refusal(verifier, [leaf] + tangle.dropLast())
        #expect(withinCap?.code == .untrustedPeer)
    }
}
