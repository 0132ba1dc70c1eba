public import Foundation
import SwiftASN1
public import TokenKit
@_spi(FixedExpiryValidationTime) public import X509

/// Who a verified peer certificate says the peer is.
public struct PeerCertificateIdentity: Sendable, Hashable {
    /// The SPIFFE ID from the URI SAN.
    public let spiffeID: String
    /// Its trust domain.
    public let trustDomain: String
    /// Its path (without the leading `/`).
    public let path: String
    /// The CN (account user ID), if present.
    public let commonName: String?
    /// Serial number, lower-case hex.
    public let serial: String
    public let notAfter: Date
}

/// Checks certificates that peers present: the chain must verify to one of the CA roots under
/// RFC 5280 (swift-certificates' `Verifier`), and the leaf must satisfy our policy — exactly one
/// SPIFFE URI SAN in the expected trust domain, EKU for the role (clientAuth for a peer that
/// connects to us, serverAuth for one we connect to), `CA:FALSE` and no keyCertSign, not revoked
/// per the latest CRL. The CA certificates above it must assert keyCertSign if they carry a key
/// usage extension. Validity periods are checked at the time `clock` reads when
/// ``verify(chain:role:)`` is called (the system clock unless another is given), in whole seconds.
/// A presented chain may carry at most ``maxIntermediates`` certificates after the leaf.
///
/// ```swift
/// let verifier = PeerVerifier(roots: [caRoot], trustDomain: "app-1234.peers.example", revocations: crl)
/// let peer = try await verifier.verify(chain: presentedChain, role: .client)
/// print(peer.spiffeID)
/// ```
public struct PeerVerifier: Sendable {
    /// Which side the peer plays in the TLS connection.
    public enum Role: Sendable {
        /// The peer connected to us: its certificate needs EKU clientAuth.
        case client
        /// We connected to the peer: its certificate needs EKU serverAuth.
        case server
    }

    public let roots: [Certificate]
    /// Expected trust domain; nil accepts any trust domain (still one SPIFFE URI SAN).
    public let trustDomain: String?
    /// The latest CRL, already verified against its CA. It applies to the certificates that CA
    /// issued (leaf issuer name = CRL issuer name); for those, its signer's key must be that of the
    /// leaf's issuer in the validated path (not of a certificate the peer merely sent along), and
    /// it must be current (thisUpdate ≤ now + ``crlClockSkew``, now ≤ nextUpdate) or the leaf is
    /// refused, as OpenSSL's `crl_check` refuses an expired CRL: an old CRL, replayed from before
    /// a revocation, would otherwise hide it. So a verifier must be made again with the CA's
    /// latest CRL before its nextUpdate (a ``PeerTLS`` takes it in place:
    /// ``PeerTLS/updateRevocations(_:)``) — the CA's `GET /v1/crl` gives a new one at least every
    /// half validity.
    public let revocations: RevocationList?
    /// Where the verification time comes from: every certificate in the chain must be within its
    /// validity period (notBefore through notAfter, inclusive) at the time read when a chain is verified.
    public let clock: VerificationClock

    /// - Parameters:
    ///   - roots: The trusted CA roots.
    ///   - trustDomain: The SPIFFE trust domain peers must be in; nil accepts any.
    ///   - revocations: The latest CRL, already verified against its CA.
    ///   - clock: The verification time for validity periods; the system clock by default. Give a
    ///     fixed clock (`VerificationClock.fixed(_:)`) to verify as of another time.
    public init(roots: [Certificate], trustDomain: String? = nil, revocations: RevocationList? = nil, clock: VerificationClock = .system) {
        self.roots = roots
        self.trustDomain = trustDomain
        self.revocations = revocations
        self.clock = clock
    }

    /// How far a CRL's thisUpdate may lie ahead of the verification time (the CA's clock ahead of
    /// this one): 300 s, as far as the CA backdates a certificate's notBefore.
    public static let crlClockSkew: TimeInterval = 300

    /// The most certificates a presented chain may carry after the leaf. Path building tries every
    /// presented certificate with the right subject as an issuer: 100 intermediates sharing one
    /// subject (x509-limbo's pathological chains) kept the verifier busy for 12 s before it
    /// refused, and certificates sharing subject and key make every ordering a candidate path
    /// (debug build: 4 take 40 ms, 6 take 2 s, 7 take 15 s). Our CA's chains carry one
    /// intermediate (two if the root is sent along).
    public static let maxIntermediates = 4

    /// The leaf's one `spiffe://` URI SAN, or nil (none, or more than one URI), as verification reads it.
    package static func spiffeURI(_ leaf: Certificate) -> String? { PeerLeafPolicy.spiffeURI(leaf) }

    /// Verifies a presented chain (leaf first) and returns the peer's identity.
    public func verify(chain: [Certificate], role: Role) async throws(PeerCAError) -> PeerCertificateIdentity {
        try await verifiedPath(chain: chain, role: role).identity
    }

    /// ``verify(chain:role:)``, with the path it validated: leaf first, the root last. (``PeerTLS``
    /// keeps the CA certificates of validated paths, not whatever else a peer sent along.)
    func verifiedPath(chain: [Certificate], role: Role) async throws(PeerCAError) -> (identity: PeerCertificateIdentity, path: [Certificate]) {
        guard let leaf = chain.first else { throw PeerCAError(.untrustedPeer, "the peer presented no certificate") }
        let result = try await validate(leaf: leaf, intermediates: Array(chain.dropFirst()), role: role, requireSPIFFEID: true)
        let path: [Certificate]
        switch result {
        case .validCertificate(let validated):
            path = Array(validated)
        case .couldNotValidate(let failures):
            let reasons = failures.map { "\($0.policyFailureReason)" }
            if reasons.contains(PeerLeafPolicy.revokedReason) {
                throw PeerCAError(.revoked, "the peer's certificate \(SerialNumbers.hex(leaf.serialNumber)) is revoked")
            }
            let detail = reasons.isEmpty ? "it does not chain to a trusted root" : reasons.joined(separator: "; ")
            throw PeerCAError(.untrustedPeer, "the peer's certificate is not acceptable: \(detail.prefix(400))")
        }
        guard let uri = PeerLeafPolicy.spiffeURI(leaf), let parts = SPIFFE.parse(uri) else {
            throw PeerCAError(.untrustedPeer, "the peer's certificate has no SPIFFE ID")
        }
        let commonName = leaf.subject.flatMap { $0 }.first { $0.type == .RDNAttributeType.commonName }.flatMap { String($0.value) }
        let identity = PeerCertificateIdentity(
            spiffeID: uri, trustDomain: parts.trustDomain, path: parts.path, commonName: commonName,
            serial: SerialNumbers.hex(leaf.serialNumber), notAfter: leaf.notValidAfter)
        return (identity, path)
    }

    /// The path validation of ``verify(chain:role:)``: RFC 5280 (swift-certificates' `Verifier` and
    /// `RFC5280Policy`, at the time `clock` reads) and ``PeerLeafPolicy``. With `requireSPIFFEID`
    /// false, the leaf's SPIFFE ID rules (exactly one SPIFFE URI SAN, the trust domain) are left out
    /// and everything else is the same (EKU for the role, leaf not a CA, CA key usage, not revoked,
    /// the ``maxIntermediates`` bound). Internal: the public API always requires the SPIFFE ID; the
    /// x509-limbo tests, whose leaves carry DNS or IP names, run the rest of the checks through it.
    func validate(
        leaf: Certificate, intermediates: [Certificate], role: Role, requireSPIFFEID: Bool
    ) async throws(PeerCAError) -> CertificateValidationResult {
        guard intermediates.count <= Self.maxIntermediates else {
            throw PeerCAError(
                .untrustedPeer, "the peer presented \(intermediates.count) certificates after its own; at most \(Self.maxIntermediates) are accepted")
        }
        // Whole seconds, as certificate times are encoded (RFC 5280 §4.1.2.5): swift-certificates
        // would round a fractional time to the nearest second, accepting a certificate up to half a
        // second before its notBefore.
        let validationTime = Date(timeIntervalSince1970: clock.now.rounded(.down))
        var verifier = Verifier(rootCertificates: CertificateStore(roots)) {
            RFC5280Policy(fixedExpiryValidationTime: validationTime)
            PeerLeafPolicy(
                trustDomain: trustDomain, role: role, revocations: revocations, requireSPIFFEID: requireSPIFFEID, validationTime: validationTime)
        }
        return await verifier.validate(leaf: leaf, intermediates: CertificateStore(intermediates))
    }

    /// Verifies a chain given as DER certificates (what TLS hands over), leaf first.
    public func verify(derChain: [[UInt8]], role: Role) async throws(PeerCAError) -> PeerCertificateIdentity {
        try await verify(chain: try Self.certificates(derChain), role: role)
    }

    /// DER certificates parsed; a malformed one is the peer's fault.
    static func certificates(_ derChain: [[UInt8]]) throws(PeerCAError) -> [Certificate] {
        var chain: [Certificate] = []
        for der in derChain {
            do { chain.append(try Certificate(derEncoded: der)) } catch { throw PeerCAError(.untrustedPeer, "the peer sent a malformed certificate") }
        }
        return chain
    }
}

/// Our policy on top of RFC 5280: the leaf's requirements, and key usage of the CA certificates.
struct PeerLeafPolicy: VerifierPolicy {
    let trustDomain: String?
    let role: PeerVerifier.Role
    let revocations: RevocationList?
    /// Whether the leaf must name exactly one SPIFFE ID (in `trustDomain`, if set). Always true
    /// for ``PeerVerifier/verify(chain:role:)``.
    let requireSPIFFEID: Bool
    /// The time the CRL must be current at (the chain's validation time).
    let validationTime: Date

    let verifyingCriticalExtensions: [ASN1ObjectIdentifier] = [
        .X509ExtensionID.extendedKeyUsage, .X509ExtensionID.subjectAlternativeName, .X509ExtensionID.keyUsage,
    ]

    static func spiffeURI(_ leaf: Certificate) -> String? {
        guard let names = try? leaf.extensions.subjectAlternativeNames else { return nil }
        let uris = names.compactMap { name -> String? in
            if case .uniformResourceIdentifier(let uri) = name { return uri }
            return nil
        }
        guard uris.count == 1, let uri = uris.first, uri.hasPrefix("spiffe://") else { return nil }
        return uri
    }

    /// The keyCertSign bit of the certificate's key usage: nil without the extension, a failure if
    /// the extension does not parse.
    static func keyCertSign(_ certificate: Certificate) -> Result<Bool?, any Error> {
        Result { try certificate.extensions.keyUsage?.keyCertSign }
    }

    /// The reason this policy gives for a revoked leaf; ``PeerVerifier`` maps it to
    /// ``PeerCAError/Code/revoked`` (our own text, compared whole).
    static let revokedReason = "the leaf is revoked"

    func chainMeetsPolicyRequirements(chain: UnverifiedCertificateChain) async -> PolicyEvaluationResult {
        let leaf = chain.leaf
        // A malformed basic constraints extension is refused, not read as "not a CA" (OpenSSL
        // reads `30060101FF020101FF`, trailing bytes and all, as CA:TRUE).
        switch Result(catching: { try leaf.extensions.basicConstraints }) {
        case .failure: return .failsToMeetPolicy(reason: "the leaf's basic constraints extension is malformed")
        case .success(.isCertificateAuthority?): return .failsToMeetPolicy(reason: "the leaf is a CA certificate")
        case .success: break
        }
        // RFC 5280 §4.2.1.9: a certificate that is not a CA must not assert keyCertSign.
        switch Self.keyCertSign(leaf) {
        case .failure: return .failsToMeetPolicy(reason: "the leaf's key usage extension is malformed")
        case .success(true?): return .failsToMeetPolicy(reason: "the leaf's key usage asserts keyCertSign")
        case .success: break
        }
        // RFC 5280 §6.1.4 (n): a CA certificate with a key usage extension must assert keyCertSign
        // to have signed the certificate below it; swift-certificates' RFC5280Policy does not check
        // key usage. The root is held to it too (x509-limbo rfc5280::root-inconsistent-ca-extensions).
        for issuer in chain.dropFirst() {
            switch Self.keyCertSign(issuer) {
            case .failure: return .failsToMeetPolicy(reason: "a CA certificate's key usage extension is malformed")
            case .success(false?): return .failsToMeetPolicy(reason: "a CA certificate's key usage lacks keyCertSign")
            case .success: break
            }
        }
        guard let usage = try? leaf.extensions.extendedKeyUsage else {
            return .failsToMeetPolicy(reason: "the leaf has no extended key usage")
        }
        let needed: ExtendedKeyUsage.Usage = role == .client ? .clientAuth : .serverAuth
        guard usage.contains(needed) else {
            return .failsToMeetPolicy(reason: "the leaf's extended key usage lacks \(role == .client ? "clientAuth" : "serverAuth")")
        }
        if requireSPIFFEID {
            guard let uri = PeerLeafPolicy.spiffeURI(leaf), let parts = SPIFFE.parse(uri), !parts.path.isEmpty else {
                return .failsToMeetPolicy(reason: "the leaf does not name exactly one SPIFFE ID")
            }
            if let trustDomain, parts.trustDomain != trustDomain {
                return .failsToMeetPolicy(reason: "the leaf's trust domain is \(parts.trustDomain), not \(trustDomain)")
            }
        }
        // A serial number names a certificate only together with its issuer (RFC 5280 §4.1.2.2):
        // the CRL speaks for the certificates of the CA that issued it, not for another CA's
        // (x509-limbo crl::certificate-serial-on-crl-different-issuer). For its own CA's it must
        // be signed by that CA's key as the validated path has it (not by a certificate of the
        // same name that the peer sent along), and be current: an old CRL, from before a
        // revocation, hid it.
        if let revocations, revocations.issuer == leaf.issuer {
            guard let issuer = chain.dropFirst().first, issuer.publicKey == revocations.signerKey else {
                return .failsToMeetPolicy(reason: "the CRL names the leaf's issuer but is not signed by its key")
            }
            // thisUpdate is the CA's clock: a device a little behind it must not refuse every peer
            // for a while after each new CRL (certificates are backdated for the same reason).
            if let notCurrent = revocations.notCurrent(at: validationTime) {
                return .failsToMeetPolicy(reason: "\(notCurrent)): fetch the CA's latest")
            }
            if revocations.isRevoked(leaf.serialNumber) { return .failsToMeetPolicy(reason: PeerLeafPolicy.revokedReason) }
        }
        return .meetsPolicy
    }
}
