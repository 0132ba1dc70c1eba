import Foundation
import NIOCore
import NIOEmbedded
import NIOPosix
import NIOSSL
@testable import PeerCA
import Synchronization
import TestSupport
import Testing
import NIOTLS
import TokenKit
import X509

/// Two devices holding certificates from our CA, and one holding a certificate from another CA.
struct Devices {
    let test: TestCA
    let other: TestCA
    let openssl: OpenSSL
    let alice: IssuedCertificate
    let bob: IssuedCertificate
    let mallory: IssuedCertificate

    init() async throws {
        openssl = try OpenSSL()
        test = try TestCA()
        other = try TestCA()
        alice = try await test.ca.issue(token: try Tokens.verified(Tokens.claims(sub: "alice")), csr: try openssl.csr("p256", name: "alice"))
        bob = try await test.ca.issue(token: try Tokens.verified(Tokens.claims(sub: "bob")), csr: try openssl.csr("ed25519", name: "bob"))
        mallory = try await other.ca.issue(token: try Tokens.verified(Tokens.claims(sub: "alice")), csr: try openssl.csr("p256", name: "mallory"))
        try openssl.write("root.pem", test.root.pemString)
        for (name, issued) in [("alice", alice), ("bob", bob), ("mallory", mallory)] {
            try openssl.write("\(name).pem", issued.certificate.pemString)
            try openssl.write("\(name)-chain.pem", issued.chainPEM)
            try openssl.write("\(name)-intermediates.pem", issued.chain.dropFirst().map(\.pemString).joined())
        }
    }

    func keyPEM(_ name: String) throws -> String { try String(contentsOfFile: openssl.path("\(name).key"), encoding: .utf8) }

    /// An echo server on 127.0.0.1 (a port the OS picks) that accepts with `tls`'s handlers;
    /// `onPeer` hears of each verified peer.
    static func echoServer(
        _ tls: PeerTLS, group: any EventLoopGroup, onPeer: @escaping @Sendable (PeerCertificateIdentity) -> Void = { _ in }
    ) async throws -> (server: any Channel, port: Int) {
        let server = try await ServerBootstrap(group: group)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try tls.addServerHandlers(to: channel.pipeline.syncOperations, onPeer: onPeer)
                    try channel.pipeline.syncOperations.addHandler(Echo())
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return (server, try #require(server.localAddress?.port))
    }

    func tls(_ name: String, _ issued: IssuedCertificate, verifier: PeerVerifier) throws -> PeerTLS {
        try PeerTLS(certificateChainPEM: issued.chainPEM, privateKeyPEM: try keyPEM(name), verifier: verifier)
    }
}

@Suite("The peer side: PeerVerifier and mutual TLS", .serialized)
struct PeerTests {
    @Test func peerVerifierChecksChainDomainEKUAndRevocation() async throws {
        let devices = try await Devices()
        let test = devices.test
        let verifier = PeerVerifier(roots: [test.root], trustDomain: "app-1234.peers.example")
        let alice = try await verifier.verify(chain: devices.alice.chain, role: .client)
        #expect(alice.spiffeID == "spiffe://app-1234.peers.example/idp.example/alice")
        #expect(alice.commonName == "alice")
        #expect(alice.serial == devices.alice.serial)
        #expect(try await verifier.verify(chain: devices.bob.chain, role: .server).path == "idp.example/bob")
        // Another CA's certificate, even with the same SPIFFE ID, is refused.
        let stranger = await #expect(throws: PeerCAError.self) { _ = try await verifier.verify(chain: devices.mallory.chain, role: .client) }
        #expect(stranger?.code == .untrustedPeer)
        // Without the intermediate the chain does not build.
        await #expect(throws: PeerCAError.self) { _ = try await verifier.verify(chain: [devices.alice.certificate], role: .client) }
        // Another trust domain is refused.
        let elsewhere = PeerVerifier(roots: [test.root], trustDomain: "other-app")
        let domain = await #expect(throws: PeerCAError.self) { _ = try await elsewhere.verify(chain: devices.alice.chain, role: .client) }
        #expect(domain?.message.contains("trust domain") == true)
        // The CA's own certificate is not a peer certificate.
        await #expect(throws: PeerCAError.self) { _ = try await verifier.verify(chain: [test.material.authority.issuer], role: .client) }
        // Revoked per the latest CRL.
        _ = try await test.ca.revoke(serial: devices.alice.serial, reason: .keyCompromise)
        let crl = try RevocationList(try await test.ca.crl(), issuer: test.material.authority.issuer)
        let strict = PeerVerifier(roots: [test.root], trustDomain: "app-1234.peers.example", revocations: crl)
        let revoked = await #expect(throws: PeerCAError.self) { _ = try await strict.verify(chain: devices.alice.chain, role: .client) }
        #expect(revoked?.code == .revoked)
        _ = try await strict.verify(chain: devices.bob.chain, role: .client)
    }

    @Test func opensslDevicesCompleteAMutualTLSHandshake() async throws {
        let devices = try await Devices()
        let openssl = devices.openssl
        func handshake(client: String) throws -> (server: String, client: String, clientStatus: Int32) {
            // Port 0: the OS picks a free port and s_server prints it ("ACCEPT 127.0.0.1:PORT").
            let server = Process()
            server.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            server.arguments = [
                "openssl", "s_server", "-accept", "127.0.0.1:0", "-naccept", "1", "-cert", openssl.path("bob.pem"),
                "-cert_chain", openssl.path("bob-intermediates.pem"), "-key", openssl.path("bob.key"), "-CAfile", openssl.path("root.pem"),
                "-Verify", "2", "-verify_return_error", "-purpose", "sslclient",
            ]
            let out = Pipe().closingOnExec()
            server.standardOutput = out
            server.standardError = out
            server.standardInput = Pipe().closingOnExec()
            try server.run()
            defer { if server.isRunning { server.terminate() } }
            let (port, greeting) = try acceptedPort(out.fileHandleForReading)
            let result = try openssl.run(
                [
                    "s_client", "-connect", "127.0.0.1:\(port)", "-cert", openssl.path("\(client).pem"), "-cert_chain",
                    openssl.path("\(client)-intermediates.pem"), "-key", openssl.path("\(client).key"), "-CAfile", openssl.path("root.pem"),
                    "-verify_return_error", "-purpose", "sslserver",
                ], stdin: Data("Q\n".utf8))
            server.waitForExit()
            return (greeting + String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self), result.output, result.status)
        }
        let ok = try handshake(client: "alice")
        #expect(ok.client.contains("Verify return code: 0 (ok)"), "\(ok.client)")
        #expect(ok.server.contains("alice") || ok.server.contains("CN=alice") || ok.server.contains("ACCEPT"), "\(ok.server)")
        #expect(!ok.server.contains("error"), "\(ok.server)")
        let refused = try handshake(client: "mallory")
        #expect(refused.server.contains("verify error") || refused.server.contains("unable to get local issuer"), "\(refused.server)")
    }

    /// Reads `openssl s_server`'s output until its "ACCEPT host:port" line and returns the port the
    /// OS gave it, with the text read so far. Fails if s_server exits first or says nothing in 10 s.
    func acceptedPort(_ handle: FileHandle) throws -> (Int, String) {
        let accept = /ACCEPT [^\n]*:(\d+)\n/
        let text = handle.readText(before: Date().addingTimeInterval(10)) { $0.firstMatch(of: accept) != nil }
        if let match = text.firstMatch(of: accept), let port = Int(match.1) { return (port, text) }
        throw SupportError("openssl s_server did not report its port: \(text)")
    }

    @Test func swiftNIODevicesUsePeerTLS() async throws {
        let devices = try await Devices()
        let test = devices.test
        let verifier = PeerVerifier(roots: [test.root], trustDomain: "app-1234.peers.example")
        let bobTLS = try devices.tls("bob", devices.bob, verifier: verifier)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let seenByServer = Mutex<[String]>([])
        let (server, port) = try await Devices.echoServer(bobTLS, group: group) { peer in seenByServer.withLock { $0.append(peer.spiffeID) } }

        func talk(_ tls: PeerTLS) async throws -> (reply: String?, peer: String?, error: String?) {
            let seen = Mutex<String?>(nil)
            let reply = group.next().makePromise(of: String.self)
            let client = try await ClientBootstrap(group: group)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try tls.addClientHandlers(to: channel.pipeline.syncOperations) { peer in seen.withLock { $0 = peer.spiffeID } }
                        try channel.pipeline.syncOperations.addHandler(Ping(reply: reply))
                    }
                }
                .connect(host: "127.0.0.1", port: port).get()
            defer { client.close(promise: nil) }
            do {
                let text = try await reply.futureResult.get()
                return (text, seen.withLock { $0 }, nil)
            } catch {
                return (nil, seen.withLock { $0 }, String(reflecting: error))
            }
        }
        let alice = try await talk(try devices.tls("alice", devices.alice, verifier: verifier))
        #expect(alice.reply == "ping")
        #expect(alice.peer == "spiffe://app-1234.peers.example/idp.example/bob")
        #expect(seenByServer.withLock { $0 } == ["spiffe://app-1234.peers.example/idp.example/alice"])
        // Mallory's certificate (another CA) is refused by bob; no data flows.
        let otherVerifier = PeerVerifier(roots: [devices.other.root, test.root])  // mallory would talk to bob; bob refuses
        let mallory = try await talk(try devices.tls("mallory", devices.mallory, verifier: otherVerifier))
        #expect(mallory.reply == nil)
        // Bob's verifier refused the chain: the alert PeerTLS's verification sends.
        #expect(mallory.error?.contains("ALERT_CERTIFICATE_UNKNOWN") == true, "\(String(describing: mallory.error))")
        #expect(seenByServer.withLock { $0.count } == 1)
        try await server.close()
        try await group.shutdownGracefully()
    }
}

extension PeerTests {
    /// A long-running device takes the CA's newer CRL into the TLS it already serves with: a peer
    /// revoked since is refused on its next handshake, without a new server or context; an older
    /// CRL (a replay from before the revocation) or another CA's is refused and changes nothing.
    @Test func aServingPeerTLSTakesANewerCRL() async throws {
        let devices = try await Devices()
        let test = devices.test
        let issuer = test.material.authority.issuer
        let before = try RevocationList(try await test.ca.crl(), issuer: issuer)
        let verifier = PeerVerifier(roots: [test.root], trustDomain: "app-1234.peers.example", revocations: before)
        let bobTLS = try devices.tls("bob", devices.bob, verifier: verifier)
        let aliceTLS = try devices.tls("alice", devices.alice, verifier: verifier)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let (server, port) = try await Devices.echoServer(bobTLS, group: group)
        func talk() async throws -> String? {
            let reply = group.next().makePromise(of: String.self)
            let client = try await ClientBootstrap(group: group)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try aliceTLS.addClientHandlers(to: channel.pipeline.syncOperations)
                        try channel.pipeline.syncOperations.addHandler(Ping(reply: reply))
                    }
                }
                .connect(host: "127.0.0.1", port: port).get()
            defer { client.close(promise: nil) }
            return try? await reply.futureResult.get()
        }
        #expect(try await talk() == "ping")

        _ = try await test.ca.revoke(serial: devices.alice.serial, reason: .keyCompromise)
        let after = try RevocationList(try await test.ca.crl(), issuer: issuer)
        #expect(try await talk() == "ping", "the CRL bob serves with does not list alice yet")
        let copy = bobTLS  // copies share the current verifier
        try copy.updateRevocations(after)
        #expect(bobTLS.verifier.revocations?.number == after.number)
        #expect(try await talk() == nil, "alice, revoked in the CRL bob now has, is refused by the server bob already runs")
        try bobTLS.updateRevocations(after)  // the same list again is accepted

        // The old CRL, replayed, is refused and leaves the newer one in place.
        let replay = #expect(throws: PeerCAError.self) { try bobTLS.updateRevocations(before) }
        #expect(replay?.message.contains("older than the current one") == true, "\(String(describing: replay))")
        #expect(bobTLS.verifier.revocations?.number == after.number)
        // Another CA's CRL is refused too.
        let stranger = try RevocationList(try await devices.other.ca.crl(), issuer: devices.other.material.authority.issuer)
        let foreign = #expect(throws: PeerCAError.self) { try bobTLS.updateRevocations(stranger) }
        #expect(foreign?.code == .invalidCAMaterial)
        // A CRL that is not current at the device's clock (here two days on: past its nextUpdate) is refused.
        let later = try devices.tls(
            "bob", devices.bob,
            verifier: PeerVerifier(roots: [test.root], trustDomain: "app-1234.peers.example", clock: .fixed(Date().timeIntervalSince1970 + 2 * 86_400)))
        let stale = #expect(throws: PeerCAError.self) { try later.updateRevocations(after) }
        #expect(stale?.message.contains("the CRL is not current") == true, "\(String(describing: stale))")
        #expect(later.verifier.revocations == nil)
        #expect(try await talk() == nil)
        try await server.close()
        try await group.shutdownGracefully()
    }
}

extension PeerTests {
    /// An `openssl s_client` device resumes its TLS session (TLS 1.3 ticket, TLS 1.2 session) with
    /// a PeerTLS server, whose handshake then skips the verification callback: the check after TLS
    /// verifies the session's certificate again, so the peer is named on a resumed connection, and
    /// one revoked since its first handshake is disconnected before any data passes.
    @Test func aResumedSessionIsVerifiedAgain() async throws {
        let devices = try await Devices()
        let test = devices.test
        let issuer = test.material.authority.issuer
        let verifier = PeerVerifier(
            roots: [test.root], trustDomain: "app-1234.peers.example", revocations: try RevocationList(try await test.ca.crl(), issuer: issuer))
        let bobTLS = try devices.tls("bob", devices.bob, verifier: verifier)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let seen = Mutex<[String]>([])
        let (server, port) = try await Devices.echoServer(bobTLS, group: group) { peer in seen.withLock { $0.append(peer.spiffeID) } }
        // s_client sends a line once the session tickets have arrived, then quits; Echo answers it.
        func connect(_ version: String, _ session: String) async throws -> (reused: Bool, echoed: Bool, output: String) {
            let command =
                "(sleep 1; echo hello-\(version); sleep 1; echo Q) | openssl s_client \(version) -connect 127.0.0.1:\(port) -cert alice.pem"
                + " -cert_chain alice-intermediates.pem -key alice.key -CAfile root.pem \(session) session\(version).pem"
            // Off the cooperative pool: the server's verification needs one of its threads meanwhile.
            let result = try await runDetached(URL(fileURLWithPath: "/bin/sh"), ["-c", command], cwd: devices.openssl.dir)
            let output = result.out + result.err
            // s_client prints what it receives, not what it sends; the lines that tell, for a failure's message.
            let summary = output.split(separator: "\n").filter { $0.contains("Reused") || $0.contains("New, ") || $0.contains("hello") || $0.contains("rror") }
            return (output.contains("Reused, "), output.contains("hello-\(version)"), summary.joined(separator: " | "))
        }
        let alice = "spiffe://app-1234.peers.example/idp.example/alice"
        for version in ["-tls1_3", "-tls1_2"] {
            let first = try await connect(version, "-sess_out")
            #expect(!first.reused && first.echoed, "\(version): \(first.output)")
            let resumed = try await connect(version, "-sess_in")
            #expect(resumed.reused && resumed.echoed, "\(version): the session is resumed and data flows: \(resumed.output)")
        }
        #expect(seen.withLock { $0 } == Array(repeating: alice, count: 4), "a resumed connection names its peer too")

        _ = try await test.ca.revoke(serial: devices.alice.serial, reason: .keyCompromise)
        try bobTLS.updateRevocations(try RevocationList(try await test.ca.crl(), issuer: issuer))
        for version in ["-tls1_3", "-tls1_2"] {
            let resumed = try await connect(version, "-sess_in")
            #expect(resumed.reused, "\(version): TLS resumes the session: \(resumed.output)")
            #expect(!resumed.echoed, "\(version): alice, revoked since, is disconnected before her data is answered: \(resumed.output)")
        }
        #expect(seen.withLock { $0.count } == 4)
        try await server.close()
        try await group.shutdownGracefully()
    }
}

extension PeerTests {
    /// The handler after TLS on its own (NIOAsyncTestingChannel, no network): nothing passes before
    /// the handshake has completed; then the writes held go first, in order, ahead of what the
    /// application writes on hearing of the handshake, and the reads held follow the event. A
    /// resumed session whose certificate cannot be verified (here: none) is closed, its reads
    /// dropped and its writes failed.
    @Test func theCheckHoldsEverythingUntilTheHandshakeIsVerified() async throws {
        let devices = try await Devices()
        let verifier = PeerVerifier(roots: [devices.test.root])
        let configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMBytes(Array(devices.bob.chainPEM.utf8)).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(try devices.keyPEM("bob").utf8), format: .pem)))
        func channel(verified: Bool) async throws -> (NIOAsyncTestingChannel, Recorder) {
            let handshake = Handshake()
            handshake.verified.store(verified, ordering: .relaxed)
            let check = ResumedSessionCheck(
                tls: NIOSSLServerHandler(context: try NIOSSLContext(configuration: configuration)), current: PeerTLS.Current(verifier, own: []),
                role: .client, handshake: handshake, onPeer: { _ in })
            let recorder = Recorder()
            let channel = NIOAsyncTestingChannel()
            try await channel.pipeline.addHandlers([check, recorder])
            try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).get()
            return (channel, recorder)
        }

        let (verified, recorder) = try await channel(verified: true)
        let preface = verified.testingEventLoop.makePromise(of: Void.self)
        verified.pipeline.writeAndFlush(ByteBuffer(string: "preface"), promise: preface)  // the application's, before the handshake
        try await verified.writeInbound(ByteBuffer(string: "early"))
        #expect(try await verified.readOutbound(as: ByteBuffer.self) == nil, "nothing leaves before the handshake")
        #expect(recorder.reads.withLock { $0 }.isEmpty, "nothing arrives before the handshake")
        verified.pipeline.fireUserInboundEventTriggered(TLSUserEvent.handshakeCompleted(negotiatedProtocol: nil))
        await verified.testingEventLoop.run()
        try await preface.futureResult.get()
        #expect(try await verified.readOutbound(as: ByteBuffer.self) == ByteBuffer(string: "preface"))
        #expect(try await verified.readOutbound(as: ByteBuffer.self) == ByteBuffer(string: "hello"), "written on the event, after the preface")
        #expect(recorder.reads.withLock { $0 } == ["early"])
        _ = try? await verified.finish()

        let (unverified, nobody) = try await channel(verified: false)
        let held = unverified.testingEventLoop.makePromise(of: Void.self)
        unverified.pipeline.writeAndFlush(ByteBuffer(string: "secret"), promise: held)
        try await unverified.writeInbound(ByteBuffer(string: "from a revoked peer"))
        unverified.pipeline.fireUserInboundEventTriggered(TLSUserEvent.handshakeCompleted(negotiatedProtocol: nil))
        await #expect(throws: ChannelError.self) { try await held.futureResult.get() }
        #expect(try await unverified.readOutbound(as: ByteBuffer.self) == nil, "nothing was sent to it")
        #expect(nobody.reads.withLock { $0 }.isEmpty && !nobody.sawHandshake.withLock { $0 }, "nothing reached the application")
        #expect(!unverified.isActive, "the connection is closed")
    }
}

/// Records what reaches the application, and writes "hello" when the handshake is reported.
final class Recorder: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    let reads = Mutex<[String]>([])
    let sawHandshake = Mutex(false)
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let text = String(buffer: unwrapInboundIn(data))
        reads.withLock { $0.append(text) }
    }
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case TLSUserEvent.handshakeCompleted? = event as? TLSUserEvent {
            sawHandshake.withLock { $0 = true }
            context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: "hello")), promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }
}

final class Echo: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.writeAndFlush(data, promise: nil)
    }
}

final class Ping: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    let reply: EventLoopPromise<String>
    init(reply: EventLoopPromise<String>) { self.reply = reply }
    func channelActive(context: ChannelHandlerContext) {
        context.writeAndFlush(NIOAny(ByteBuffer(string: "ping")), promise: nil)
        context.fireChannelActive()
    }
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        reply.succeed(String(buffer: unwrapInboundIn(data)))
    }
    func channelInactive(context: ChannelHandlerContext) {
        reply.fail(ChannelError.ioOnClosedChannel)
        context.fireChannelInactive()
    }
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        reply.fail(error)
        context.close(promise: nil)
    }
}
