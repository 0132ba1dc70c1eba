public import Foundation
public import TokenKit
public import X509
import SwiftASN1
import Synchronization

/// A peer certificate the CA issued, and what to send the device.
///
/// The issuance path writes the certificate's DER and never builds a `Certificate` value (a
/// parse costs a third of a certificate signature): ``certificate`` and ``chain`` parse the DER
/// when asked.
public struct IssuedCertificate: Sendable {
    /// The leaf certificate, DER: what the ledger recorded.
    public let derBytes: [UInt8]
    /// The certificates sent after the leaf: the intermediate, if any.
    public let intermediates: [Certificate]
    /// The identity it certifies.
    public let identity: PeerIdentity
    /// Serial number, lower-case hex.
    public let serial: String
    /// The first second of validity.
    public let notBefore: Date
    /// The last second of validity.
    public let notAfter: Date
    /// The intermediates' PEM, made once per CA.
    let intermediatesPEM: String
    /// ``intermediatesPEM`` as a JSON string holds it (between the quotes), made once per CA.
    let intermediatesJSON: [UInt8]
    /// True when this is not a new certificate but the one the ledger already held for the same
    /// one-use token and the same key, given again to a retry of the request (its first answer
    /// was lost: a deadline, a dropped connection). See ``PeerCertificateAuthority/issue(identity:csr:validity:)``.
    public internal(set) var isRepeat = false

    /// The leaf certificate, parsed from ``derBytes``.
    public var certificate: Certificate {
        get throws(PeerCAError) {
            do { return try Certificate(derEncoded: derBytes) } catch {
                throw PeerCAError(.invalidCAMaterial, "the issued certificate does not parse (\(error))")
            }
        }
    }

    /// The leaf followed by the intermediate (if any): what the device presents to its peers.
    public var chain: [Certificate] {
        get throws(PeerCAError) { [try certificate] + intermediates }
    }

    /// The chain as PEM (leaf first).
    public var chainPEM: String { PEM.encode(label: "CERTIFICATE", der: derBytes) + intermediatesPEM }

    /// When the device should renew: two thirds into the validity left at `now` (the server side
    /// of `authenticationExpiringSoon`).
    public func renewAfter(now: Date = Date()) -> Date {
        let start = max(notBefore, now)
        return start.addingTimeInterval(notAfter.timeIntervalSince(start) * 2 / 3)
    }

    /// The JSON reply that hands this certificate to the device (`POST /v1/certificates` and its
    /// renewal), compact, members sorted by name: `certificate` (``chainPEM``), `identity`
    /// (``PeerIdentity/jsonValue``), `notAfter`, `renewAfter` (``renewAfter(now:)``), `renewalOf`
    /// (the serial it renews, when given), `serial`, `spiffeID`; times in ISO 8601.
    ///
    /// Written straight to bytes (TokenKit's `JSONObjectWriter`): building it as a `JSONValue` first (two
    /// dictionaries, their names hashed and sorted) cost about twice as much
    /// (`tokenbench --issuance-stages --filter reply`).
    public func replyJSON(renewalOf: String? = nil, now: Date = Date()) -> [UInt8] {
        let spiffeID = identity.spiffeID
        var reply = JSONObjectWriter(capacity: derBytes.count * 4 / 3 + derBytes.count / 24 + intermediatesJSON.count + 1200)
        // ``chainPEM``'s text, escaped as it is written (no String of it made, no scan for what to escape).
        reply.add("certificate") { text in
            PEM.appendJSONEscaped(label: "CERTIFICATE", der: derBytes, to: &text)
            text += intermediatesJSON
        }
        var identityObject = JSONObjectWriter(capacity: 512)
        identity.writeJSON(into: &identityObject, spiffeID: spiffeID)
        reply.add("identity", object: identityObject)
        reply.add("notAfter") { ISO8601Text.append(notAfter, to: &$0) }
        reply.add("renewAfter") { ISO8601Text.append(renewAfter(now: now), to: &$0) }
        if let renewalOf { reply.add("renewalOf", string: renewalOf) }
        reply.add("serial", string: serial)
        reply.add("spiffeID", string: spiffeID)
        return reply.finished()
    }
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
    /// The certificates sent after each leaf and their PEM, made once.
    private let intermediates: [Certificate]
    private let intermediatesPEM: String
    private let intermediatesJSON: [UInt8]
    /// The parts of every leaf that do not change; nil when the issuing certificate's extensions
    /// do not parse, or when the sample leaf it wrote at load differed from swift-certificates'
    /// (issuance then fails with ``PeerCAError/Code/invalidCAMaterial``, saying which).
    private let template: LeafTemplate?
    /// Why there is no template (nil when there is one).
    package let templateProblem: String?
    /// The last CRL ``crl(validity:)`` made, given again while it still says the same thing.
    private let lastCRL = Mutex<IssuedCRL?>(nil)
    /// The CRL being made, if one is: callers that need a new CRL for the same list and validity
    /// meanwhile wait for that one instead of each taking a number and signing their own.
    private let crlInFlight = Mutex<CRLBuild?>(nil)
    /// Signed OCSP responses to requests without a nonce, reused while they still hold.
    private let ocspReuse = OCSPResponder.Reuse()
    /// The issuing certificate's name and key hashes, as OCSP requests name it.
    private let ocspIssuer: OCSPResponder.IssuerHashes

    private struct IssuedCRL {
        let number: Int64
        let revoked: [CRLEncoder.Revoked]
        let thisUpdate: Date
        let validity: TimeInterval
        let der: [UInt8]
    }

    /// A CRL being made for `revoked` and `validity`.
    private struct CRLBuild {
        let revoked: [CRLEncoder.Revoked]
        let validity: TimeInterval
        let task: Task<Result<[UInt8], PeerCAError>, Never>
    }

    public init(authority: CertificateAuthority, policy: IssuancePolicy, ledger: any CertificateLedger, clock: VerificationClock = .system) {
        self.authority = authority
        self.policy = policy
        self.ledger = ledger
        self.clock = clock
        let issuerKeyIdentifier = PeerCertificateAuthority.keyIdentifier(of: authority.issuer)
        intermediates = authority.intermediates
        intermediatesPEM = intermediates.map(\.pemString).joined()
        intermediatesJSON = JSONWriter.escapedStringBody(intermediatesPEM)
        // The hand-written leaf checked against swift-certificates' builder, on a sample leaf.
        if let issuerKeyIdentifier, let made = try? LeafTemplate(authority: authority, issuerKeyIdentifier: issuerKeyIdentifier) {
            let problem = made.sampleMismatch(authority: authority, issuerKeyIdentifier: issuerKeyIdentifier)
            template = problem == nil ? made : nil
            templateProblem = problem
        } else {
            template = nil
            templateProblem = "the issuing certificate's extensions do not parse"
        }
        ocspIssuer = OCSPResponder.IssuerHashes(authority.issuer)
    }

    /// The SKI of `issuer`, or the SHA-1 of its key when it carries none; nil if its extensions do not parse.
    private static func keyIdentifier(of issuer: Certificate) -> ArraySlice<UInt8>? {
        do {
            return try issuer.extensions.subjectKeyIdentifier?.keyIdentifier ?? SubjectKeyIdentifier(hash: issuer.publicKey).keyIdentifier
        } catch {
            return nil
        }
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
    /// policy. The session it starts began at the identity's latest sign-in.
    ///
    /// With one-use tokens (``IssuancePolicy/TokenReuse/oncePerTokenID``), a second request with
    /// the same token gets no second certificate. If it is a retry — the CSR's key and the SPIFFE
    /// ID are those of the certificate the token was used for, and that certificate is neither
    /// revoked nor expired — it gets that certificate again (``IssuedCertificate/isRepeat``; its validity as recorded, whatever
    /// `validity` asks now), so a client whose first answer was lost is not locked out until it
    /// gets a new token. Any other reuse is refused (``PeerCAError/Code/tokenReused``). (A CSR
    /// carries no nonce, so whoever captured a request can replay it; all it gets is the same
    /// certificate, which is public, without its private key.)
    public func issue(identity: PeerIdentity, csr: ValidatedCSR, validity: TimeInterval? = nil) async throws(PeerCAError) -> IssuedCertificate {
        let now = Date(timeIntervalSince1970: clock.now)
        guard identity.trustDomain == policy.trustDomain else {
            throw PeerCAError(.policyViolation, "the identity is in trust domain \(identity.trustDomain), not this CA's \(policy.trustDomain)")
        }
        guard identity.expiresAt > now else { throw PeerCAError(.tokenExpired, "the token expired at \(identity.expiresAt)") }
        let (notBefore, notAfter) = try lifetime(now: now, until: identity.expiresAt, validity: validity) { () throws(PeerCAError) in
            throw PeerCAError(.tokenExpired, "the token leaves no validity for a certificate")
        }
        var use: TokenUse?
        if policy.reuse(for: identity.issuer) == .oncePerTokenID {
            guard let jti = identity.tokenID, !jti.isEmpty else {
                throw PeerCAError(.policyViolation, "tokens from \(identity.issuer.prefix(80)) may be used once, so they must carry a \"jti\"")
            }
            use = TokenUse(issuer: identity.issuer, tokenID: jti)
        }
        return try await sign(
            identity, csr: csr, notBefore: notBefore, notAfter: notAfter, now: now, use: use,
            sessionStart: identity.latestSignIn ?? identity.issuedAt ?? now, renewalOf: nil)
    }

    /// The longest validity of a manually provisioned certificate (``issueManual(deviceID:csr:validity:by:)``):
    /// 825 days. It never outlives the issuing CA certificate either.
    public static let manualMaximumValidity: TimeInterval = 825 * 86_400

    /// The provider, and the issuer in the SPIFFE ID, of manually provisioned certificates.
    public static let manualProvider = "manual"

    /// Issues a certificate for a device an operator provisions, with no identity-provider token
    /// (Ditto's Manual identity: "an x509 Client Certificate signed by a common, trusted
    /// Certificate Authority"): CN = `deviceID`, SPIFFE ID `spiffe://<trust domain>/manual/<deviceID>`,
    /// valid for `validity` seconds (60 s to ``manualMaximumValidity``, and not past the CA
    /// certificate). Recorded in the ledger as provider `manual`, its token ID naming the operator
    /// (`by`); revocation, the CRL and OCSP treat it like any other. A device ID or operator name
    /// that is empty, longer than 64 bytes, or has control or bidirectional formatting characters
    /// is ``PeerCAError/Code/policyViolation``.
    public func issueManual(deviceID: String, csr: ValidatedCSR, validity: TimeInterval, by operatorName: String) async throws(PeerCAError) -> IssuedCertificate {
        for (what, text) in [("device ID", deviceID), ("operator name", operatorName)] {
            guard !text.isEmpty, text.utf8.count <= 64, !text.unicodeScalars.contains(where: UnprintableText.isUnprintable) else {
                throw PeerCAError(.policyViolation, "the \(what) must be 1 to 64 bytes without control or bidirectional formatting characters")
            }
        }
        guard validity >= 60, validity <= Self.manualMaximumValidity else {
            throw PeerCAError(.policyViolation, "a manual certificate's validity must be 60 s to \(Int(Self.manualMaximumValidity / 86_400)) days")
        }
        let now = Date(timeIntervalSince1970: clock.now)
        let second = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        let notAfter = Date(timeIntervalSince1970: min(second.addingTimeInterval(validity.rounded(.down)), authority.issuer.notValidAfter).timeIntervalSince1970.rounded(.down))
        guard notAfter.timeIntervalSince(second) >= 60 else {
            throw PeerCAError(.policyViolation, "the CA certificate expires at \(ISO8601Text.string(authority.issuer.notValidAfter)): no room for a certificate")
        }
        let notBefore = Date(timeIntervalSince1970: now.addingTimeInterval(-policy.backdate).timeIntervalSince1970.rounded(.down))
        let identity = PeerIdentity(
            trustDomain: policy.trustDomain, accountUID: deviceID, provider: Self.manualProvider, issuer: Self.manualProvider, providerUID: deviceID,
            displayName: nil, expiresAt: notAfter, factors: [], permissions: [], tokenID: operatorName, profile: [:], authenticationContext: nil,
            issuedAt: now)
        return try await sign(identity, csr: csr, notBefore: notBefore, notAfter: notAfter, now: now, use: nil, sessionStart: now, renewalOf: nil)
    }

    /// Renews `current` — a certificate of this CA's ledger that its holder proved it has (mutual
    /// TLS) — for the key in `csr`: the same identity (account, provider, SPIFFE ID), recorded as
    /// the renewal of `current.serial`, never valid past `maximumSessionAge` after the session's
    /// original sign-in. No identity-provider token is needed.
    ///
    /// Refuses a revoked or expired `current` (``PeerCAError/Code/revoked``,
    /// ``PeerCAError/Code/tokenExpired``) and a session past its limit
    /// (``PeerCAError/Code/sessionExpired``); a `maximumSessionAge` that is not a positive
    /// number of seconds is ``PeerCAError/Code/invalidSettings``.
    public func renew(
        _ current: LedgerEntry, csr: ValidatedCSR, maximumSessionAge: TimeInterval, validity: TimeInterval? = nil
    ) async throws(PeerCAError) -> IssuedCertificate {
        guard maximumSessionAge.isFinite, maximumSessionAge > 0 else {
            throw PeerCAError(.invalidSettings, "the maximum session age must be a positive number of seconds, not \(maximumSessionAge)")
        }
        let now = Date(timeIntervalSince1970: clock.now)
        guard current.status == .valid else { throw PeerCAError(.revoked, "certificate \(current.serial) is revoked") }
        guard current.notAfter > now else { throw PeerCAError(.tokenExpired, "certificate \(current.serial) expired at \(ISO8601Text.string(current.notAfter))") }
        let sessionStart = current.sessionStart ?? current.issuedAt
        let sessionEnd = sessionStart.addingTimeInterval(maximumSessionAge)
        guard let trustDomain = SPIFFE.parse(current.subject)?.trustDomain, trustDomain == policy.trustDomain else {
            throw PeerCAError(.policyViolation, "certificate \(current.serial) is not in this CA's trust domain")
        }
        let identity = PeerIdentity(
            trustDomain: trustDomain, accountUID: current.commonName, provider: current.provider ?? policy.provider, issuer: current.tokenIssuer,
            providerUID: current.tokenSubject, displayName: nil, expiresAt: sessionEnd, factors: [], permissions: [], tokenID: nil,
            profile: [:], authenticationContext: nil, issuedAt: nil)
        guard identity.spiffeID == current.subject else {
            throw PeerCAError(.policyViolation, "certificate \(current.serial) names \(current.subject), which its ledger row does not describe")
        }
        let (notBefore, notAfter) = try lifetime(now: now, until: sessionEnd, validity: validity) { () throws(PeerCAError) in
            throw PeerCAError(
                .sessionExpired,
                "the session began at \(ISO8601Text.string(sessionStart)) and may last \(FactorPolicy.wholeSeconds(maximumSessionAge)) s; sign in again")
        }
        return try await sign(
            identity, csr: csr, notBefore: notBefore, notAfter: notAfter, now: now, use: nil, sessionStart: sessionStart,
            renewalOf: current.serial)
    }

    /// notBefore and notAfter for a certificate issued at `now` that may not outlive `until`:
    /// whole seconds, at most the policy's maximum and the requested `validity`, within the
    /// issuing certificate; `tooShort` throws when less than a second is left.
    func lifetime(
        now: Date, until: Date, validity: TimeInterval?, tooShort: () throws(PeerCAError) -> Never
    ) throws(PeerCAError) -> (notBefore: Date, notAfter: Date) {
        var notAfter = min(now.addingTimeInterval(policy.maximumValidity), until)
        // Whole seconds: what a certificate can say.
        let second = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        if let validity {
            guard validity >= 1 else { throw PeerCAError(.policyViolation, "the requested validity must be at least 1 second") }
            notAfter = min(notAfter, second.addingTimeInterval(validity.rounded(.down)))
        }
        notAfter = min(notAfter, authority.issuer.notValidAfter)
        notAfter = Date(timeIntervalSince1970: notAfter.timeIntervalSince1970.rounded(.down))
        let notBefore = Date(timeIntervalSince1970: now.addingTimeInterval(-policy.backdate).timeIntervalSince1970.rounded(.down))
        guard notAfter.timeIntervalSince(second) >= 1 else { try tooShort() }
        return (notBefore, notAfter)
    }

    /// Signs a leaf for `identity` and records it (with the token use, when given) before
    /// returning it; a serial that exists already is drawn again.
    func sign(
        _ identity: PeerIdentity, csr: ValidatedCSR, notBefore: Date, notAfter: Date, now: Date, use: TokenUse?,
        sessionStart: Date, renewalOf: String?
    ) async throws(PeerCAError) -> IssuedCertificate {
        let spiffeID = identity.spiffeID
        for _ in 0..<4 {
            let serial = SerialNumbers.random()
            let der = try makeLeaf(serial: serial, identity: identity, spiffeID: spiffeID, csr: csr, notBefore: notBefore, notAfter: notAfter)
            let entry = LedgerEntry(
                serial: SerialNumbers.hex(serial), subject: spiffeID, commonName: identity.accountUID, tokenIssuer: identity.issuer,
                tokenSubject: identity.providerUID, tokenID: identity.tokenID, keyFingerprint: csr.keyFingerprint,
                notBefore: notBefore, notAfter: notAfter, issuedAt: now, der: der, provider: identity.provider,
                sessionStart: sessionStart, renewalOf: renewalOf)
            do {
                try await ledger.record(entry, claiming: use)
            } catch where error.code == .serialExists {
                continue  // 2^-72 per draw within a millisecond; draw again
            } catch where error.code == .tokenReused {
                guard let use, let earlier = try await repeated(use, identity: identity, spiffeID: spiffeID, csr: csr, now: now) else { throw error }
                return earlier
            }
            return IssuedCertificate(
                derBytes: der, intermediates: intermediates, identity: identity, serial: entry.serial, notBefore: notBefore, notAfter: notAfter,
                intermediatesPEM: intermediatesPEM, intermediatesJSON: intermediatesJSON)
        }
        throw PeerCAError(.ledger, "could not draw a unique serial number")
    }

    /// The certificate `use` was recorded with, when this request repeats the one that got it:
    /// the same key and SPIFFE ID (and account), not revoked, not expired, not a renewal, signed by
    /// this CA's issuing key (another CA's certificate on a shared store would not chain to the
    /// intermediates sent with it); nil otherwise.
    func repeated(
        _ use: TokenUse, identity: PeerIdentity, spiffeID: String, csr: ValidatedCSR, now: Date
    ) async throws(PeerCAError) -> IssuedCertificate? {
        guard let earlier = try await ledger.entry(claiming: use), earlier.keyFingerprint == csr.keyFingerprint, earlier.subject == spiffeID,
            earlier.commonName == identity.accountUID, earlier.status == .valid, earlier.notAfter > now, earlier.renewalOf == nil,
            let certificate = try? Certificate(derEncoded: earlier.der),
            authority.issuer.publicKey.isValidSignature(certificate.signature, for: certificate)
        else { return nil }
        return IssuedCertificate(
            derBytes: earlier.der, intermediates: intermediates, identity: identity, serial: earlier.serial, notBefore: earlier.notBefore,
            notAfter: earlier.notAfter, intermediatesPEM: intermediatesPEM, intermediatesJSON: intermediatesJSON,
            isRepeat: true)
    }

    /// The DER of a leaf for `identity` (its CN; `spiffeID`, the identity's SPIFFE ID, which the
    /// caller has computed for the ledger row too, is the SAN URI) and the CSR's key, signed by the
    /// issuing key.
    package func makeLeaf(
        serial: Certificate.SerialNumber, identity: PeerIdentity, spiffeID: String, csr: ValidatedCSR, notBefore: Date, notAfter: Date
    ) throws(PeerCAError) -> [UInt8] {
        guard let template else {
            throw PeerCAError(.invalidCAMaterial, "cannot sign the certificate: \(templateProblem ?? "no leaf template")")
        }
        do {
            let tbs = try template.tbsCertificate(
                serial: Array(serial.bytes), notBefore: notBefore, notAfter: notAfter, commonName: identity.accountUID,
                subjectPublicKeyInfo: csr.subjectPublicKeyInfo, keyIdentifier: csr.keyIdentifier, uri: spiffeID)
            return try ASN1Support.signed(tbs, by: authority)
        } catch {
            throw PeerCAError(.invalidCAMaterial, "cannot sign the certificate (\(error))")
        }
    }

    /// Revokes a certificate by serial (hex).
    public func revoke(serial: String, reason: LedgerEntry.RevocationReason = .unspecified) async throws(PeerCAError) -> LedgerEntry {
        try await ledger.revoke(serial: serial, reason: reason, at: Date(timeIntervalSince1970: clock.now.rounded(.down)))
    }

    /// A signed CRL (DER) listing every revoked, unexpired certificate, valid for `validity` seconds.
    ///
    /// The ledger's revoked certificates are read at every call, so a revocation (made here or by
    /// another instance sharing the ledger) is in the next CRL. A new CRL — a new number from the
    /// ledger, which is a durable write, and a signature — is made only when that list has
    /// changed or the last CRL has run through half its validity; otherwise the last one is
    /// given again. (Before, every `GET /v1/crl`, which anyone may send, cost a durable write.)
    /// Calls that need a new CRL for the same list and validity while one is being made wait for
    /// that one: however many ask at once, one number is taken and one signature made.
    /// A `validity` that is not a positive number of seconds is ``PeerCAError/Code/invalidSettings``
    /// (before any number is taken).
    public func crl(validity: TimeInterval = 86_400) async throws(PeerCAError) -> [UInt8] {
        guard validity.isFinite, validity > 0 else {
            throw PeerCAError(.invalidSettings, "a CRL's validity must be a positive number of seconds, not \(validity)")
        }
        let now = Date(timeIntervalSince1970: clock.now.rounded(.down))
        // In one order whatever the ledger's (it sorts by revocation time only, and an account's
        // certificates share theirs), so that an unchanged list compares equal.
        let revoked = try await ledger.revoked(notExpiredAt: now)
            .compactMap { entry -> CRLEncoder.Revoked? in
                guard case .revoked(let at, let reason) = entry.status, let serial = SerialNumbers.parse(entry.serial) else { return nil }
                return CRLEncoder.Revoked(serial: serial, at: at, reason: reason)
            }
            .sorted { $0.at != $1.at ? $0.at < $1.at : $0.serial.bytes.lexicographicallyPrecedes($1.serial.bytes) }
        if let last = lastCRL.withLock({ $0 }), last.validity == validity, last.revoked == revoked,
            Reissue.stillCurrent(madeAt: last.thisUpdate, validity: validity, now: now)
        {
            return last.der
        }
        // One build at a time for a given list and validity: at start-up, or when the last CRL
        // runs through half its validity, concurrent requests (32 connections at once under
        // scripts/revocation_load.sh) each took a number and signed a CRL of their own — 2 to 21
        // per run — where one does.
        let (build, started) = crlInFlight.withLock { current -> (Task<Result<[UInt8], PeerCAError>, Never>, Bool) in
            if let current, current.validity == validity, current.revoked == revoked { return (current.task, false) }
            let task = Task { [self] () async -> Result<[UInt8], PeerCAError> in
                do throws(PeerCAError) { return .success(try await makeCRL(revoked: revoked, validity: validity, now: now)) } catch {
                    return .failure(error)
                }
            }
            current = CRLBuild(revoked: revoked, validity: validity, task: task)
            return (task, true)
        }
        let made = await build.value
        // The caller that started the build clears it (unless a build for another list has
        // taken its place); later callers find the CRL it made in `lastCRL`.
        if started { crlInFlight.withLock { if $0?.task == build { $0 = nil } } }
        return try made.get()
    }

    /// A new CRL: a number from the ledger (a durable write) and a signature; kept as the last one.
    private func makeCRL(revoked: [CRLEncoder.Revoked], validity: TimeInterval, now: Date) async throws(PeerCAError) -> [UInt8] {
        let number = try await ledger.nextCRLNumber()
        let der = try CRLEncoder.encode(
            authority: authority, number: number, thisUpdate: now, nextUpdate: now.addingTimeInterval(validity), revoked: revoked)
        // Two builds for different lists that both finished: the higher number stays (numbers only go up).
        lastCRL.withLock { last in
            if let kept = last, kept.number > number { return }
            last = IssuedCRL(number: number, revoked: revoked, thisUpdate: now, validity: validity, der: der)
        }
        return der
    }

    /// The OCSP response that asks the client to try again later (RFC 6960 §4.2.1, `tryLater`,
    /// unsigned): what a server answers when the ledger does not answer in time.
    public static var ocspTryLater: [UInt8] { OCSPResponder.errorResponse(.tryLater) }

    /// An OCSP response (DER) for an OCSP request (DER), signed by the issuing CA. Malformed
    /// requests get a `malformedRequest` response, never an error.
    ///
    /// Each certificate's status is read from the ledger at every call, so a revocation shows at
    /// once. A request without a nonce (browsers, Go's `crypto/ocsp`, RFC 5019's lightweight
    /// profile) gets the response last signed for the same certificates with the same statuses
    /// and `validity`, until half that validity has passed; only then, or when a status changed,
    /// is a new one signed. So polling costs a ledger read, not a signature (with an RSA-3072 CA,
    /// milliseconds each), whoever asks how often. A request with a nonce is signed each time,
    /// its nonce echoed: a deployment that fears floods of those limits `POST /v1/ocsp` at its
    /// proxy.
    public func ocspResponse(for request: [UInt8], validity: TimeInterval = 3600) async -> [UInt8] {
        await OCSPResponder.respond(
            to: request, authority: authority, ledger: ledger, now: Date(timeIntervalSince1970: clock.now.rounded(.down)), validity: validity,
            issuer: ocspIssuer, reuse: ocspReuse)
    }
}
