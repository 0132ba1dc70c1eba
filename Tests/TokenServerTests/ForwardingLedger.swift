import Foundation
import PeerCA

/// A real ledger behind a class whose methods a test overrides one at a time: everything else is
/// the ledger's own.
class ForwardingLedger: CertificateLedger, @unchecked Sendable {
    let ledger: any CertificateLedger
    init(ledger: any CertificateLedger) { self.ledger = ledger }
    func record(_ entry: LedgerEntry, claiming use: TokenUse?) async throws(PeerCAError) { try await ledger.record(entry, claiming: use) }
    func endedSessions(since: Date) async throws(PeerCAError) -> [String: Date] { try await ledger.endedSessions(since: since) }
    func entry(serial: String) async throws(PeerCAError) -> LedgerEntry? { try await ledger.entry(serial: serial) }
    func entry(claiming use: TokenUse) async throws(PeerCAError) -> LedgerEntry? { try await ledger.entry(claiming: use) }
    func entries(subject: String) async throws(PeerCAError) -> [LedgerEntry] { try await ledger.entries(subject: subject) }
    func recent(limit: Int) async throws(PeerCAError) -> [LedgerEntry] { try await ledger.recent(limit: limit) }
    func revoke(serial: String, reason: LedgerEntry.RevocationReason, at: Date) async throws(PeerCAError) -> LedgerEntry {
        try await ledger.revoke(serial: serial, reason: reason, at: at)
    }
    func revoked(notExpiredAt now: Date) async throws(PeerCAError) -> [LedgerEntry] { try await ledger.revoked(notExpiredAt: now) }
    func nextCRLNumber() async throws(PeerCAError) -> Int64 { try await ledger.nextCRLNumber() }
    func revokeAccount(_ account: String, reason: LedgerEntry.RevocationReason, at date: Date) async throws(PeerCAError) -> [LedgerEntry] {
        try await ledger.revokeAccount(account, reason: reason, at: date)
    }
    func endedSession(account: String) async throws(PeerCAError) -> Date? { try await ledger.endedSession(account: account) }
}
