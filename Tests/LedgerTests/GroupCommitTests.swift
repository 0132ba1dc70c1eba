import Foundation
import GRDB
import Logging
import PeerCA
import PeerCAPostgres
import PostgresNIO
import Synchronization
import TestSupport
import Testing

/// A gate a batch write waits at until the test opens it.
private final class Gate: Sendable {
    private let stream: AsyncStream<Void>
    private let continuation: AsyncStream<Void>.Continuation
    init() { (stream, continuation) = AsyncStream<Void>.makeStream() }
    func wait() async { for await _ in stream { return } }
    func open() { continuation.finish() }
}

/// Polls `condition` every millisecond for up to 120 s (a condition that never holds fails the test;
/// each test releases what its writers wait on when this throws, so it does not hang either).
///
/// The limit is generous because the wait is for the concurrency pool, not for the code under
/// test: at the start of a full run, tests that run child processes (openssl, Python, the CLI)
/// block the pool's two threads on this 2-core machine, and a 20 s limit once ran out before the
/// first batch's task got a thread.
private func eventually(_ what: String, _ condition: () -> Bool) async throws {
    guard await TestSupport.eventually(condition) else {
        Issue.record("never: \(what)")
        throw CancellationError()
    }
}

/// Group commit: the requests that arrive while a batch is written go together in the next one,
/// nobody is answered before their batch is written, and each gets its own result.
@Suite("Group commit")
struct GroupCommitTests {
    @Test func requestsArrivingDuringAWriteShareTheNextBatchAndWaitForIt() async throws {
        let gate = Gate()
        let batches = Mutex<[[Int]]>([])
        let commits = GroupCommit<Int> { batch in
            batches.withLock { $0.append(batch) }
            if batch == [0] { await gate.wait() }
            return batch.map { $0 == 7 ? .failure(PeerCAError(.serialExists, "seven exists")) : .success(()) }
        }
        let answered = Mutex(0)
        let submit: @Sendable (Int) async -> (Int, PeerCAError.Code?) = { i in
            defer { answered.withLock { $0 += 1 } }
            do throws(PeerCAError) {
                try await commits.submit(i)
                return (i, nil)
            } catch {
                return (i, error.code)
            }
        }
        try await withThrowingTaskGroup(of: (Int, PeerCAError.Code?).self) { group in
            defer { gate.open() }  // never leave a writer waiting, even when a check below throws
            // The first request finds no batch running: it is written at once, alone.
            group.addTask { await submit(0) }
            try await eventually("the first batch starts") { commits.statistics.batches == 1 }
            for i in 1...9 { group.addTask { await submit(i) } }
            try await eventually("nine requests wait") { commits.statistics.waiting == 9 }
            #expect(answered.withLock { $0 } == 0, "nobody is answered while their batch is not written")
            gate.open()
            var outcomes: [Int: PeerCAError.Code?] = [:]
            for try await (i, code) in group { outcomes[i] = code }
            #expect(outcomes.count == 10)
            #expect(outcomes[7] == .some(.serialExists), "one request's failure is its own")
            #expect(outcomes.filter { $0.key != 7 }.allSatisfy { $0.value == nil })
        }
        let written = batches.withLock { $0 }
        #expect(written.count == 2)
        #expect(written.first == [0])
        #expect(Set(written.last ?? []) == Set(1...9), "the nine waiting requests go in one batch")
        let statistics = commits.statistics
        #expect((statistics.batches, statistics.requests, statistics.waiting, statistics.largestBatch) == (2, 10, 0, 9))
    }

    @Test func batchesAreCappedAndAShortResultFailsTheRestRatherThanHang() async throws {
        let gate = Gate()
        let commits = GroupCommit<Int>(maximumBatch: 4) { batch in
            if batch == [0] { await gate.wait() }
            return Array(batch.map { _ in Result<Void, PeerCAError>.success(()) }.prefix(3))  // one result short
        }
        let codes = try await withThrowingTaskGroup(of: PeerCAError.Code?.self) { group in
            defer { gate.open() }  // never leave a writer waiting, even when a check below throws
            for i in 0..<9 {
                group.addTask {
                    do throws(PeerCAError) {
                        try await commits.submit(i)
                        return nil
                    } catch { return error.code }
                }
                if i == 0 { try await eventually("the first batch starts") { commits.statistics.batches == 1 } }
            }
            try await eventually("eight requests wait") { commits.statistics.waiting == 8 }
            gate.open()
            var codes: [PeerCAError.Code?] = []
            for try await code in group { codes.append(code) }
            return codes
        }
        // Batches [0], then 4 and 4: the last of each four has no result.
        #expect(commits.statistics.batches == 3)
        #expect(commits.statistics.largestBatch == 4)
        #expect(codes.filter { $0 == PeerCAError.Code.ledger }.count == 2)
        #expect(codes.filter { $0 == nil }.count == 7)
    }

    /// A request cancelled while it waits for the next batch is withdrawn at once (what a request
    /// answered 503 at its deadline needs: no certificate recorded after the client was told it
    /// failed, its token's `jti` left unused); one cancelled before it is queued never enters; one
    /// already in the batch being written is not withdrawn and gets that batch's result.
    @Test func aCancelledRequestIsWithdrawnUnlessItsBatchHasBegun() async throws {
        let gate = Gate()
        let batches = Mutex<[[Int]]>([])
        let commits = GroupCommit<Int> { batch in
            batches.withLock { $0.append(batch) }
            if batch == [0] { await gate.wait() }
            return batch.map { _ in .success(()) }
        }
        let submit: @Sendable (Int) async -> PeerCAError? = { i in
            do throws(PeerCAError) {
                try await commits.submit(i)
                return nil
            } catch { return error }
        }
        defer { gate.open() }  // never leave a writer waiting, even when a check below throws
        let first = Task { await submit(0) }
        try await eventually("the first batch starts") { commits.statistics.batches == 1 }
        let waiting = (1...3).map { i in Task { await submit(i) } }
        try await eventually("three requests wait") { commits.statistics.waiting == 3 }

        let answered = Mutex<PeerCAError??>(nil)
        let watcher = Task { let result = await waiting[1].value; answered.withLock { $0 = .some(result) } }
        waiting[1].cancel()
        first.cancel()
        // Answered while the gate is still shut: a withdrawn request does not wait for the batch.
        try await eventually("the cancelled request is answered before the batch ahead of it ends") { answered.withLock { $0 != nil } }
        await watcher.value
        let withdrawn = answered.withLock { $0 ?? nil }
        #expect(withdrawn?.code == .ledger)
        #expect(withdrawn?.message.contains("nothing was recorded") == true, "\(String(describing: withdrawn))")
        #expect(commits.statistics.waiting == 2)
        #expect(commits.statistics.withdrawn == 1)

        gate.open()
        #expect(await first.value == nil, "its batch had begun: cancellation does not withdraw it")
        #expect(await waiting[0].value == nil)
        #expect(await waiting[2].value == nil)
        var written = batches.withLock { $0 }
        #expect(written.count == 2 && written.first == [0] && Set(written.last ?? []) == [1, 3], "the withdrawn request was not written: \(written)")

        // With nothing being written, a request cancelled before it is submitted would start a
        // batch of its own: it is refused instead.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await submit(9)
        }
        #expect(await early.value?.code == .ledger, "cancelled before it was queued: refused, not written")
        written = batches.withLock { $0 }
        #expect(written.count == 2, "\(written)")
        #expect(commits.statistics.withdrawn == 2)
        #expect(commits.statistics.requests == 3)
    }

    /// The SQLite ledger: while another connection holds the write lock, 40 records queue behind
    /// the first; when it lets go, they are written in one transaction, and all are there.
    @Test func theSQLiteLedgerWritesWaitingRecordsInOneTransaction() async throws {
        let path = try temporaryDirectory().appendingPathComponent("ledger.sqlite").path
        let ledger = try SQLiteLedger(path: path)
        var configuration = Configuration()
        configuration.allowsUnsafeTransactions = true
        let other = try DatabaseQueue(path: path, configuration: configuration)
        try await other.writeWithoutTransaction { db in try db.execute(sql: "BEGIN IMMEDIATE") }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await ledger.record(entry("3000"), claiming: TokenUse(issuer: "i", tokenID: "t-0")) }
            do {
                try await eventually("the first batch starts") { ledger.commitStatistics.batches == 1 }
                for i in 1...40 {
                    group.addTask { try await ledger.record(entry(String(format: "3%03x", i)), claiming: TokenUse(issuer: "i", tokenID: "t-\(i)")) }
                }
                try await eventually("40 records wait") { ledger.commitStatistics.waiting == 40 }
            } catch {
                try? await other.writeWithoutTransaction { db in try db.execute(sql: "ROLLBACK") }  // let the writers through
                throw error
            }
            try await other.writeWithoutTransaction { db in try db.execute(sql: "COMMIT") }
            try await group.waitForAll()
        }
        #expect(ledger.commitStatistics.batches == 2)
        #expect(ledger.commitStatistics.largestBatch == 40)
        #expect(try await ledger.recent(limit: 100).count == 41)
        let uses = try await other.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM token_uses") }
        #expect(uses == 41)
    }

    /// Durability: the connection that writes has `synchronous = FULL` (2), so each group commit
    /// is flushed before anyone is answered. GRDB's DatabasePool sets NORMAL on its writer after
    /// `prepareDatabase`; the ledger must set FULL after that, on a new file and on a reopened one.
    @Test func theSQLiteLedgerFlushesEveryCommit() async throws {
        let path = try temporaryDirectory().appendingPathComponent("ledger.sqlite").path
        #expect(try SQLiteLedger(path: path).writerPragma("synchronous") == 2)
        let reopened = try SQLiteLedger(path: path)
        try await reopened.record(entry("4000"), claiming: nil)
        #expect(try reopened.writerPragma("synchronous") == 2)
        // SQLite's own checkpoint every 1,000 WAL pages, and the WAL cut back to 4 MiB after one.
        #expect(try reopened.writerPragma("wal_autocheckpoint") == 1000)
        #expect(try reopened.writerPragma("journal_size_limit") == SQLiteLedger.walSizeLimit)
        // A 16 MiB page cache for the writer (negative: KiB), SQLite's default being 2 MiB.
        #expect(try reopened.writerPragma("cache_size") == -16_384)
    }

    /// The PostgreSQL ledger: while another session holds an exclusive lock on the table, 40
    /// records queue behind the first; when it commits, they go in one multi-row INSERT.
    @Test func thePostgresLedgerWritesWaitingRecordsInOneTransaction() async throws {
        let logger = Logger(label: "group-commit-tests")
        try await withTestPostgres { url in
            try await LedgerStore.with(.postgres(url: url), logger: logger) { opened in
                let ledger = try #require(opened as? PostgresLedger)
                let client = try Self.client(url, logger: logger)
                try await withThrowingTaskGroup(of: Void.self) { service in
                    service.addTask { await client.run() }
                    try await client.withConnection { connection in
                        try await connection.query("BEGIN", logger: logger)
                        try await connection.query("LOCK TABLE certificates IN EXCLUSIVE MODE", logger: logger)
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            group.addTask { try await ledger.record(entry("5000"), claiming: TokenUse(issuer: "i", tokenID: "t-0")) }
                            do {
                                try await eventually("the first batch starts") { ledger.commitStatistics.batches == 1 }
                                for i in 1...40 {
                                    group.addTask {
                                        try await ledger.record(entry(String(format: "5%03x", i)), claiming: TokenUse(issuer: "i", tokenID: "t-\(i)"))
                                    }
                                }
                                try await eventually("40 records wait") { ledger.commitStatistics.waiting == 40 }
                            } catch {
                                _ = try? await connection.query("ROLLBACK", logger: logger)  // let the writers through
                                throw error
                            }
                            try await connection.query("COMMIT", logger: logger)
                            try await group.waitForAll()
                        }
                    }
                    service.cancelAll()
                }
                #expect(ledger.commitStatistics.batches == 2)
                #expect(ledger.commitStatistics.largestBatch == 40)
                #expect(try await ledger.recent(limit: 100).count == 41)
            }
        }
    }

    /// A PostgreSQL client of the test's own on the ledger's database (run it while using it).
    static func client(_ url: String, logger: Logger) throws -> PostgresClient {
        let components = try #require(URLComponents(string: url))
        return PostgresClient(
            configuration: .init(
                host: try #require(components.host), port: components.port ?? 5432, username: try #require(components.user),
                password: components.password, database: String(components.path.dropFirst()), tls: .disable),
            backgroundLogger: logger)
    }

    /// A batch holding refused records (retries of a one-use token, a serial that exists) is still
    /// one transaction on PostgreSQL: the refused rows are skipped, not an error that undoes the
    /// batch and writes every record again alone (before: 1 + 40 transactions for this batch).
    @Test func refusedRecordsDoNotUndoTheirPostgresBatch() async throws {
        let logger = Logger(label: "group-commit-tests")
        try await withTestPostgres { url in
            try await LedgerStore.with(.postgres(url: url), logger: logger) { opened in
                let ledger = try #require(opened as? PostgresLedger)
                try await ledger.record(entry("6000"), claiming: TokenUse(issuer: "i", tokenID: "used"))
                let client = try Self.client(url, logger: logger)
                // Each call is a transaction of its own and takes the next ID: the IDs between two
                // calls, less one, are the writing transactions in between.
                func transactionID() async throws -> Int64 {
                    for try await id in try await client.query("SELECT txid_current()", logger: logger).decode(Int64.self) { return id }
                    return -1
                }
                let outcomes = try await withThrowingTaskGroup(of: Void.self) { service in
                    service.addTask { await client.run() }
                    defer { service.cancelAll() }
                    // Every certificate deleted is counted: no refusal may delete one (PostgreSQL would
                    // then look for its token uses, through a table with no index on `serial`).
                    try await client.query("CREATE TABLE deleted_certificates (serial TEXT)", logger: logger)
                    try await client.query(
                        """
                        CREATE FUNCTION count_deleted() RETURNS trigger LANGUAGE plpgsql AS
                            $$ BEGIN INSERT INTO deleted_certificates VALUES (OLD.serial); RETURN OLD; END $$
                        """, logger: logger)
                    try await client.query(
                        "CREATE TRIGGER count_deleted AFTER DELETE ON certificates FOR EACH ROW EXECUTE FUNCTION count_deleted()", logger: logger)
                    let before = try await transactionID()
                    let outcomes = try await client.withConnection { connection in
                        try await connection.query("BEGIN", logger: logger)
                        try await connection.query("LOCK TABLE certificates IN EXCLUSIVE MODE", logger: logger)
                        return try await withThrowingTaskGroup(of: (Int, PeerCAError.Code?).self) { group in
                            func add(_ i: Int) {
                                group.addTask {
                                    // Every fourth a retry of the used token, the tenth an existing serial, the
                                    // 12th and 13th one new token claimed twice, the 14th the 2nd's serial again.
                                    let serial = i == 10 ? "6000" : i == 14 ? "6002" : String(format: "6%03x", i)
                                    let use = TokenUse(issuer: "i", tokenID: i % 4 == 3 ? "used" : i == 12 || i == 13 ? "twice" : "t-\(i)")
                                    do throws(PeerCAError) {
                                        try await ledger.record(entry(serial), claiming: use)
                                        return (i, nil)
                                    } catch { return (i, error.code) }
                                }
                            }
                            add(1)
                            do {
                                try await eventually("the first batch starts") { ledger.commitStatistics.batches == 2 }
                                for i in 2...41 { add(i) }
                                try await eventually("40 records wait") { ledger.commitStatistics.waiting == 40 }
                            } catch {
                                _ = try? await connection.query("ROLLBACK", logger: logger)
                                throw error
                            }
                            try await connection.query("COMMIT", logger: logger)
                            var outcomes: [Int: PeerCAError.Code?] = [:]
                            for try await (i, code) in group { outcomes[i] = code }
                            return outcomes
                        }
                    }
                    let used = try await transactionID() - before - 1
                    #expect(used <= 3, "the waiting batch in one transaction (and the first's): \(used)")
                    for try await deleted in try await client.query("SELECT count(*) FROM deleted_certificates", logger: logger).decode(Int64.self) {
                        #expect(deleted == 0, "no certificate deleted")
                    }
                    return outcomes
                }
                #expect(ledger.commitStatistics.largestBatch == 40)
                // Of the token claimed twice in the batch and of the serial written twice, one each.
                #expect([outcomes[12], outcomes[13]].filter { $0 == .some(nil) }.count == 1)
                #expect([outcomes[12], outcomes[13]].filter { $0 == .some(.tokenReused) }.count == 1)
                let twice = try #require(try await ledger.entry(claiming: TokenUse(issuer: "i", tokenID: "twice")))
                #expect(try await ledger.entry(serial: twice.serial == "600c" ? "600d" : "600c") == nil)
                #expect([outcomes[2], outcomes[14]].filter { $0 == .some(nil) }.count == 1)
                #expect([outcomes[2], outcomes[14]].filter { $0 == .some(.serialExists) }.count == 1)
                let kept = outcomes[2] == .some(nil) ? "t-2" : "t-14", dropped = kept == "t-2" ? "t-14" : "t-2"
                #expect(try await ledger.entry(claiming: TokenUse(issuer: "i", tokenID: kept))?.serial == "6002")
                #expect(try await ledger.entry(claiming: TokenUse(issuer: "i", tokenID: dropped)) == nil, "no use left for a refused serial")
                for i in 1...41 where ![2, 12, 13, 14].contains(i) {
                    let serial = String(format: "6%03x", i)
                    if i == 10 {
                        #expect(outcomes[i] == .some(.serialExists))
                    } else if i % 4 == 3 {
                        #expect(outcomes[i] == .some(.tokenReused), "\(i)")
                        #expect(try await ledger.entry(serial: serial) == nil, "\(i): its certificate is not kept")
                    } else {
                        #expect(outcomes[i] == .some(nil), "\(i)")
                        #expect(try await ledger.entry(serial: serial) != nil, "\(i)")
                        #expect(try await ledger.entry(claiming: TokenUse(issuer: "i", tokenID: "t-\(i)"))?.serial == serial, "\(i)")
                    }
                }
                #expect(try await ledger.entry(claiming: TokenUse(issuer: "i", tokenID: "t-10")) == nil, "no use for a certificate not written")
                #expect(try await ledger.entry(claiming: TokenUse(issuer: "i", tokenID: "used"))?.serial == "6000")
            }
        }
    }
}

extension LedgerConformanceTests {
    /// Many records at once on one handle (so they share transactions): the ones refused by a
    /// unique key — a token use claimed before or twice in the same burst, a serial that exists —
    /// fail alone, with their own code, and leave nothing; every other one is recorded.
    @Test(arguments: Backend.allCases)
    func refusedRecordsInABurstFailAloneAndLeaveNothing(_ backend: Backend) async throws {
        try await backend.withLedgers { ledgers in
            let ledger = ledgers[0]
            try await ledger.record(entry("4000"), claiming: TokenUse(issuer: "i", tokenID: "claimed"))
            enum Kind: Sendable { case fresh, claimedBefore, claimedTwiceInBurst, existingSerial }
            let kinds: [Kind] = (0..<120).map { i in
                switch i % 12 {
                case 3: .claimedBefore
                case 5, 6: .claimedTwiceInBurst
                case 9: .existingSerial
                default: .fresh
                }
            }
            let outcomes = await withTaskGroup(of: (Int, PeerCAError.Code?).self) { group in
                for (i, kind) in kinds.enumerated() {
                    group.addTask {
                        let serial = kind == .existingSerial ? "4000" : String(format: "4%03x", i + 1)
                        let use: TokenUse? = switch kind {
                        case .fresh: i % 2 == 0 ? nil : TokenUse(issuer: "i", tokenID: "fresh-\(i)")
                        case .claimedBefore: TokenUse(issuer: "i", tokenID: "claimed")
                        case .claimedTwiceInBurst: TokenUse(issuer: "i", tokenID: "pair-\(i / 12)")
                        case .existingSerial: TokenUse(issuer: "i", tokenID: "for-an-existing-serial-\(i)")
                        }
                        do throws(PeerCAError) {
                            try await ledger.record(entry(serial, commonName: "burst-\(i)"), claiming: use)
                            return (i, nil)
                        } catch {
                            return (i, error.code)
                        }
                    }
                }
                var outcomes: [Int: PeerCAError.Code?] = [:]
                for await (i, code) in group { outcomes[i] = code }
                return outcomes
            }
            for (i, kind) in kinds.enumerated() {
                switch kind {
                case .fresh:
                    #expect(outcomes[i] == .some(nil), "\(i): a fresh record is recorded")
                    #expect(try await ledger.entry(serial: String(format: "4%03x", i + 1))?.commonName == "burst-\(i)")
                case .claimedBefore:
                    #expect(outcomes[i] == .some(.tokenReused), "\(i)")
                    #expect(try await ledger.entry(serial: String(format: "4%03x", i + 1)) == nil, "\(i): nothing left of it")
                case .existingSerial:
                    #expect(outcomes[i] == .some(.serialExists), "\(i)")
                case .claimedTwiceInBurst:
                    break
                }
            }
            // Of each pair claiming one token, exactly one is recorded.
            for pair in 0..<10 {
                let members = [pair * 12 + 5, pair * 12 + 6]
                let codes = members.map { outcomes[$0] ?? .some(.ledger) }
                #expect(codes.filter { $0 == nil }.count == 1, "pair \(pair): \(codes)")
                #expect(codes.filter { $0 == .tokenReused }.count == 1, "pair \(pair): \(codes)")
            }
            #expect(try await ledger.entry(serial: "4000")?.commonName == "user-1", "the existing row stays")
            // Recorded: the first row, 80 fresh, one of each of the 10 pairs.
            #expect(try await ledger.recent(limit: 1000).count == 1 + 80 + 10)
            // A use refused with its record was not recorded: claiming it now works.
            try await ledger.record(entry("4fff"), claiming: TokenUse(issuer: "i", tokenID: "for-an-existing-serial-9"))
        }
    }
}
