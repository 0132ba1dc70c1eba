import Foundation
import Logging
import PeerCA
import Synchronization
import TestSupport
import Testing
@testable import TokenServer

/// The ended-sessions list `serve` keeps in memory, against a real SQLite ledger that another
/// handle (another instance, as far as the list can tell) writes to: reloads read what changed
/// since a little before the previous one, a whole reload now and then finds what that missed,
/// and ends that left the horizon are forgotten.
@Suite("Sessions: the deny list's reloads")
struct SessionDenyListTests {
    static let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    /// The list on a fresh ledger, and a second handle on the same file (an end written through
    /// it is not noted by the list: only a reload can find it).
    func withList(_ body: (SessionDenyList, SQLiteLedger) async throws -> Void) async throws {
        let path = try temporaryDirectory().appendingPathComponent("ledger.sqlite").path
        let ledger = try SQLiteLedger(path: path)
        let other = try SQLiteLedger(path: path)
        try await body(SessionDenyList(ledger: ledger, refreshInterval: .seconds(60), logger: Logger(label: "sessions-test")), other)
    }

    @Test func aReloadReadsFromALittleBeforeThePreviousOneAndAWholeOneFindsTheRest() async throws {
        try await withList { sessions, other in
            let t0 = Self.t0
            _ = try await other.revokeAccount("before", reason: .unspecified, at: t0.addingTimeInterval(-86_400))
            #expect(try await sessions.reload(now: t0), "the first reload reads the whole horizon")
            #expect(sessions.endedAt("before") == t0.addingTimeInterval(-86_400))

            // Written after that reload: an end dated after it; one dated 100 s before it (its
            // transaction committed after the read, or its instance's clock is behind), within the
            // overlap; one dated 400 s before it, past the overlap (a clock far behind).
            _ = try await other.revokeAccount("after", reason: .unspecified, at: t0.addingTimeInterval(10))
            _ = try await other.revokeAccount("late", reason: .unspecified, at: t0.addingTimeInterval(-100))
            _ = try await other.revokeAccount("far-behind", reason: .unspecified, at: t0.addingTimeInterval(-SessionDenyList.overlap - 100))
            #expect(try await !sessions.reload(now: t0.addingTimeInterval(20)), "the next reloads read what changed")
            #expect(sessions.endedAt("after") == t0.addingTimeInterval(10))
            #expect(sessions.endedAt("late") == t0.addingTimeInterval(-100))
            #expect(sessions.endedAt("far-behind") == nil, "read from the previous reload less the overlap only")
            #expect(sessions.endedAt("before") != nil, "what the list had stays")

            // A later end of a listed account moves it forward.
            _ = try await other.revokeAccount("before", reason: .unspecified, at: t0.addingTimeInterval(30))
            #expect(try await !sessions.reload(now: t0.addingTimeInterval(40)))
            #expect(sessions.endedAt("before") == t0.addingTimeInterval(30))

            // The whole horizon again once the interval has passed since the last whole reload.
            #expect(try await sessions.reload(now: t0.addingTimeInterval(SessionDenyList.fullReloadInterval)))
            #expect(sessions.endedAt("far-behind") == t0.addingTimeInterval(-SessionDenyList.overlap - 100))
            #expect(try await !sessions.reload(now: t0.addingTimeInterval(SessionDenyList.fullReloadInterval + 1)))
        }
    }

    @Test func aClockThatWentBackMakesTheReloadWhole() async throws {
        try await withList { sessions, other in
            let t0 = Self.t0
            #expect(try await sessions.reload(now: t0))
            #expect(try await !sessions.reload(now: t0.addingTimeInterval(60)))
            // The clock steps back an hour: ends are now dated before the previous reload's read.
            _ = try await other.revokeAccount("stepped-back", reason: .unspecified, at: t0.addingTimeInterval(-3_600))
            #expect(try await sessions.reload(now: t0.addingTimeInterval(-3_500)), "a clock behind the previous reload reads the whole horizon")
            #expect(sessions.endedAt("stepped-back") == t0.addingTimeInterval(-3_600))
        }
    }

    @Test func endsThatLeftTheHorizonAreForgottenAtAWholeReload() async throws {
        try await withList { sessions, other in
            let t0 = Self.t0
            _ = try await other.revokeAccount("old", reason: .unspecified, at: t0.addingTimeInterval(-EndedSessions.horizon + 100))
            #expect(try await sessions.reload(now: t0))
            #expect(sessions.endedAt("old") != nil, "inside the horizon at t0")
            sessions.note("noted", endedAt: t0.addingTimeInterval(5))
            #expect(try await !sessions.reload(now: t0.addingTimeInterval(200)))
            #expect(sessions.endedAt("old") != nil, "a reload of what changed keeps the list as it is")
            #expect(try await sessions.reload(now: t0.addingTimeInterval(SessionDenyList.fullReloadInterval)))
            #expect(sessions.endedAt("old") == nil, "past the horizon: its tokens have expired")
            #expect(sessions.endedAt("noted") == t0.addingTimeInterval(5), "an end noted by this instance stays")
        }
    }

    @Test func aWholeReloadThatFailsIsTriedAgainAnIntervalLater() async throws {
        let path = try temporaryDirectory().appendingPathComponent("ledger.sqlite").path
        let other = try SQLiteLedger(path: path)
        // The real ledger, refusing reads older than an hour: a store whose whole reads time out.
        let ledger = WholeReadsFail(ledger: try SQLiteLedger(path: path), limit: 3_600)
        let sessions = SessionDenyList(ledger: ledger, refreshInterval: .seconds(60), logger: Logger(label: "sessions-test"))
        let t0 = Self.t0
        ledger.now.withLock { $0 = t0 }
        await #expect(throws: PeerCAError.self) { try await sessions.reload(now: t0) }
        // Never loaded whole: there is no previous reload to read from, so the next is whole too.
        await #expect(throws: PeerCAError.self) { try await sessions.reload(now: t0.addingTimeInterval(1)) }
        ledger.limit.withLock { $0 = .infinity }
        #expect(try await sessions.reload(now: t0.addingTimeInterval(2)))
        ledger.limit.withLock { $0 = 3_600 }

        let due = t0.addingTimeInterval(2 + SessionDenyList.fullReloadInterval)
        ledger.now.withLock { $0 = due }
        _ = try await other.revokeAccount("new", reason: .unspecified, at: due)
        await #expect(throws: PeerCAError.self) { try await sessions.reload(now: due) }
        #expect(try await !sessions.reload(now: due.addingTimeInterval(1)), "after a failed whole reload, what changed")
        #expect(sessions.endedAt("new") == due, "so new ends still arrive")
        #expect(try await !sessions.reload(now: due.addingTimeInterval(2)), "and not a whole read every other reload")
        let again = due.addingTimeInterval(SessionDenyList.fullReloadInterval)
        ledger.now.withLock { $0 = again }
        await #expect(throws: PeerCAError.self, "the whole one again an interval later") { try await sessions.reload(now: again) }
    }
}

/// A real ledger whose ended-sessions reads reaching back further than `limit` seconds before
/// `now` fail, as a store's statement timeout would fail a whole read; everything else is the
/// ledger's own.
final class WholeReadsFail: ForwardingLedger, @unchecked Sendable {
    let limit: Mutex<TimeInterval>
    let now = Mutex(Date())
    init(ledger: any CertificateLedger, limit: TimeInterval) {
        self.limit = Mutex(limit)
        super.init(ledger: ledger)
    }
    override func endedSessions(since: Date) async throws(PeerCAError) -> [String: Date] {
        if now.withLock({ $0 }).timeIntervalSince(since) > limit.withLock({ $0 }) { throw PeerCAError(.ledger, "canceling statement due to statement timeout") }
        return try await ledger.endedSessions(since: since)
    }
}
