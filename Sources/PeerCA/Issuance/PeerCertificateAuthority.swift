public import Foundation
public import TokenKit
public import X509

/// A peer certificate the CA issued, and what to send the device.
public struct IssuedCertificate: Sendable {
    /// The leaf certificate.
    public let certificate: Certificate
    /// The leaf followed by the intermediate (if any): what the device presents to its peers.
    public let chain: [Certificate]
    /// The identity it certifies.
    public let identity: PeerIdentity
    /// Serial number, lower-case hex.
    public let serial: String
    public var notBefore: Date { certificate.notValidBefore }
    public var notAfter: Date { certificate.notValidAfter }
    /// The chain as PEM (leaf first).
    public var chainPEM: String { chain.map(\.pemString).joined() }
}

/// Turns verified tokens and CSRs into peer certificates, recorded in a ledger before they are
/// returned.
///
/// The certificate follows the SPIFFE X.509-SVID profile: one URI SAN with the identity's SPIFFE
/// ID, CN = the account's user ID, `CA:FALSE`, key usage digitalSignature, EKU serverAuth +
/// clientAuth, SKI/AKI; `notBefore` set back by ``IssuancePolicy/backdate``; `notAfter` the
/// earliest of the policy maximum, the token's `exp` and the requested validity. Names and
/// extensions the CSR asks for are ignored.
///
/// ```swift
/// let ca = PeerCertificateAuthority(authority: material.authority, policy: policy, ledger: try SQLiteLedger(path: "ledger.sqlite"))
/// let issued = try await ca.issue(token: verifiedToken, csr: Array(csrPEM.utf8))
/// print(issued.chainPEM)
/// ```
public final class PeerCertificateAuthority: Sendable {
    public let authority: CertificateAuthority
    public let policy: IssuancePolicy
    public let ledger: any CertificateLedger
    public let clock: VerificationClock

    public init(authority: CertificateAuthority, policy: IssuancePolicy, ledger: any CertificateLedger, clock: VerificationClock = .system) {
        self.authority = authority
        self.policy = policy
        self.ledger = ledger
        self.clock = clock
    }

    /// Issues a certificate for the key in `csr` (PEM or DER) to the identity `token` establishes.
    ///
    /// - Parameters:
    ///   - token: the verified token the identity comes from.
    ///   - csr: the device's PKCS#10 request, PEM or DER.
    ///   - validity: a shorter lifetime than the policy allows, in seconds.
    public func issue(token: VerifiedToken, csr: [UInt8], validity: TimeInterval? = nil) async throws(PeerCAError) -> IssuedCertificate {
        let request = try ValidatedCSR(csr)
        return try await issue(token: token, csr: request, validity: validity)
    }

    /// Issues a certificate for an already validated CSR.
    public func issue(token: VerifiedToken, csr: ValidatedCSR, validity: TimeInterval? = nil) async throws(PeerCAError) -> IssuedCertificate {
        let identity = try policy.identity(for: token, now: Date(timeIntervalSince1970: clock.now))
        return try await issue(identity: identity, csr: csr, validity: validity)
    }

    /// Issues a certificate to an identity established elsewhere (a server that derives
    /// identities with per-provider rules, ``IssuancePolicy/identity(for:now:)`` of its own copy of
    /// the policy). The trust domain must be this CA's; validity and token reuse follow this CA's
    /// policy.
    public func issue(identity: PeerIdentity, csr: ValidatedCSR, validity: TimeInterval? = nil) async throws(PeerCAError) -> IssuedCertificate {
        let now = Date(timeIntervalSince1970: clock.now)
        guard identity.trustDomain == policy.trustDomain else {
            throw PeerCAError(.policyViolation, "the identity is in trust domain \(identity.trustDomain), not this CA's \(policy.trustDomain)")
        }
        guard identity.expiresAt > now else { throw PeerCAError(.tokenExpired, "the token expired at \(identity.expiresAt)") }
        var notAfter = min(now.addingTimeInterval(policy.maximumValidity), identity.expiresAt)
        // Whole seconds: what a certificate can say.
        let second = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        if let validity {
            guard validity >= 1 else { throw PeerCAError(.policyViolation, "the requested validity must be at least 1 second") }
            notAfter = min(notAfter, second.addingTimeInterval(validity.rounded(.down)))
        }
        notAfter = min(notAfter, authority.issuer.notValidAfter)
        notAfter = Date(timeIntervalSince1970: notAfter.timeIntervalSince1970.rounded(.down))
        let notBefore = Date(timeIntervalSince1970: now.addingTimeInterval(-policy.backdate).timeIntervalSince1970.rounded(.down))
        guard notAfter.timeIntervalSince(second) >= 1 else { throw PeerCAError(.tokenExpired, "the token leaves no validity for a certificate") }

        var use: TokenUse?
        if policy.reuse(for: identity.issuer) == .oncePerTokenID {
            guard let jti = identity.tokenID, !jti.isEmpty else {
                throw PeerCAError(.policyViolation, "tokens from \(identity.issuer.prefix(80)) may be used once, so they must carry a \"jti\"")
            }
            use = TokenUse(issuer: identity.issuer, tokenID: jti)
        }
        for _ in 0..<4 {
            let serial = SerialNumbers.random()
            let certificate = try makeLeaf(serial: serial, identity: identity, publicKey: csr.publicKey, notBefore: notBefore, notAfter: notAfter)
            let entry = LedgerEntry(
                serial: SerialNumbers.hex(serial), subject: identity.spiffeID, commonName: identity.accountUID, tokenIssuer: identity.issuer,
                tokenSubject: identity.providerUID, tokenID: identity.tokenID, keyFingerprint: csr.publicKey.sha256Fingerprint,
                notBefore: notBefore, notAfter: notAfter, issuedAt: now, der: certificate.derBytes, provider: identity.provider)
            do {
                try await ledger.record(entry, claiming: use)
            } catch where error.code == .serialExists {
                continue  // 2^-127 per draw; draw again
            }
            return IssuedCertificate(
                certificate: certificate, chain: [certificate] + authority.intermediates, identity: identity, serial: entry.serial)
        }
        throw PeerCAError(.ledger, "could not draw a unique serial number")
    }

    func makeLeaf(
        serial: Certificate.SerialNumber, identity: PeerIdentity, publicKey: Certificate.PublicKey, notBefore: Date, notAfter: Date
    ) throws(PeerCAError) -> Certificate {
        do {
            let subject = try DistinguishedName { CommonName(identity.accountUID) }
            let issuerSKI = try authority.issuer.extensions.subjectKeyIdentifier?.keyIdentifier
                ?? SubjectKeyIdentifier(hash: authority.issuer.publicKey).keyIdentifier
            let extensions = try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.serverAuth, .clientAuth])
                SubjectKeyIdentifier(hash: publicKey)
                AuthorityKeyIdentifier(keyIdentifier: issuerSKI)
                SubjectAlternativeNames([.uniformResourceIdentifier(identity.spiffeID)])
            }
            return try Certificate(
                version: .v3, serialNumber: serial, publicKey: publicKey, notValidBefore: notBefore, notValidAfter: notAfter,
                issuer: authority.issuer.subject, subject: subject, signatureAlgorithm: authority.signatureAlgorithm,
                extensions: extensions, issuerPrivateKey: authority.issuerKey)
        } catch {
            throw PeerCAError(.invalidCAMaterial, "cannot sign the certificate (\(error))")
        }
    }

    /// Revokes a certificate by serial (hex).
    public func revoke(serial: String, reason: LedgerEntry.RevocationReason = .unspecified) async throws(PeerCAError) -> LedgerEntry {
        try await ledger.revoke(serial: serial, reason: reason, at: Date(timeIntervalSince1970: clock.now.rounded(.down)))
    }

    /// A signed CRL (DER) listing every revoked, unexpired certificate, valid for `validity` seconds.
    public func crl(validity: TimeInterval = 86_400) async throws(PeerCAError) -> [UInt8] {
        let now = Date(timeIntervalSince1970: clock.now.rounded(.down))
        let revoked = try await ledger.revoked(notExpiredAt: now)
        let number = try await ledger.nextCRLNumber()
        return try CRLEncoder.encode(
            authority: authority, number: number, thisUpdate: now, nextUpdate: now.addingTimeInterval(validity),
            revoked: revoked.compactMap { entry in
                guard case .revoked(let at, let reason) = entry.status, let serial = SerialNumbers.parse(entry.serial) else { return nil }
                return CRLEncoder.Revoked(serial: serial, at: at, reason: reason)
            })
    }

    /// An OCSP response (DER) for an OCSP request (DER), signed by the issuing CA. Malformed
    /// requests get a `malformedRequest` response, never an error.
    public func ocspResponse(for request: [UInt8], validity: TimeInterval = 3600) async -> [UInt8] {
        await OCSPResponder.respond(to: request, authority: authority, ledger: ledger, now: Date(timeIntervalSince1970: clock.now.rounded(.down)), validity: validity)
    }
}
