import Foundation
import Logging
import PeerCA
import ServiceLifecycle
import Synchronization
import TokenKit

/// The accounts whose sessions have ended (logout, or an operator's revocation by account), as
/// the ledger records them, held in memory for the hot path: a token of such an account issued
/// (`iat`) before the end is refused (`session_ended`) until it expires.
///
/// The ledger is the truth, shared by every instance on one store: a ``Service`` reloads the list
/// every ``refreshInterval`` (and at start), and a logout through this instance enters it at once.
/// So an end made through another instance is seen within one interval.
final class SessionDenyList: Service, Sendable {
    /// How far back ended sessions are kept in memory: tokens older than this are refused anyway
    /// by their `exp` (a HAT token lives at most 30 days).
    static let horizon: TimeInterval = 31 * 86_400

    let ledger: any CertificateLedger
    let refreshInterval: Duration
    let logger: Logger
    private let ended = Mutex<[String: Date]>([:])

    init(ledger: any CertificateLedger, refreshInterval: Duration, logger: Logger) {
        self.ledger = ledger
        self.refreshInterval = refreshInterval
        self.logger = logger
    }

    /// When the account's sessions ended, if they did (within the horizon).
    func endedAt(_ account: String) -> Date? { ended.withLock { $0[account] } }

    /// Refuses an identity whose account's sessions ended after its token was issued. A token
    /// without `iat` cannot show it came after the end, so it is refused too.
    func check(_ identity: PeerIdentity) throws(ServiceRefusal) {
        guard let end = endedAt(identity.accountUID) else { return }
        guard let issued = identity.issuedAt, issued > end else {
            throw ServiceRefusal(
                "session_ended",
                "the account's sessions were ended at \(ISO8601Text.string(end)); sign in again for a new token")
        }
    }

    /// Records an end made through this instance (the ledger has it already).
    func note(_ account: String, endedAt date: Date) {
        ended.withLock { list in
            if (list[account] ?? .distantPast) < date { list[account] = date }
        }
    }

    /// Reloads the list from the ledger.
    func reload(now: Date = Date()) async throws(PeerCAError) {
        let fresh = try await ledger.endedSessions(since: now.addingTimeInterval(-SessionDenyList.horizon))
        ended.withLock { list in
            for (account, date) in fresh where (list[account] ?? .distantPast) < date { list[account] = date }
            list = list.filter { $0.value > now.addingTimeInterval(-SessionDenyList.horizon) }
        }
    }

    /// Reloads every interval until the service group shuts down; a failed reload keeps the
    /// last list and is logged.
    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(for: self.refreshInterval)
                do { try await self.reload() } catch {
                    self.logger.warning("cannot reload the ended sessions", metadata: ["error": "\(error)"])
                }
            }
        }
    }
}
