import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import PeerCA
import PeerClient
import Synchronization
import TestSupport
import Testing
import TokenKit

/// `tokentool serve --tls --port 0` on the embedded defaults: the HTTPS service devices enroll
/// with, its CA root, and dev tokens for any account. Stopped with SIGTERM; started again on the
/// same port and state for the outage tests.
final class DeviceService: @unchecked Sendable {
    let directory: URL
    let state: String
    private(set) var process: Process
    let port: Int

    var url: String { "https://127.0.0.1:\(port)" }
    var rootPEM: String { (try? String(contentsOfFile: state + "/ca/root.pem", encoding: .utf8)) ?? "" }

    init() throws {
        directory = try temporaryDirectory()
        state = directory.appendingPathComponent("state").path
        let (process, port) = try Self.start(state: state, port: 0, in: directory)
        self.process = process
        self.port = port
    }

    static func start(state: String, port: Int, in directory: URL) throws -> (Process, Int) {
        let serve = try ServeProcess.start(until: "listening on", arguments: ["serve", "--tls", "--port", "\(port)", "--state", state], in: directory)
        guard let found = serve.output.firstMatch(of: /listening on https:\/\/127\.0\.0\.1:(\d+)/), let bound = Int(found.1) else {
            serve.process.terminate()
            throw ServiceFailed(output: serve.output)
        }
        return (serve.process, bound)
    }

    struct ServiceFailed: Error { let output: String }

    func stop() {
        process.terminate()
        #expect(process.waitForExit(timeout: 30) != nil)
    }

    /// Starts the service again on the same port and state (after ``stop()``).
    func restart() throws {
        process = try Self.start(state: state, port: port, in: directory).0
    }

    /// A dev token for `account` (HS256, iss tokentool-dev), issued now.
    func token(_ account: String) throws -> String {
        let secret = try Data(contentsOf: URL(fileURLWithPath: state + "/dev-hs256.secret"))
        let now = Int(Date().timeIntervalSince1970)
        return try JWTSigner(key: try JWTKey.hmac(secret: Array(secret))).sign(claims: [
            "iss": .string("tokentool-dev"), "sub": .string(account), "iat": .integer(now), "exp": .integer(now + 3600),
            "jti": .string(UUID().uuidString),
        ])
    }

    /// POST /v1/logout for `account` with a new token: its certificates revoked, its sessions ended.
    func logout(_ account: String) async throws {
        let body = JSONValue.object(["provider": .string("dev"), "token": .string(try token(account))]).compactText
        let result = try await runDetached(
            try #require(which("curl")), ["-sS", "--cacert", state + "/ca/root.pem", "-X", "POST", url + "/v1/logout", "-H", "content-type: application/json", "-d", body])
        #expect(result.status == 0 && result.out.contains("\"revoked\""), "\(result.out) \(result.err)")
    }

    /// A device of `account`: its client, its state directory, and how many tokens it asked for.
    func device(
        _ account: String, directory: String? = nil, _ configure: (inout PeerClientConfiguration) -> Void = { _ in }
    ) throws -> Device {
        let dir = directory ?? self.directory.appendingPathComponent("device-\(account)-\(UUID().uuidString.prefix(8))").path
        var configuration = PeerClientConfiguration(serviceURL: url, trustRootsPEM: rootPEM, provider: "dev", stateDirectory: dir)
        configuration.initialRetryDelay = 0.2
        configuration.maximumRetryDelay = 1
        configure(&configuration)
        let counter = Counter()
        let client = try PeerClient(configuration: configuration) { [self] in
            counter.add()
            return try token(account)
        }
        return Device(client: client, directory: dir, tokens: counter, log: EventLog(client.events()))
    }

    deinit { process.terminate() }
}

final class Counter: Sendable {
    private let value = Atomic<Int>(0)
    func add() { value.add(1, ordering: .relaxed) }
    var count: Int { value.load(ordering: .relaxed) }
}

struct Device: Sendable {
    let client: PeerClient
    let directory: String
    let tokens: Counter
    let log: EventLog
}

/// Every event of one subscription, kept for the test to wait on.
final class EventLog: Sendable {
    final class Events: Sendable { let list = Mutex<[PeerClientEvent]>([]) }
    private let events = Events()
    private let task: Task<Void, Never>

    init(_ stream: AsyncStream<PeerClientEvent>) {
        let events = self.events
        task = Task { for await event in stream { events.list.withLock { $0.append(event) } } }
    }

    var all: [PeerClientEvent] { events.list.withLock { $0 } }

    /// Waits (polling, 60 s at most) until `predicate` holds for the events so far; the index of
    /// the first event that makes it hold, searched from `after`.
    @discardableResult
    func wait(after: Int = 0, for description: String, _ predicate: @escaping @Sendable (PeerClientEvent) -> Bool) async throws -> Int {
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            let found = events.list.withLock { events in events.indices.first { $0 >= after && predicate(events[$0]) } }
            if let found { return found }
            try await Task.sleep(for: .milliseconds(50))
        }
        Issue.record("no \(description) within 60 s; events: \(all.map(Self.name))")
        throw CancellationError()
    }

    static func name(_ event: PeerClientEvent) -> String {
        switch event {
        case .enrolled: "enrolled"
        case .renewed: "renewed"
        case .expiringSoon(let seconds): "expiringSoon(\(seconds))"
        case .authenticationRequired(let reason): "authenticationRequired(\(reason))"
        case .revoked: "revoked"
        case .revocationListUpdated: "revocationListUpdated"
        case .failed(let error): "failed(\(error.code.rawValue) \(error.serviceCode ?? ""))"
        }
    }

    deinit { task.cancel() }
}

/// A device's mutual-TLS echo server on a port the OS picks: each accepted peer's identity is
/// recorded, and each line is answered "echo <line>".
final class PeerListener: Sendable {
    final class Peers: Sendable { let list = Mutex<[PeerCertificateIdentity]>([]) }
    let channel: any Channel
    private let seen = Peers()
    var peers: [PeerCertificateIdentity] { seen.list.withLock { $0 } }
    var port: Int { channel.localAddress?.port ?? 0 }

    init(_ client: PeerClient) async throws {
        let peers = seen
        channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try client.addServerHandlers(to: channel.pipeline.syncOperations) { peer in peers.list.withLock { $0.append(peer) } }
                    try channel.pipeline.syncOperations.addHandler(LineEcho())
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
    }

    func close() async { try? await channel.close() }
}

/// Answers every read with "echo " and the bytes read.
final class LineEcho: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var reply = ByteBuffer(string: "echo ")
        var bytes = Self.unwrapInboundIn(data)
        reply.writeBuffer(&bytes)
        context.writeAndFlush(Self.wrapOutboundOut(reply), promise: nil)
    }
    func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }
}

/// Collects what the server sends back until the connection closes or a newline arrives.
final class Collect: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    let done: EventLoopPromise<String>
    var text = ""
    init(_ done: EventLoopPromise<String>) { self.done = done }
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        text += String(buffer: Self.unwrapInboundIn(data))
        if text.hasSuffix("\n") { done.succeed(text) }
    }
    func channelInactive(context: ChannelHandlerContext) {
        done.succeed(text)
        context.fireChannelInactive()
    }
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        done.fail(error)
        context.close(promise: nil)
    }
}

/// HTTPS on the service's port with the service's own certificate, answering every request
/// `503 {"error": {"code": "unavailable", …}}` at once: a service that is there but cannot serve.
final class Unavailable: Sendable {
    let channel: any Channel

    init(port: Int, state: String) async throws {
        let configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(state + "/tls/server.pem").map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: state + "/tls/server.key", format: .pem)))
        let context = try NIOSSLContext(configuration: configuration)
        channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(Answer503())
                }
            }
            .bind(host: "127.0.0.1", port: port).get()
    }

    func close() async throws { try await channel.close() }

    final class Answer503: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard case .end = Self.unwrapInboundIn(data) else { return }
            let body = ByteBuffer(string: #"{"error":{"code":"unavailable","message":"down for maintenance"}}"#)
            var head = HTTPResponseHead(version: .http1_1, status: .serviceUnavailable)
            head.headers.add(name: "content-type", value: "application/json")
            head.headers.add(name: "content-length", value: "\(body.readableBytes)")
            context.write(Self.wrapOutboundOut(.head(head)), promise: nil)
            context.write(Self.wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
            context.writeAndFlush(Self.wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}

/// Connects `client` to a listener over mutual TLS and sends one line: the listener's identity
/// as the client saw it (nil: the handshake failed) and the answer ("" when closed first).
func talk(_ client: PeerClient, to port: Int) async throws -> (peer: PeerCertificateIdentity?, answer: String) {
    let seen = Mutex<PeerCertificateIdentity?>(nil)
    let loop = MultiThreadedEventLoopGroup.singleton.next()
    let done = loop.makePromise(of: String.self)
    let channel = try await ClientBootstrap(group: loop)
        .channelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                try client.addClientHandlers(to: channel.pipeline.syncOperations) { peer in seen.withLock { $0 = peer } }
                try channel.pipeline.syncOperations.addHandler(Collect(done))
            }
        }
        .connect(host: "127.0.0.1", port: port).get()
    channel.writeAndFlush(ByteBuffer(string: "hello\n"), promise: nil)
    let timeout = loop.scheduleTask(in: .seconds(30)) { done.fail(ChannelError.connectTimeout(.seconds(30))) }
    let answer = (try? await done.futureResult.get()) ?? ""
    timeout.cancel()
    try? await channel.close()
    return (seen.withLock { $0 }, answer)
}

@Suite("PeerClient: a device's life against tokentool serve --tls", .serialized)
struct PeerClientTests {
    @Test func twoDevicesEnrollAndTalkMutualTLS() async throws {
        let service = try DeviceService()
        defer { service.stop() }
        let alice = try service.device("alice"), bob = try service.device("bob")
        let a = try await alice.client.start(), b = try await bob.client.start()
        #expect(a.spiffeID.hasSuffix("/alice") && b.spiffeID.hasSuffix("/bob"), "\(a) \(b)")
        try await alice.log.wait(for: "enrolled") { if case .enrolled = $0 { true } else { false } }
        // The key is the device's alone; the directory too.
        #expect(SecureFile.permissions(alice.directory + "/key.pem") == 0o600)
        #expect(SecureFile.permissions(alice.directory) == 0o700)
        let listener = try await PeerListener(bob.client)
        defer { Task { await listener.close() } }
        let (peer, answer) = try await talk(alice.client, to: listener.port)
        #expect(peer?.spiffeID == b.spiffeID)
        #expect(answer == "echo hello\n")
        #expect(listener.peers.map(\.spiffeID) == [a.spiffeID])
        // The files on disk are what openssl sees: the chain verifies to the root, for the key.
        let openssl = try #require(which("openssl"))
        let verify = try await runDetached(openssl, ["verify", "-CAfile", service.state + "/ca/root.pem", "-untrusted", alice.directory + "/chain.pem", alice.directory + "/chain.pem"])
        #expect(verify.status == 0, "\(verify.err)")
    }

    @Test func aRenewalRotatesTheCertificateOfAListeningDevice() async throws {
        let service = try DeviceService()
        defer { service.stop() }
        let alice = try service.device("alice"), bob = try service.device("bob")
        _ = try await alice.client.start()
        let first = try await bob.client.start()
        let listener = try await PeerListener(bob.client)
        defer { Task { await listener.close() } }
        #expect(try await talk(alice.client, to: listener.port).peer?.serial == first.serial)
        let renewed = try await bob.client.renew()
        #expect(renewed.serial != first.serial && renewed.spiffeID == first.spiffeID)
        try await bob.log.wait(for: "renewed") { $0 == .renewed(renewed) }
        // The same listener, not restarted: new connections get the new certificate.
        #expect(try await talk(alice.client, to: listener.port).peer?.serial == renewed.serial)
        #expect(bob.tokens.count == 1, "a renewal needs no token")
        #expect(try PeerClient.stored(in: bob.directory)?.credential.serial == renewed.serial)
    }

    @Test func aLogoutEndsRenewalAndAskForANewTokenWhichEnrolls() async throws {
        let service = try DeviceService()
        defer { service.stop() }
        let alice = try service.device("alice") { $0.validitySeconds = 4 }
        let first = try await alice.client.start()
        let running = Task { await alice.client.run() }
        defer { running.cancel() }
        try await service.logout("alice")
        let required = try await alice.log.wait(for: "authenticationRequired") {
            if case .authenticationRequired = $0 { true } else { false }
        }
        let enrolled = try await alice.log.wait(after: required, for: "enrolled") { if case .enrolled = $0 { true } else { false } }
        guard case .enrolled(let again) = alice.log.all[enrolled] else { return }
        #expect(again.serial != first.serial && again.spiffeID == first.spiffeID)
        #expect(alice.tokens.count >= 2)
        // Why: the renewal was refused for the ended session, or the device saw its certificate on the list.
        let refused = alice.log.all.contains {
            if case .failed(let error) = $0 { error.serviceCode == "session_ended" || error.serviceCode == "revoked" } else { false }
        }
        let revoked = alice.log.all.contains { if case .revoked(let serial) = $0 { serial == first.serial } else { false } }
        #expect(refused || revoked, "\(alice.log.all.map(EventLog.name))")
    }

    /// An outage in two parts, then the service back: first the service's port answers every
    /// request at once with `503` (HTTPS with the service's own certificate), then nothing listens
    /// on it. The client backs off — a handful of attempts while every attempt fails at once, not
    /// a busy loop —, its renewal fails while the service is down, and it renews, with no new
    /// token, once the service is back.
    @Test func anUnreachableServiceIsRetriedWithBackoffUntilItIsBack() async throws {
        let service = try DeviceService()
        let alice = try service.device("alice") { $0.validitySeconds = 20; $0.renewalJitter = 0; $0.requestTimeout = 2 }
        let first = try await alice.client.start()
        service.stop()
        let unavailable = try await Unavailable(port: service.port, state: service.state)
        let running = Task { await alice.client.run() }
        defer { running.cancel() }
        try await Task.sleep(for: .seconds(3))
        let attempts = alice.log.all.filter { if case .failed(let error) = $0 { error.status == 503 } else { false } }.count
        #expect(attempts >= 2 && attempts <= 10, "\(attempts) attempts in 3 s: \(alice.log.all.map(EventLog.name))")
        try await unavailable.close()
        let failedRenewal: @Sendable (PeerClientEvent) -> Bool = {
            if case .failed(let error) = $0 { error.code == .unreachable && error.message.contains("/v1/certificates/renew") } else { false }
        }
        try await alice.log.wait(for: "a failed renewal", failedRenewal)
        try service.restart()
        defer { service.stop() }
        let renewed = try await alice.log.wait(for: "renewed") { if case .renewed = $0 { true } else { false } }
        guard case .renewed(let credential) = alice.log.all[renewed] else { return }
        #expect(credential.serial != first.serial)
        #expect(alice.tokens.count == 1, "the service's outage needs no new token: \(alice.log.all.map(EventLog.name))")
    }

    /// Renewals failing until the certificate runs out: `expiringSoon`, then
    /// `authenticationRequired` once it expired, then a new enrollment when the service is back.
    @Test func anExpiringCertificateIsAnnouncedThenReplacedWithANewToken() async throws {
        let service = try DeviceService()
        // 20 s of validity, `expiringSoon` in its last 15 s: announced even when stopping the
        // service takes seconds on a loaded machine, and before it runs out.
        let alice = try service.device("alice") { $0.validitySeconds = 20; $0.expiringSoonThreshold = 15; $0.requestTimeout = 1 }
        let first = try await alice.client.start()
        service.stop()
        let running = Task { await alice.client.run() }
        defer { running.cancel() }
        let soon = try await alice.log.wait(for: "expiringSoon") { if case .expiringSoon = $0 { true } else { false } }
        guard case .expiringSoon(let seconds) = alice.log.all[soon] else { return }
        #expect(seconds > 0 && seconds <= 15)
        let required = try await alice.log.wait(after: soon, for: "authenticationRequired") {
            if case .authenticationRequired(let reason) = $0 { reason.contains("expired") } else { false }
        }
        #expect(Date() >= first.notAfter)
        try service.restart()
        defer { service.stop() }
        try await alice.log.wait(after: required, for: "enrolled") { if case .enrolled = $0 { true } else { false } }
        #expect(alice.tokens.count >= 2)
    }

    @Test func aRevocationIsSeenByTheOtherPeerWithinOneRefresh() async throws {
        let service = try DeviceService()
        defer { service.stop() }
        let alice = try service.device("alice") { $0.revocationRefreshInterval = 1 }, bob = try service.device("bob")
        _ = try await alice.client.start()
        let b = try await bob.client.start()
        let running = Task { await alice.client.run() }
        defer { running.cancel() }
        let listener = try await PeerListener(alice.client)
        defer { Task { await listener.close() } }
        #expect(try await talk(bob.client, to: listener.port).answer == "echo hello\n")
        try await service.logout("bob")
        let count = alice.log.all.count
        try await alice.log.wait(after: count, for: "a new revocation list") { if case .revocationListUpdated = $0 { true } else { false } }
        let (_, answer) = try await talk(bob.client, to: listener.port)
        #expect(answer == "", "bob's revoked certificate is refused")
        #expect(!listener.peers.dropFirst().contains { $0.serial == b.serial })
        // Bob's own client, when it fetches the list, learns it was revoked.
        try await bob.client.refreshRevocations()
        try await bob.log.wait(for: "revoked") { $0 == .revoked(serial: b.serial) }
        try await bob.log.wait(for: "authenticationRequired") { if case .authenticationRequired = $0 { true } else { false } }
    }

    @Test func aRestartedDeviceUsesItsValidCertificateAndEnrollsWhenItExpired() async throws {
        let service = try DeviceService()
        defer { service.stop() }
        let dir = service.directory.appendingPathComponent("restarts").path
        let first = try service.device("alice", directory: dir) { $0.validitySeconds = 3 }
        let enrolled = try await first.client.start()
        let second = try service.device("alice", directory: dir) { $0.validitySeconds = 3 }
        #expect(try await second.client.start() == enrolled)
        #expect(second.tokens.count == 0, "a valid certificate on disk needs no token")
        while Date() < enrolled.notAfter.addingTimeInterval(1) { try await Task.sleep(for: .milliseconds(200)) }
        let third = try service.device("alice", directory: dir)
        let again = try await third.client.start()
        #expect(again.serial != enrolled.serial && third.tokens.count == 1)
    }
}

@Suite("tokentool peer: enroll, renew, status, listen, connect", .serialized)
struct PeerCLITests {
    func tool(_ arguments: [String], in dir: URL) async throws -> (status: Int32, out: String, err: String) {
        try await runDetached(tokentoolExecutable, arguments, cwd: dir)
    }

    @Test func twoDevicesTalkThroughTheCLI() async throws {
        let service = try DeviceService()
        defer { service.stop() }
        let dir = service.directory
        for account in ["alice", "bob"] {
            try service.token(account).write(toFile: dir.appendingPathComponent("\(account).jwt").path, atomically: true, encoding: .utf8)
            let enroll = try await tool(
                ["peer", "enroll", "--server", service.url, "--ca", "state/ca/root.pem", "--provider", "dev", "--token-file", "\(account).jwt",
                 "--dir", account], in: dir)
            #expect(enroll.status == 0, "\(enroll.err)")
            #expect(enroll.out.contains("enrolled spiffe://") && enroll.out.contains("/\(account) serial "), "\(enroll.out)")
        }
        let status = try await tool(["peer", "status", "--dir", "alice"], in: dir)
        #expect(status.status == 0 && status.out.contains("state: valid"), "\(status.out)\(status.err)")
        let listen = try ServeProcess.start(until: "listening on", arguments: ["peer", "listen", "--dir", "bob", "--port", "0", "--crl-refresh", "1"], in: dir)
        defer { listen.process.terminate() }
        let port = try #require(listen.output.firstMatch(of: /listening on 127\.0\.0\.1:(\d+)/)?.1)
        let connect = try await tool(["peer", "connect", "--dir", "alice", "--message", "ping", "127.0.0.1:\(port)"], in: dir)
        #expect(connect.status == 0, "\(connect.err)")
        #expect(connect.out.contains("connected to spiffe://") && connect.out.contains("/bob (serial"), "\(connect.out)")
        #expect(connect.out.contains("echo ping"), "\(connect.out)")
        let renew = try await tool(["peer", "renew", "--dir", "bob"], in: dir)
        #expect(renew.status == 0 && renew.out.contains("renewed spiffe://"), "\(renew.out)\(renew.err)")
        // After alice's logout her certificate is on the list: bob, once he has fetched it (every
        // second here), refuses her.
        try await service.logout("alice")
        var refused: (status: Int32, out: String, err: String) = (0, "", "")
        for _ in 0..<60 {
            refused = try await tool(["peer", "connect", "--dir", "alice", "127.0.0.1:\(port)"], in: dir)
            if refused.status != 0 { break }
            try await Task.sleep(for: .milliseconds(500))
        }
        #expect(refused.status == 1 && refused.err.contains("refused this device's certificate"), "\(refused.out)\(refused.err)")
        let aliceRenew = try await tool(["peer", "renew", "--dir", "alice"], in: dir)
        // Refused for the ended session; the token file's token predates the logout, so the new enrollment is refused too.
        #expect(aliceRenew.status == 1, "\(aliceRenew.out)\(aliceRenew.err)")
        #expect(aliceRenew.out.contains("authentication required") && aliceRenew.err.contains("session_ended"), "\(aliceRenew.out)\(aliceRenew.err)")
        try service.token("alice").write(toFile: dir.appendingPathComponent("alice.jwt").path, atomically: true, encoding: .utf8)
        try await Task.sleep(for: .milliseconds(1100))  // a token issued after the logout's second
        try service.token("alice").write(toFile: dir.appendingPathComponent("alice.jwt").path, atomically: true, encoding: .utf8)
        let reenrolled = try await tool(["peer", "renew", "--dir", "alice"], in: dir)
        #expect(reenrolled.status == 0 && reenrolled.out.contains("enrolled spiffe://"), "\(reenrolled.out)\(reenrolled.err)")
    }

    /// `renew --daemon --exec`: the command runs after each renewal, and SIGTERM stops the daemon.
    @Test func theRenewalDaemonRunsItsCommandAfterEachRenewal() async throws {
        let service = try DeviceService()
        defer { service.stop() }
        let dir = service.directory
        try service.token("dan").write(toFile: dir.appendingPathComponent("dan.jwt").path, atomically: true, encoding: .utf8)
        let enroll = try await tool(
            ["peer", "enroll", "--server", service.url, "--ca", "state/ca/root.pem", "--provider", "dev", "--token-file", "dan.jwt",
             "--dir", "dan", "--validity", "3"], in: dir)
        #expect(enroll.status == 0, "\(enroll.err)")
        let daemon = try ServeProcess.start(
            until: "running", arguments: ["peer", "renew", "--dir", "dan", "--daemon", "--exec", "cat dan/chain.pem > hooked.pem; echo ran >> hook.log"],
            in: dir)
        let hookLog = dir.appendingPathComponent("hook.log").path
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, ((try? String(contentsOfFile: hookLog, encoding: .utf8)) ?? "").split(separator: "\n").count < 2 {
            try await Task.sleep(for: .milliseconds(200))
        }
        daemon.process.terminate()
        let exit = daemon.process.waitForExit(timeout: 30)
        #expect(exit?.reason == .exit && exit?.status == 0, "\(String(describing: exit))")
        #expect(((try? String(contentsOfFile: hookLog, encoding: .utf8)) ?? "").split(separator: "\n").count >= 2)
        // The hook saw a complete chain: what the status shows is a certificate it could read.
        let hooked = try String(contentsOfFile: dir.appendingPathComponent("hooked.pem").path, encoding: .utf8)
        #expect(hooked.hasPrefix("-----BEGIN CERTIFICATE-----") && hooked.hasSuffix("-----END CERTIFICATE-----\n"))
    }

    /// kill -9 at each step of a renewal's write (strace kills `peer renew` as it enters the
    /// chosen system call: the key's, the chain's and the metadata's link into the new
    /// generation, its rename into place, the new `current` link and its rename over the old,
    /// the old generation's removal): the state directory is usable afterwards every time (a key
    /// with its own certificate, no leftovers once opened), and the next renewal works.
    @Test func killedAtEachStepOfARenewalTheStateDirectoryStaysUsable() async throws {
        let strace = try #require(which("strace"))
        let service = try DeviceService()
        defer { service.stop() }
        let dir = service.directory
        try service.token("carol").write(toFile: dir.appendingPathComponent("carol.jwt").path, atomically: true, encoding: .utf8)
        let enroll = try await tool(
            ["peer", "enroll", "--server", service.url, "--ca", "state/ca/root.pem", "--provider", "dev", "--token-file", "carol.jwt", "--dir", "carol"],
            in: dir)
        #expect(enroll.status == 0, "\(enroll.err)")
        var serials: Set<String> = []
        for (call, when) in [("link", 1), ("link", 2), ("link", 3), ("rename", 1), ("symlink", 1), ("rename", 2), ("rmdir", 1)] {
            let killed = try await runDetached(
                strace, ["-f", "-o", "/dev/null", "-e", "trace=\(call)", "-e", "inject=\(call):signal=SIGKILL:when=\(when)",
                         tokentoolExecutable.path, "peer", "renew", "--dir", "carol"], cwd: dir)
            #expect(killed.status != 0 && !killed.out.contains("renewed"), "\(call)#\(when): \(killed.out)\(killed.err)")
            let status = try await tool(["peer", "status", "--dir", "carol"], in: dir)
            #expect(status.status == 0 && status.out.contains("state: valid"), "\(call)#\(when): \(status.out)\(status.err)")
            serials.formUnion(status.out.matches(of: /serial: ([0-9a-f]+)/).map { String($0.1) })
            #expect(SecureFile.permissions(dir.appendingPathComponent("carol/key.pem").path) == 0o600)
            // Opened by status: what the interrupted write left is gone, one generation remains.
            let names = try FileManager.default.contentsOfDirectory(atPath: dir.appendingPathComponent("carol").path)
            #expect(names.filter { $0.hasPrefix(".") }.isEmpty && names.filter { $0.hasPrefix("gen-") }.count == 1, "\(call)#\(when): \(names)")
        }
        // Killed after `current` moved (the old generation's removal), the new certificate is in use.
        #expect(serials.count >= 2, "\(serials)")
        let renew = try await tool(["peer", "renew", "--dir", "carol"], in: dir)
        #expect(renew.status == 0 && renew.out.contains("renewed spiffe://"), "\(renew.out)\(renew.err)")
    }
}

/// The README's device lines, run with bash as written (ports 8443 and 9443 replaced by ports the
/// OS picks): `serve --tls`, two enrollments, a renewal, the daemon, two peers talking, the status.
@Suite("README device walk-through")
struct PeerReadmeTests {
    @Test func theReadmeDeviceLinesWork() async throws {
        let block = try readmeBlock("device")
        #expect(block.contains("--port 8443") && block.contains("--port 9443"))
        let dir = try temporaryDirectory()
        let script = "set -euo pipefail\ntrap 'kill ${SERVE:-} ${BOB:-} ${DAEMON:-} 2>/dev/null || true' EXIT\n"
            + block.replacingOccurrences(of: "--port 8443", with: "--port 0").replacingOccurrences(of: "--port 9443", with: "--port 0")
        let tools = tokentoolExecutable.deletingLastPathComponent().path
        let bash = try #require(which("bash"))
        let result = try await runDetached(bash, ["-c", "export PATH=\"\(tools):$PATH\"\n" + script], cwd: dir)
        #expect(result.status == 0, "\(result.out)\(result.err)")
        for expected in [
            "enrolled spiffe://dev/tokentool-dev/alice", "enrolled spiffe://dev/tokentool-dev/bob", "renewed spiffe://dev/tokentool-dev/alice",
            "connected to spiffe://dev/tokentool-dev/bob", "echo hello", "state: valid",
        ] {
            #expect(result.out.contains(expected), "\(expected): \(result.out)")
        }
        let bob = (try? String(contentsOf: dir.appendingPathComponent("bob.log"), encoding: .utf8)) ?? ""
        #expect(bob.contains("connection from spiffe://dev/tokentool-dev/alice"), "\(bob)")
    }
}
