import Foundation
import Logging
import NIOHTTP1
import PeerCA
import PeerCAPostgres
import TestSupport
import Synchronization
import Testing
import TokenKit
@testable import TokenServer

/// Two service instances sharing one real PostgreSQL server (started on loopback by
/// scripts/pgtest.sh, stopped after) and one CA directory.
@Suite("Two instances, one PostgreSQL ledger", .serialized)
struct PostgresTests {
    @Test func serialsReuseAndRevocationHoldAcrossInstances() async throws {
        try await withTestPostgres { url in try await twoInstances(url) }
    }

    /// A PostgreSQL server out of reach (shut down: connections refused): issuance is refused with
    /// a 503 a client retries (`Retry-After`), never a 200 and never a bare 500, and works again
    /// once the server is back, without a restart of the service.
    @Test func anUnreachableLedgerIsA503AndTheServiceRecovers() async throws {
        try await withTestPostgresCluster { url, cluster in
            try await LiveServer.with(configure: {
                $0.store = url
                $0.limits = ServerConfiguration.Limits(requestTimeoutSeconds: 5)
            }) { server in
                let issue = try Self.issuer(server)
                #expect(try await issue(try server.token()).status == 200)
                try await cluster.whileDown {
                    let csr = try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate())
                    let body = JSONValue.object(["provider": .string("dev"), "token": .string(try server.token()), "csr": .string(csr)])
                    let (status, reply, headers) = try await server.request(.POST, "/v1/certificates", body: Array(body.compactText.utf8))
                    let code = (try? JSONValue.parse(reply))?.objectValue?["error"].errorCode
                    #expect(status == 503, "\(status) \(String(decoding: reply, as: UTF8.self))")
                    #expect(code == "ledger_unavailable" || code == "timeout", "\(String(decoding: reply, as: UTF8.self))")
                    #expect(headers.first(name: "retry-after") == "1")
                }
                var recovered = false
                for _ in 0..<60 where !recovered {
                    recovered = try await issue(try server.token()).status == 200
                    if !recovered { try await Task.sleep(for: .seconds(1)) }
                }
                #expect(recovered, "issuance works again once PostgreSQL is back")
            }
        }
    }

    /// A PostgreSQL server that stops answering (its processes stopped by SIGSTOP: connections
    /// open, nothing answered): the CRL is answered 503 `timeout` and OCSP with a `tryLater`
    /// response within the request timeout, instead of being held until the database returns.
    @Test func aStalledLedgerIsAnsweredWithinTheTimeout() async throws {
        try await withTestPostgresCluster { url, cluster in
            try await LiveServer.with(configure: {
                $0.store = url
                $0.limits = ServerConfiguration.Limits(requestTimeoutSeconds: 2)
            }) { server in
                let csr = try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate())
                let (status, issued) = try await server.json(
                    "/v1/certificates", ["provider": .string("dev"), "token": .string(try server.token()), "csr": .string(csr)])
                #expect(status == 200)
                let dir = try temporaryDirectory()
                let openssl = try #require(which("openssl"))
                let chain = try #require(issued["certificate"]?.stringValue)
                try Self.writeLeafAndIssuer(chain, to: dir)
                // -timeout: a server that held the request would fail the test rather than hang it.
                let ocspArguments = ["ocsp", "-issuer", "issuer.pem", "-cert", "leaf.pem", "-url", server.base + "/v1/ocsp", "-noverify", "-timeout", "60"]
                #expect(try await server.request(.GET, "/v1/crl").status == 200)
                let before = try await runDetached(openssl, ocspArguments, cwd: dir)
                #expect(before.out.contains("leaf.pem: good"), "\(before.out)\(before.err)")

                try await cluster.whileStopped {
                    let start = ContinuousClock.now
                    let crl = try await server.request(.GET, "/v1/crl")
                    #expect(crl.status == 503)
                    #expect(String(decoding: crl.body, as: UTF8.self).contains("\"timeout\""))
                    let ocsp = try await runDetached(openssl, ocspArguments, cwd: dir)
                    #expect((ocsp.out + ocsp.err).lowercased().contains("trylater"), "\(ocsp.out)\(ocsp.err)")
                    let elapsed = ContinuousClock.now - start
                    // Each waited its 2 s; the upper bound leaves room for a pool other tests keep busy.
                    #expect(elapsed >= .seconds(3.5) && elapsed < .seconds(90), "\(elapsed)")
                }
                #expect(try await server.request(.GET, "/v1/crl").status == 200)
            }
        }
    }

    /// While the PostgreSQL server is stopped, a certificate request behind the batch being written
    /// is answered 503 at its deadline and withdrawn from the group commit: once the server is back,
    /// its token (one certificate per `jti`) still gets a certificate, while the record whose batch
    /// had begun is written. (That batch is started by the test on the ledger itself, so that it
    /// begins whatever the pool's load; the request, queued or — on a pool too busy to reach the
    /// ledger before its deadline — refused before it is queued, is withdrawn either way.)
    @Test func aRequestAnsweredAtItsDeadlineLeavesItsTokenUnused() async throws {
        try await withTestPostgresCluster { url, cluster in
            try await LiveServer.with(configure: {
                $0.store = url
                $0.ca?.tokenReuse = .oncePerTokenID
                $0.limits = ServerConfiguration.Limits(requestTimeoutSeconds: 2)
            }) { server in
                let issue = try Self.issuer(server)
                let ledger = server.service.store.ledger
                let statistics = { server.service.store.commitStatistics }
                #expect(try await issue(try server.token()).status == 200)  // the pool holds an open connection
                let token = try server.token()
                let now = Date()
                let entry = LedgerEntry(
                    serial: "ff00000000000001", subject: "spiffe://test/dev/held", commonName: "held", tokenIssuer: "test", tokenSubject: "held",
                    tokenID: nil, keyFingerprint: String(repeating: "ab", count: 32), notBefore: now, notAfter: now + 3600, issuedAt: now,
                    der: [0x30, 0x00])

                // Awaited once the server runs again.
                let held = try await cluster.whileStopped {
                    let held = Task { try await ledger.record(entry, claiming: nil) }
                    #expect(await eventually { statistics()?.batches == 2 }, "the held record's batch begins")
                    let answer = try await issue(token)
                    #expect(answer.status == 503 && answer.json["error"].errorCode == "timeout", "\(answer)")
                    #expect(await eventually { statistics()?.withdrawn == 1 }, "the request's work was cancelled at its deadline")
                    #expect(statistics()?.waiting == 0)
                    return held
                }
                try await held.value

                #expect(try await ledger.entry(serial: entry.serial) != nil, "its batch had begun: written once the server answered")
                let again = try await issue(token)
                #expect(again.status == 200, "withdrawn before its batch: its token was never used (\(again.json))")
                #expect(statistics()?.withdrawn == 1)
            }
        }
    }

    /// A client that gives up on a certificate request after its transaction has begun (the
    /// PostgreSQL server stopped by SIGSTOP mid-batch, the client's connection closed) never sees
    /// the answer, but the certificate is recorded once the server returns; the client's retry
    /// with the same one-use token and key is given that certificate, not `token_reused`.
    @Test func aRetryGetsTheCertificateWhoseAnswerWasLost() async throws {
        try await withTestPostgresCluster { url, cluster in
            try await LiveServer.with(configure: {
                $0.store = url
                $0.ca?.tokenReuse = .oncePerTokenID
            }) { server in
                let issue = try Self.issuer(server)
                let statistics = { server.service.store.commitStatistics }
                #expect(try await issue(try server.token()).status == 200)  // the pool holds an open connection
                let jti = UUID().uuidString
                let token = try server.token(["jti": .string(jti)])

                try await cluster.whileStopped {
                    let lost = Task { try await issue(token) }
                    #expect(await eventually(within: .seconds(60)) { statistics()?.batches == 2 }, "the request's batch begins")
                    lost.cancel()
                    #expect((try? await lost.value) == nil, "the client gave up: no answer")
                }

                // Its batch commits once the server answers again.
                let use = TokenUse(issuer: ServerConfiguration.devIssuer, tokenID: jti)
                var recorded: LedgerEntry?
                for _ in 0..<600 where recorded == nil {
                    recorded = try await server.service.store.ledger.entry(claiming: use)
                    if recorded == nil { try await Task.sleep(for: .milliseconds(100)) }
                }
                let earlier = try #require(recorded, "the batch that had begun was written when the server returned")
                #expect(statistics()?.withdrawn == 0)
                let retry = try await issue(token)
                #expect(retry.status == 200, "\(retry.json)")
                #expect(retry.json["serial"]?.stringValue == earlier.serial, "the certificate its batch recorded")
            }
        }
    }

    /// A store that hangs instead of refusing (the PostgreSQL server stopped by SIGSTOP): the
    /// ended-sessions reload is reported overdue after its limit (logged, counted), the list's age
    /// shows how stale it is, and the list follows the store again once it answers.
    @Test func aHangingStoreShowsAsAnOverdueSessionsReload() async throws {
        try await withTestPostgresCluster { url, cluster in
            try await LiveServer.with(configure: {
                $0.store = url
                $0.sessions = ServerConfiguration.Sessions(refreshSeconds: 0.2)
            }) { server in
                let sessions = server.service.sessions
                let age = { sessions.statistics.loadedAt.map { ContinuousClock.now - $0 } ?? .seconds(1_000_000) }
                #expect(sessions.overdueAfter == .seconds(1), "five intervals, at least one second")
                #expect(await eventually(within: .seconds(30)) { age() < .seconds(1) }, "reloaded every 0.2 s")
                let before = sessions.statistics.failures  // 0 unless a reload took over 1 s on a busy machine

                try await cluster.whileStopped {
                    #expect(await eventually(within: .seconds(30)) { sessions.statistics.failures > before }, "the hanging reload is reported at its limit")
                    #expect(age() >= .seconds(1), "the list is as old as the last answered reload")
                    // The gauge's value is checked through `statistics` above: the test process's other
                    // servers set the same registry's gauges from their own services when scraped.
                    let (status, body, _) = try await server.request(.GET, "/metrics")
                    #expect(status == 200 && String(decoding: body, as: UTF8.self).contains("\ntokenserver_sessions_reload_failures "))
                }
                #expect(await eventually(within: .seconds(60)) { age() < .seconds(1) }, "the list follows the store again")
            }
            // A reload cancelled while its query is in flight on a hanging store (the service group
            // shutting down) returns at once instead of holding the shutdown until the store answers.
            try await LedgerStore.with(.postgres(url: url), logger: Logger(label: "sessions-test")) { ledger in
                let sessions = SessionDenyList(ledger: ledger, refreshInterval: .seconds(60), logger: Logger(label: "sessions-test"))
                try await sessions.reload()  // the pool keeps that connection, idle, for the next query
                try await cluster.whileStopped {
                    let ended = Atomic<Bool>(false)
                    let reload = Task {
                        try? await sessions.reloadOnce()
                        ended.store(true, ordering: .relaxed)
                    }
                    try await Task.sleep(for: .milliseconds(300))
                    reload.cancel()
                    #expect(await eventually(within: .seconds(20)) { ended.load(ordering: .relaxed) }, "a cancelled reload does not wait for the store")
                }
            }
        }
    }

    /// Certificate requests to `server` for one new P-256 key, each with the token given.
    static func issuer(_ server: LiveServer) throws -> @Sendable (String) async throws -> (status: Int, json: [String: JSONValue]) {
        let csr = try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate())
        return { token in try await server.json("/v1/certificates", ["provider": .string("dev"), "token": .string(token), "csr": .string(csr)]) }
    }

    /// Writes a reply's chain as `leaf.pem` and `issuer.pem` in `dir` (what `openssl ocsp` reads)
    /// and returns its certificates, leaf first.
    @discardableResult
    static func writeLeafAndIssuer(_ chain: String, to dir: URL) throws -> [String] {
        let parts = chain.components(separatedBy: "-----END CERTIFICATE-----\n").filter { !$0.isEmpty }.map { $0 + "-----END CERTIFICATE-----\n" }
        try parts[0].write(to: dir.appendingPathComponent("leaf.pem"), atomically: true, encoding: .utf8)
        try parts[1].write(to: dir.appendingPathComponent("issuer.pem"), atomically: true, encoding: .utf8)
        return parts
    }

    func twoInstances(_ url: String) async throws {
        let dir = try temporaryDirectory()
        let caDirectory = dir.appendingPathComponent("ca").path
        let shared: @Sendable (inout ServerConfiguration) -> Void = { configuration in
            configuration.store = url
            configuration.ca?.directory = caDirectory
            configuration.ca?.tokenReuse = .oncePerTokenID
            configuration.sessions = ServerConfiguration.Sessions(refreshSeconds: 0.2)
        }
        let csr = try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate())
        try await LiveServer.with(configure: shared) { first in
            try await LiveServer.with(configure: { configuration in
                shared(&configuration)
                // The second instance's dev provider must accept the first one's tokens.
                configuration.providers["dev"]?.secretFile = ServerConfiguration.devSecretPath(state: first.state.path)
            }) { second in
                // 2 × 40 concurrent issuances through both instances: every serial distinct, all recorded.
                let serials = try await withThrowingTaskGroup(of: String?.self) { group in
                    for i in 0..<80 {
                        let server = i % 2 == 0 ? first : second
                        group.addTask {
                            let (status, reply) = try await server.json(
                                "/v1/certificates", ["provider": .string("dev"), "token": .string(try first.token()), "csr": .string(csr)])
                            return status == 200 ? reply["serial"]?.stringValue : nil
                        }
                    }
                    var serials: [String] = []
                    for try await serial in group { if let serial { serials.append(serial) } }
                    return serials
                }
                #expect(serials.count == 80)
                #expect(Set(serials).count == 80)
                #expect(try await second.service.ca.ledger.recent(limit: 1000).count == 80)

                // Token reuse "once" holds across instances.
                let token = try first.token()
                let once = try await first.json("/v1/certificates", ["provider": .string("dev"), "token": .string(token), "csr": .string(csr)])
                #expect(once.status == 200)
                let otherKey = try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate())
                let again = try await second.json("/v1/certificates", ["provider": .string("dev"), "token": .string(token), "csr": .string(otherKey)])
                #expect(again.status == 403)
                #expect(again.json["error"].errorCode == "token_reused")
                // The same token and key through the other instance (a retry): the same certificate.
                let retry = try await second.json("/v1/certificates", ["provider": .string("dev"), "token": .string(token), "csr": .string(csr)])
                #expect(retry.status == 200 && retry.json["serial"] == once.json["serial"] && retry.json["certificate"] == once.json["certificate"])

                // A revocation made through the first instance is in the second one's CRL.
                let serial = try #require(serials.first)
                _ = try await first.service.ca.revoke(serial: serial, reason: .keyCompromise)
                let crl = try await second.request(.GET, "/v1/crl")
                let list = try RevocationList(crl.body, issuer: second.service.ca.authority.issuer)
                #expect(list.revoked[serial] != nil)
                #expect(list.revoked.count == 1)

                // A logout through the second instance: the first refuses the account's token
                // (once it has reloaded the ended sessions), and both CRLs and OCSP answers show
                // the account's certificate revoked.
                let session = try first.token(["sub": .string("roaming")])
                let (issuedStatus, issued) = try await first.json(
                    "/v1/certificates", ["provider": .string("dev"), "token": .string(session), "csr": .string(csr)])
                #expect(issuedStatus == 200)
                let sessionSerial = try #require(issued["serial"]?.stringValue)
                let chain = try #require(issued["certificate"]?.stringValue)
                #expect(try await first.json("/v1/auth", ["provider": .string("dev"), "token": .string(session)]).json["authenticate"] == .bool(true))
                let (logoutStatus, logout) = try await second.json("/v1/logout", ["provider": .string("dev"), "token": .string(session)])
                #expect(logoutStatus == 200, "\(logout)")
                var refusedByFirst = false
                for _ in 0..<50 where !refusedByFirst {
                    let answer = try await first.json("/v1/auth", ["provider": .string("dev"), "token": .string(session)]).json
                    refusedByFirst = answer["error"].errorCode == "session_ended"
                    if !refusedByFirst { try await Task.sleep(for: .milliseconds(100)) }
                }
                #expect(refusedByFirst, "the first instance never refused the logged-out account's token")
                let dir = try temporaryDirectory()
                let openssl = try #require(which("openssl"))
                let parts = try Self.writeLeafAndIssuer(chain, to: dir)
                let root = String(decoding: try await first.request(.GET, "/v1/ca").body, as: UTF8.self)
                try (root + parts[1]).write(to: dir.appendingPathComponent("cas.pem"), atomically: true, encoding: .utf8)
                for instance in [first, second] {
                    let crl = try RevocationList(try await instance.request(.GET, "/v1/crl").body, issuer: instance.service.ca.authority.issuer)
                    #expect(crl.revoked[sessionSerial] != nil)
                    let ocsp = try await runDetached(
                        openssl, ["ocsp", "-issuer", "issuer.pem", "-cert", "leaf.pem", "-url", instance.base + "/v1/ocsp", "-CAfile", "cas.pem"], cwd: dir)
                    #expect(ocsp.out.contains("leaf.pem: revoked"), "\(ocsp.out)\(ocsp.err)")
                }
            }
        }
    }
}
