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
/// So an end made through another instance is seen within one interval — if the instances' clocks
/// differ by less than ``overlap``; otherwise within ``fullReloadInterval``.
///
/// A reload reads only the ends dated from ``overlap`` before the previous reload on (the ledger
/// indexes them by date), so it costs what changed, not every end in the horizon: with a million
/// ends in the last 31 days, whole reads every second kept an idle server 0.6 of a core busy. The
/// overlap covers an end whose transaction committed after that reload had read (dated before
/// it), and instances whose clocks differ; every ``fullReloadInterval``, and when the clock has
/// gone back, a reload reads the whole horizon again and forgets ends that have left it. A whole
/// reload that fails (after the first) is tried again only after another ``fullReloadInterval``,
/// with reloads of what changed in between, so that a store too slow for whole reads still
/// passes on new ends and is not asked for a whole read every other second.
///
/// A reload that fails, or has not answered after ``overdueAfter`` (a store that hangs rather than
/// refuses: a stopped server, a network path that drops packets), keeps the last list in use, is
/// logged as a warning and counted; ``statistics`` gives how old the list is, which `/metrics`
/// shows (`tokenserver_sessions_list_age_seconds`) so that an operator can alert on a deny list
/// that has stopped following the store.
final class SessionDenyList: Service, Sendable {
    let ledger: any CertificateLedger
    let refreshInterval: Duration
    let logger: Logger
    private let ended = Mutex<[String: Date]>([:])
    private let reloads = Mutex(Statistics())
    /// When the last reload read, and the last whole one was attempted (the clock of
    /// `reload(now:)`).
    private let read = Mutex<(last: Date, whole: Date)?>(nil)

    /// How far before the previous reload a reload reads again: longer than any transaction that
    /// ends sessions and any sane difference between instances' clocks.
    static let overlap: TimeInterval = 300
    /// How often a reload reads every end in the horizon (one missed by ``overlap``, however far
    /// behind its instance's clock, is seen then; ends past the horizon are forgotten).
    static let fullReloadInterval: TimeInterval = 600

    /// How long a reload may go unanswered before it is logged and counted as failed (it is
    /// still awaited: its answer, if one comes, is used): five intervals, at least one second.
    var overdueAfter: Duration { max(refreshInterval * 5, .seconds(1)) }

    /// The reloads so far.
    struct Statistics: Sendable {
        /// When the list last reflected the ledger (nil: never loaded).
        var loadedAt: ContinuousClock.Instant?
        /// Reloads that failed or went unanswered past ``SessionDenyList/overdueAfter``.
        var failures = 0
    }

    var statistics: Statistics { reloads.withLock { $0 } }

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
        guard let end = endedAt(identity.accountUID), let refusal = EndedSessions.refusal(of: identity, endedAt: end) else { return }
        throw ServiceRefusal(refusal.code.rawValue, refusal.message)
    }

    /// Records an end made through this instance (the ledger has it already).
    func note(_ account: String, endedAt date: Date) {
        ended.withLock { list in
            if (list[account] ?? .distantPast) < date { list[account] = date }
        }
    }

    /// Reloads the list from the ledger: the ends since ``overlap`` before the previous reload, or
    /// every end in the horizon at the first reload, every ``fullReloadInterval`` and when `now`
    /// is before the previous reload's. Returns whether it read the whole horizon.
    @discardableResult
    func reload(now: Date = Date()) async throws(PeerCAError) -> Bool {
        let asked = ContinuousClock.now
        let horizonStart = now.addingTimeInterval(-EndedSessions.horizon)
        let previous = read.withLock { $0 }
        var since = horizonStart, whole = true
        if let previous, now >= previous.last, now.timeIntervalSince(previous.whole) < Self.fullReloadInterval {
            since = max(horizonStart, previous.last.addingTimeInterval(-Self.overlap))
            whole = false
        }
        let fresh: [String: Date]
        do {
            fresh = try await ledger.endedSessions(since: since)
        } catch {
            // The whole read is tried again an interval later; a list never loaded, at once.
            if whole { read.withLock { state in state = state.map { ($0.last, now) } } }
            throw error
        }
        reloads.withLock { $0.loadedAt = max($0.loadedAt ?? asked, asked) }
        read.withLock { $0 = (last: now, whole: whole ? now : previous?.whole ?? now) }
        ended.withLock { list in
            for (account, date) in fresh where (list[account] ?? .distantPast) < date { list[account] = date }
            if whole { list = list.filter { $0.value >= horizonStart } }
        }
        return whole
    }

    /// Reloads every interval until the service group shuts down; a failed reload, or one still
    /// unanswered after ``overdueAfter``, keeps the last list, is logged and counted.
    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(for: self.refreshInterval)
                try await self.reloadOnce()
            }
        }
    }

    /// One reload of ``run()``'s: an overdue one is reported at ``overdueAfter`` and still awaited
    /// (a store's query may not end when its task is cancelled; the next reload starts after it),
    /// unless the caller is cancelled (the service group shutting down): then it returns at once
    /// and leaves the reload to end by itself, so a hanging store does not hold the shutdown. A
    /// reload is counted as failed once, whether it went overdue, failed, or both.
    func reloadOnce() async throws {
        let overdue = overdueAfter
        let reported = Atomic<Bool>(false)
        // Cancelled (the service group shutting down), the race returns `.cancelled` at once.
        let outcome: Reload = await TimeLimit.race(overdue, fallback: .cancelled) {
            do throws(PeerCAError) {
                try await self.reload()
                return .loaded
            } catch { return .failed(error) }
        } timedOut: {
            reported.store(true, ordering: .relaxed)
            self.reloads.withLock { $0.failures += 1 }
            self.logger.warning(
                "the ended sessions' reload has not answered; the last list stays in use",
                metadata: ["after": "\(overdue)", "listAge": "\(self.ageDescription)"])
            return nil
        }
        if case .failed(let error) = outcome, !Task.isCancelled {
            if !reported.load(ordering: .relaxed) { reloads.withLock { $0.failures += 1 } }
            logger.warning("cannot reload the ended sessions; the last list stays in use", metadata: ["error": "\(error)", "listAge": "\(ageDescription)"])
        }
        try Task.checkCancellation()
    }

    private enum Reload: Sendable {
        case loaded, failed(PeerCAError), cancelled
    }

    /// How old the list is, for a log line.
    private var ageDescription: String {
        guard let loaded = statistics.loadedAt else { return "never loaded" }
        return "\(ContinuousClock.now - loaded)"
    }
}
