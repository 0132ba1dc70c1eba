public import Foundation
import TokenKit

/// One certificate as the ledger records it.
public struct LedgerEntry: Sendable, Hashable {
    /// Why a certificate was revoked (RFC 5280 CRLReason).
    public enum RevocationReason: Int, Sendable, Hashable, CaseIterable {
        case unspecified = 0, keyCompromise = 1, caCompromise = 2, affiliationChanged = 3, superseded = 4
        case cessationOfOperation = 5, certificateHold = 6, privilegeWithdrawn = 9

        /// The name used on the command line and in JSON (`keyCompromise`, …).
        public var name: String { "\(self)" }
        public init?(name: String) {
            guard let match = RevocationReason.allCases.first(where: { $0.name.lowercased() == name.lowercased() }) else { return nil }
            self = match
        }
    }

    /// Valid, or revoked (when and why).
    public enum Status: Sendable, Hashable {
        case valid
        case revoked(at: Date, reason: RevocationReason)
    }

    /// Serial number, lower-case hex.
    public let serial: String
    /// The SPIFFE ID (URI SAN) the certificate names.
    public let subject: String
    /// The CN (account user ID).
    public let commonName: String
    /// The token's `iss`, `sub` and `jti`.
    public let tokenIssuer: String
    public let tokenSubject: String
    public let tokenID: String?
    /// SHA-256 of the certified key's SubjectPublicKeyInfo, hex.
    public let keyFingerprint: String
    public let notBefore: Date
    public let notAfter: Date
    public let issuedAt: Date
    /// The certificate, DER.
    public let der: [UInt8]
    public let status: Status
    /// The configured provider name that authenticated the identity; nil for rows recorded
    /// before the ledger stored it.
    public let provider: String?
    /// When the session this certificate belongs to began: the sign-in (`auth_time`, else `iat`)
    /// of the token the first certificate came from; a renewal keeps it. Nil for rows recorded
    /// before the ledger stored it.
    public let sessionStart: Date?
    /// The serial of the certificate this one renews, if it is a renewal.
    public let renewalOf: String?

    public init(
        serial: String, subject: String, commonName: String, tokenIssuer: String, tokenSubject: String, tokenID: String?,
        keyFingerprint: String, notBefore: Date, notAfter: Date, issuedAt: Date, der: [UInt8], status: Status = .valid,
        provider: String? = nil, sessionStart: Date? = nil, renewalOf: String? = nil
    ) {
        self.serial = serial
        self.subject = subject
        self.commonName = commonName
        self.tokenIssuer = tokenIssuer
        self.tokenSubject = tokenSubject
        self.tokenID = tokenID
        self.keyFingerprint = keyFingerprint
        self.notBefore = notBefore
        self.notAfter = notAfter
        self.issuedAt = issuedAt
        self.der = der
        self.status = status
        self.provider = provider
        self.sessionStart = sessionStart
        self.renewalOf = renewalOf
    }
}

/// The rule for ended sessions (logouts, revocations by account: ``CertificateLedger/endedSessions(since:)``),
/// which `serve` and `tokentool ca issue` apply alike.
package enum EndedSessions {
    /// How far back ended sessions matter: tokens older than this are refused anyway by their
    /// `exp` (a HAT token lives at most 30 days).
    package static let horizon: TimeInterval = 31 * 86_400

    /// Why a token of `identity` is no longer honoured, its account's sessions having ended at
    /// `end`: it was issued (`iat`) before the end, or has no `iat` to show it was not; nil when
    /// it is honoured.
    package static func refusal(of identity: PeerIdentity, endedAt end: Date) -> PeerCAError? {
        if let issued = identity.issuedAt, issued > end { return nil }
        return PeerCAError(.sessionEnded, "the account's sessions were ended at \(ISO8601Text.string(end)); sign in again for a new token")
    }
}

extension CertificateLedger {
    /// Nil: this ledger cannot find the certificate a token use claimed.
    public func entry(claiming use: TokenUse) async throws(PeerCAError) -> LedgerEntry? { nil }

    /// The account's end from ``endedSessions(since:)`` (every end read): for a ledger without a
    /// lookup of its own.
    public func endedSession(account: String) async throws(PeerCAError) -> Date? {
        try await endedSessions(since: .distantPast)[account]
    }
}

/// A token use the ledger must record at most once (issuer + `jti`).
public struct TokenUse: Sendable, Hashable {
    public let issuer: String
    public let tokenID: String
    public init(issuer: String, tokenID: String) {
        self.issuer = issuer
        self.tokenID = tokenID
    }
}

/// Where issued certificates are recorded. ``record(_:claiming:)`` must be durable before it
/// returns: the CA hands out nothing that is not in the ledger.
///
/// ``SQLiteLedger`` is the embedded default; a PostgreSQL store implements the same protocol
/// for several CA instances sharing one ledger.
public protocol CertificateLedger: Sendable {
    /// Records a new certificate, and the token use when given, atomically. Throws
    /// ``PeerCAError/Code/tokenReused`` when the use was recorded before, and
    /// ``PeerCAError/Code/serialExists`` when the serial exists (the caller draws another).
    func record(_ entry: LedgerEntry, claiming use: TokenUse?) async throws(PeerCAError)
    /// The certificate with this serial (hex), if any.
    func entry(serial: String) async throws(PeerCAError) -> LedgerEntry?
    /// The certificate recorded with this token use (``record(_:claiming:)``), if any: what
    /// the CA gives again to a retry of the same request (see
    /// ``PeerCertificateAuthority/issue(identity:csr:validity:)``). A ledger that cannot tell
    /// answers nil (the default), and such a retry is refused as ``PeerCAError/Code/tokenReused``.
    func entry(claiming use: TokenUse) async throws(PeerCAError) -> LedgerEntry?
    /// Certificates whose SPIFFE ID or CN equals `subject`, newest first.
    func entries(subject: String) async throws(PeerCAError) -> [LedgerEntry]
    /// The newest certificates, at most `limit`, the latest first, read without sorting the
    /// whole ledger: ``SQLiteLedger`` in the order it recorded them, PostgreSQL by issue time
    /// (the same order unless the clock was set back).
    func recent(limit: Int) async throws(PeerCAError) -> [LedgerEntry]
    /// Marks a certificate revoked (a second revocation keeps the first date and reason) and
    /// returns it; ``PeerCAError/Code/notFound`` for an unknown serial.
    func revoke(serial: String, reason: LedgerEntry.RevocationReason, at: Date) async throws(PeerCAError) -> LedgerEntry
    /// Every revoked certificate that has not yet expired at `now`.
    func revoked(notExpiredAt now: Date) async throws(PeerCAError) -> [LedgerEntry]
    /// A new CRL number, larger than every one returned before.
    func nextCRLNumber() async throws(PeerCAError) -> Int64
    /// Ends an account's sessions, in one transaction: every certificate whose CN is `account`
    /// that is not revoked and has not expired at `date` is revoked with `date` and `reason`, and
    /// the account's ended session is recorded at `date` (see ``endedSessions(since:)``; a later
    /// end moves it forward, an earlier one never moves it back).
    ///
    /// An account with no certificates can still end its sessions. Throws
    /// ``PeerCAError/Code/invalidRequest`` for an empty account, and writes nothing then.
    ///
    /// - Parameters:
    ///   - account: The account user ID (the certificates' CN).
    ///   - reason: The revocation reason of the certificates.
    ///   - date: When the sessions end and the certificates are revoked.
    /// - Returns: The certificates this call revoked (revoked already: not among them), newest first.
    func revokeAccount(_ account: String, reason: LedgerEntry.RevocationReason, at date: Date) async throws(PeerCAError) -> [LedgerEntry]
    /// The ended sessions: every account whose sessions ended at or after `since`, with the latest
    /// end. A token of such an account issued (`iat`) before that time is no longer honoured.
    ///
    /// - Parameter since: The earliest end to report (for a server: now − the longest token lifetime
    ///   at its first read, then a little before its previous read: ends are indexed by their date,
    ///   so such a read costs what it returns, not the table).
    func endedSessions(since: Date) async throws(PeerCAError) -> [String: Date]
    /// When one account's sessions last ended (``revokeAccount(_:reason:at:)``), if they ever did:
    /// what `tokentool ca issue` checks for the one token it is given.
    func endedSession(account: String) async throws(PeerCAError) -> Date?
}
