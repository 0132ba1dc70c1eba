import Foundation
import Logging
import PeerCA
import PeerCAPostgres
import TestSupport
import Testing

/// The ledger backends the conformance suite runs against.
enum Backend: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case sqlite, postgres
    var testDescription: String { rawValue }

    /// Runs `body` with `count` open handles on one fresh ledger of this backend (separate
    /// connection pools: for PostgreSQL, as separate server instances would have).
    func withLedgers<T>(_ count: Int = 1, _ body: ([any CertificateLedger]) async throws -> T) async throws -> T {
        let logger = Logger(label: "ledger-tests")
        switch self {
        case .sqlite:
            let path = try temporaryDirectory().appendingPathComponent("ledger.sqlite").path
            return try await nest(Array(repeating: LedgerLocation.sqlite(path: path), count: count), logger: logger, [], body)
        case .postgres:
            return try await withTestPostgres { url in
                try await nest(Array(repeating: LedgerLocation.postgres(url: url), count: count), logger: logger, [], body)
            }
        }
    }

    private func nest<T>(
        _ locations: [LedgerLocation], logger: Logger, _ opened: [any CertificateLedger], _ body: ([any CertificateLedger]) async throws -> T
    ) async throws -> T {
        guard let location = locations.first else { return try await body(opened) }
        return try await LedgerStore.with(location, logger: logger) { ledger in
            try await nest(Array(locations.dropFirst()), logger: logger, opened + [ledger], body)
        }
    }
}

/// A certificate row for the ledger (the ledger stores what it is given; the DER need not parse).
func entry(
    _ serial: String, subject: String = "spiffe://app/idp/user-1", commonName: String = "user-1", issuedAt: Double = 1_800_000_000,
    lifetime: Double = 3600, provider: String? = nil
) -> LedgerEntry {
    LedgerEntry(
        serial: serial, subject: subject, commonName: commonName, tokenIssuer: "https://idp.example", tokenSubject: commonName,
        tokenID: "jti-\(serial)", keyFingerprint: String(repeating: "ab", count: 32), notBefore: Date(timeIntervalSince1970: issuedAt - 300),
        notAfter: Date(timeIntervalSince1970: issuedAt + lifetime), issuedAt: Date(timeIntervalSince1970: issuedAt), der: Array(serial.utf8),
        provider: provider)
}

/// One suite, every ``PeerCA/CertificateLedger`` backend: what the CA relies on holds for SQLite
/// and for PostgreSQL alike (PostgreSQL: a real server that scripts/pgtest.sh starts on loopback).
@Suite("Ledger conformance: SQLite and PostgreSQL")
struct LedgerConformanceTests {
    @Test(arguments: Backend.allCases)
    func recordsAndReadsBack(_ backend: Backend) async throws {
        try await backend.withLedgers { ledgers in
            let ledger = ledgers[0]
            let first = entry("0a01", issuedAt: 1_800_000_000)
            let second = entry("0a02", subject: "spiffe://app/idp/user-2", commonName: "user-2", issuedAt: 1_800_000_010)
            try await ledger.record(first, claiming: nil)
            try await ledger.record(second, claiming: TokenUse(issuer: "https://idp.example", tokenID: "t-2"))
            #expect(try await ledger.entry(serial: "0a01") == first)
            #expect(try await ledger.entry(serial: "0A01") == first, "serials are looked up case-insensitively")
            #expect(try await ledger.entry(serial: "ffff") == nil)
            #expect(try await ledger.entries(subject: "spiffe://app/idp/user-2").map(\.serial) == ["0a02"])
            #expect(try await ledger.entries(subject: "user-1").map(\.serial) == ["0a01"])
            #expect(try await ledger.recent(limit: 10).map(\.serial) == ["0a02", "0a01"], "newest first")
            #expect(try await ledger.recent(limit: 1).map(\.serial) == ["0a02"])
        }
    }

    /// A renewal's row: when its session began and which certificate it renews, read back as written.
    @Test(arguments: Backend.allCases)
    func sessionStartAndRenewalOfRoundTrip(_ backend: Backend) async throws {
        try await backend.withLedgers { ledgers in
            let ledger = ledgers[0]
            let base = entry("0e01")
            let renewal = LedgerEntry(
                serial: "0e02", subject: base.subject, commonName: base.commonName, tokenIssuer: base.tokenIssuer, tokenSubject: base.tokenSubject,
                tokenID: nil, keyFingerprint: base.keyFingerprint, notBefore: base.notBefore, notAfter: base.notAfter, issuedAt: base.issuedAt,
                der: [1, 2, 3], provider: "dev", sessionStart: Date(timeIntervalSince1970: 1_799_999_000), renewalOf: "0e01")
            try await ledger.record(base, claiming: nil)
            try await ledger.record(renewal, claiming: nil)
            #expect(try await ledger.entry(serial: "0e02") == renewal)
            #expect(try await ledger.entry(serial: "0e01")?.renewalOf == nil)
            #expect(try await ledger.entry(serial: "0e01")?.sessionStart == nil)
        }
    }

    @Test(arguments: Backend.allCases)
    func aDuplicateSerialIsRefusedWithItsCode(_ backend: Backend) async throws {
        try await backend.withLedgers { ledgers in
            let ledger = ledgers[0]
            try await ledger.record(entry("0b01"), claiming: nil)
            let duplicate = await #expect(throws: PeerCAError.self) {
                try await ledger.record(entry("0b01", commonName: "someone-else"), claiming: TokenUse(issuer: "i", tokenID: "fresh"))
            }
            #expect(duplicate?.code == .serialExists)
            #expect(try await ledger.entry(serial: "0b01")?.commonName == "user-1", "the first row stays")
            // The token use of the refused row was not recorded either: the same use works now.
            try await ledger.record(entry("0b02"), claiming: TokenUse(issuer: "i", tokenID: "fresh"))
        }
    }

    @Test(arguments: Backend.allCases)
    func aTokenUseIsRecordedOnceAndAtomically(_ backend: Backend) async throws {
        try await backend.withLedgers { ledgers in
            let ledger = ledgers[0]
            let use = TokenUse(issuer: "https://idp.example", tokenID: "once")
            try await ledger.record(entry("0c01"), claiming: use)
            let reused = await #expect(throws: PeerCAError.self) { try await ledger.record(entry("0c02"), claiming: use) }
            #expect(reused?.code == .tokenReused)
            #expect(try await ledger.entry(serial: "0c02") == nil, "no certificate without its token use")
            #expect(try await ledger.entry(claiming: use)?.serial == "0c01", "the certificate the use was recorded with")
            #expect(try await ledger.entry(claiming: TokenUse(issuer: "https://idp.example", tokenID: "never")) == nil)
            // Another issuer's token with the same jti is another use.
            try await ledger.record(entry("0c03"), claiming: TokenUse(issuer: "https://other.example", tokenID: "once"))
        }
    }

    @Test(arguments: Backend.allCases)
    func revocationKeepsTheFirstDateAndReason(_ backend: Backend) async throws {
        try await backend.withLedgers { ledgers in
            let ledger = ledgers[0]
            try await ledger.record(entry("0d01", issuedAt: 1_800_000_000, lifetime: 3600), claiming: nil)
            try await ledger.record(entry("0d02", issuedAt: 1_800_000_000, lifetime: 60), claiming: nil)
            try await ledger.record(entry("0d03"), claiming: nil)
            let at = Date(timeIntervalSince1970: 1_800_000_030)
            let revoked = try await ledger.revoke(serial: "0D01", reason: .keyCompromise, at: at)
            #expect(revoked.status == .revoked(at: at, reason: .keyCompromise))
            let again = try await ledger.revoke(serial: "0d01", reason: .superseded, at: at.addingTimeInterval(100))
            #expect(again.status == .revoked(at: at, reason: .keyCompromise))
            _ = try await ledger.revoke(serial: "0d02", reason: .superseded, at: at)
            let missing = await #expect(throws: PeerCAError.self) { _ = try await ledger.revoke(serial: "0dff", reason: .unspecified, at: at) }
            #expect(missing?.code == .notFound)
            // The CRL lists revoked certificates that have not expired: 0d02 expired at +60 s.
            let listed = try await ledger.revoked(notExpiredAt: Date(timeIntervalSince1970: 1_800_000_100)).map(\.serial)
            #expect(listed == ["0d01"])
            #expect(try await ledger.entry(serial: "0d03")?.status == .valid)
        }
    }

    @Test(arguments: Backend.allCases)
    func crlNumbersOnlyGrowAcrossHandles(_ backend: Backend) async throws {
        try await backend.withLedgers(2) { ledgers in
            var last = Int64.min
            for i in 0..<10 {
                let number = try await ledgers[i % 2].nextCRLNumber()
                #expect(number > last)
                last = number
            }
        }
    }

    /// Two handles (two connection pools, as two server instances) writing at once: every distinct
    /// serial is recorded; of 20 claims of one token use, exactly one wins.
    @Test(arguments: Backend.allCases)
    func concurrentWritersLoseNothingAndClaimOnce(_ backend: Backend) async throws {
        try await backend.withLedgers(2) { ledgers in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in 0..<60 {
                    let ledger = ledgers[i % 2]
                    group.addTask { try await ledger.record(entry(String(format: "1%03x", i), issuedAt: 1_800_000_000 + Double(i)), claiming: nil) }
                }
                try await group.waitForAll()
            }
            #expect(try await ledgers[1].recent(limit: 1000).count == 60)
            let use = TokenUse(issuer: "https://idp.example", tokenID: "contended")
            let outcomes = await withTaskGroup(of: PeerCAError.Code?.self) { group in
                for i in 0..<20 {
                    let ledger = ledgers[i % 2]
                    group.addTask {
                        do {
                            try await ledger.record(entry(String(format: "2%03x", i)), claiming: use)
                            return nil
                        } catch {
                            return (error as? PeerCAError)?.code ?? PeerCAError.Code(rawValue: "\(error)")
                        }
                    }
                }
                var codes: [PeerCAError.Code?] = []
                for await code in group { codes.append(code) }
                return codes
            }
            #expect(outcomes.filter { $0 == nil }.count == 1)
            #expect(outcomes.compactMap { $0 }.allSatisfy { $0 == .tokenReused }, "\(outcomes)")
            #expect(try await ledgers[0].recent(limit: 1000).count == 61)
        }
    }
}

/// Store URLs: the two forms, typed errors for the rest, and no password in descriptions.
@Suite("Ledger locations")
struct LedgerLocationTests {
    @Test func storeURLsParse() throws {
        #expect(try LedgerLocation("sqlite:state/ledger.sqlite") == .sqlite(path: "state/ledger.sqlite"))
        #expect(try LedgerLocation("postgres://u:p@db:5432/tt") == .postgres(url: "postgres://u:p@db:5432/tt"))
        #expect(try LedgerLocation("postgresql://u@db/tt").url == "postgresql://u@db/tt")
        for bad in ["mysql://x", "sqlite:", "", "ledger.sqlite"] {
            let error = #expect(throws: PeerCAError.self) { _ = try LedgerLocation(bad) }
            #expect(error?.code == .invalidSettings)
        }
        let secret = try LedgerLocation("postgres://tokentool:s3cret@db:5432/tt")
        #expect(!secret.description.contains("s3cret"))
        #expect(secret.holdsPassword)
        #expect(!(try LedgerLocation("postgres://tokentool@db/tt")).holdsPassword)
    }

    /// A PostgreSQL server that takes connections and never answers (a listening socket nobody
    /// reads): preparing the ledger fails once the connection wait is over, with an error that
    /// names the server and not the password, instead of waiting without end (what `tokentool
    /// serve` did at start with a server that was down).
    @Test(.timeLimit(.minutes(3))) func aSilentPostgresServerFailsThePreparationInTime() async throws {
        let listener = try LoopbackListener()
        let ledger = try PostgresLedger(url: "postgres://tokentool:s3cret@127.0.0.1:\(listener.port)/tt?sslmode=disable", logger: Logger(label: "t"))
        await withTaskGroup(of: Void.self) { tasks in
            tasks.addTask { await ledger.run() }
            defer { tasks.cancelAll() }
            let start = ContinuousClock.now
            let error = await #expect(throws: PeerCAError.self) { try await ledger.migrate(connectionWait: .seconds(1)) }
            #expect(ContinuousClock.now - start < .seconds(60))
            #expect(error?.code == .ledger)
            #expect(error?.message.contains("127.0.0.1:\(listener.port)") == true, "\(error?.message ?? "")")
            #expect(error?.message.contains("s3cret") == false)
        }
        withExtendedLifetime(listener) {}
    }

    /// A bad PostgreSQL URL is a typed settings error that does not repeat the password.
    @Test func aBadPostgresURLIsATypedError() {
        let error = #expect(throws: PeerCAError.self) { _ = try LedgerStore.open(.postgres(url: "postgres://:s3cret@/"), logger: Logger(label: "t")) }
        #expect(error?.code == .invalidSettings)
        #expect(error?.message.contains("s3cret") == false)
    }
}

/// `entries(subject:)` takes a SPIFFE ID or an account and matches either column, whichever
/// accounts share a SPIFFE ID or SPIFFE IDs an account (the SQLite ledger finds SPIFFE IDs through
/// its table of (SPIFFE ID, account) pairs rather than an index of every certificate).
@Suite("Ledger lookups by SPIFFE ID or account")
struct LedgerSubjectLookupTests {
    @Test(arguments: Backend.allCases)
    func aLookupMatchesTheSPIFFEIDOrTheAccountAcrossAccounts(_ backend: Backend) async throws {
        try await backend.withLedgers(2) { ledgers in
            let ledger = ledgers[0]
            let shared = "spiffe://app/idp/shared"
            try await ledger.record(entry("1a01", subject: shared, commonName: "acct-a", issuedAt: 1_800_000_001), claiming: nil)
            try await ledger.record(entry("1a02", subject: "spiffe://app/other/a", commonName: "acct-a", issuedAt: 1_800_000_002), claiming: nil)
            try await ledger.record(entry("1a03", subject: shared, commonName: "acct-b", issuedAt: 1_800_000_003), claiming: nil)
            // A SPIFFE ID that is literally another row's account name.
            try await ledger.record(entry("1a04", subject: "acct-a", commonName: "acct-c", issuedAt: 1_800_000_004), claiming: nil)
            // A second certificate for a pair already known.
            try await ledger.record(entry("1a05", subject: shared, commonName: "acct-a", issuedAt: 1_800_000_005), claiming: nil)
            for handle in ledgers {
                #expect(try await handle.entries(subject: shared).map(\.serial) == ["1a05", "1a03", "1a01"])
                #expect(try await handle.entries(subject: "spiffe://app/other/a").map(\.serial) == ["1a02"])
                #expect(try await handle.entries(subject: "acct-a").map(\.serial) == ["1a05", "1a04", "1a02", "1a01"])
                #expect(try await handle.entries(subject: "acct-b").map(\.serial) == ["1a03"])
                #expect(try await handle.entries(subject: "acct-c").map(\.serial) == ["1a04"])
                #expect(try await handle.entries(subject: "spiffe://app/idp/nobody").isEmpty)
            }
            // A certificate refused for its reused token leaves nothing to find under its names.
            let use = TokenUse(issuer: "https://idp.example", tokenID: "lookup-once")
            try await ledger.record(entry("1a06", subject: shared, commonName: "acct-d", issuedAt: 1_800_000_006), claiming: use)
            await #expect {
                try await ledger.record(entry("1a07", subject: "spiffe://app/idp/refused", commonName: "acct-e", issuedAt: 1_800_000_007), claiming: use)
            } throws: { error in (error as? PeerCAError)?.code == .tokenReused }
            #expect(try await ledger.entries(subject: "spiffe://app/idp/refused").isEmpty)
            #expect(try await ledger.entries(subject: "acct-e").isEmpty)
            #expect(try await ledger.entries(subject: shared).map(\.serial) == ["1a06", "1a05", "1a03", "1a01"])
        }
    }
}
