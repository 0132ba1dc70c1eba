import ArgumentParser
import Foundation
import NIOCore
import NIOPosix
import PeerCA
import PeerClient
import Synchronization
import TokenKit
import UnixSignals

/// What `peer enroll` keeps in the state directory beside the credential, so that `peer renew`,
/// `status`, `listen` and `connect` need only `--dir`: `peer.json` (the service, the provider,
/// the token file, the key type) and `roots.pem` (a copy of `--ca`).
struct DeviceSettings: Codable {
    var server: String
    var provider: String
    var tokenFile: String
    var keyType: String
    var trustDomain: String?
    var validitySeconds: Int?

    static func path(_ dir: String) -> String { (dir as NSString).appendingPathComponent("peer.json") }
    static func rootsPath(_ dir: String) -> String { (dir as NSString).appendingPathComponent("roots.pem") }

    static func load(_ dir: String) throws -> DeviceSettings {
        guard let data = FileManager.default.contents(atPath: path(dir)) else {
            throw CLIExit.usage("\(dir) holds no device (no peer.json): run tokentool peer enroll --dir \(dir) first")
        }
        do { return try JSONDecoder().decode(DeviceSettings.self, from: data) } catch {
            throw CLIExit.usage("\(path(dir)) cannot be read: \(error)")
        }
    }

    /// Written whole or not at all (a temporary file renamed over the old one).
    func save(_ dir: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try Self.replace(Self.path(dir), Array(try encoder.encode(self)) + [0x0A])
    }

    static func replace(_ path: String, _ contents: [UInt8], mode: mode_t = 0o644) throws {
        do throws(SecureFileError) { try SecureFile.replace(path, contents, mode: mode) } catch { throw CLIExit(code: 1, message: error.message) }
    }

    /// A client for the device in `dir`; its token provider reads the token file at each enrollment.
    func client(_ dir: String, revocationRefresh: Double? = nil) throws -> PeerClient {
        let roots = String(decoding: try Input.read(Self.rootsPath(dir)), as: UTF8.self)
        var configuration = PeerClientConfiguration(serviceURL: server, trustRootsPEM: roots, provider: provider, stateDirectory: dir)
        guard let algorithm = CAKeyAlgorithm(rawValue: keyType) else { throw CLIExit.usage("\(Self.path(dir)): unknown key type \(keyType)") }
        configuration.keyAlgorithm = algorithm
        configuration.trustDomain = trustDomain
        configuration.validitySeconds = validitySeconds
        if let revocationRefresh {
            guard revocationRefresh >= 1 else { throw CLIExit.usage("--crl-refresh must be at least 1 second") }
            configuration.revocationRefreshInterval = revocationRefresh
        }
        let tokenFile = self.tokenFile
        do {
            return try PeerClient(configuration: configuration) {
                let token = String(decoding: try Input.read(tokenFile), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
                guard !token.isEmpty else { throw CLIExit.usage("\(tokenFile) is empty") }
                return token
            }
        } catch { throw CLIExit.usage("\(dir): \(error)") }
    }
}

/// One line about an event, for `renew --daemon` and `listen` (never a key or token).
func describe(_ event: PeerClientEvent) -> String {
    switch event {
    case .enrolled(let credential): return "enrolled \(summary(credential))"
    case .renewed(let credential): return "renewed \(summary(credential))"
    case .expiringSoon(let seconds): return "expiring soon: \(seconds) s left"
    case .authenticationRequired(let reason): return "authentication required: \(reason)"
    case .revoked(let serial): return "revoked: \(serial)"
    case .revocationListUpdated(let number): return "revocation list \(number.map(String.init) ?? "-") in force"
    case .failed(let error): return "failed: \(error)"
    }
}

func summary(_ credential: PeerCredential) -> String {
    "\(credential.spiffeID) serial \(credential.serial) until \(ISO8601Text.string(credential.notAfter))"
}

/// Waits for SIGTERM or SIGINT.
func shutdownSignal() async {
    for await _ in await UnixSignalsSequence(trapping: .sigterm, .sigint) { return }
}

struct PeerEnrollCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enroll",
        abstract: "Enroll this device: a new key, a CSR, a certificate from tokentool serve.",
        discussion: """
            Makes a new key (mode 0600) and asks --server for a certificate with the token in \
            --token-file (POST /v1/certificates). --dir then holds the key, the chain and what the \
            other peer commands need (peer.json, roots.pem: a copy of --ca), so they take only \
            --dir. The token file is read again whenever a new token is needed (after a logout, \
            or once the certificate expired): keep it current with the app's own login.

            Examples:
              tokentool peer enroll --server https://127.0.0.1:8443 \\
                  --ca tokentool-state/ca/root.pem --provider dev \\
                  --token-file alice.jwt --dir alice
            """)

    @Option(help: "The service's base URL (https:// for renewal over mutual TLS).")
    var server: String

    @Option(help: "PEM file of the CA root: it verifies the service and peers.")
    var ca: String

    @Option(help: "The provider the token is for (a key of the service's providers).")
    var provider: String

    @Option(help: "File holding the token (read at each enrollment).")
    var tokenFile: String

    @Option(help: "The device's state directory (made with mode 0700).")
    var dir: String

    @Option(help: "Key type: p256, p384, ed25519 or rsa3072.")
    var keyType: CAKeyAlgorithm = .p256

    @Option(help: "Trust domain peers must be in (default: this device's own).")
    var trustDomain: String?

    @Option(help: "Validity to ask for, in seconds (the service caps it).")
    var validity: Int?

    func run() async throws {
        let roots = try Input.read(ca)
        let tokenPath = URL(fileURLWithPath: tokenFile).standardizedFileURL.path
        if mkdir(dir, 0o700) != 0, errno != EEXIST { throw CLIExit.usage("cannot create \(dir): \(String(cString: strerror(errno)))") }
        try DeviceSettings.replace(DeviceSettings.rootsPath(dir), roots)
        let settings = DeviceSettings(
            server: server, provider: provider, tokenFile: tokenPath, keyType: keyType.rawValue, trustDomain: trustDomain, validitySeconds: validity)
        try settings.save(dir)
        let client = try settings.client(dir)
        let credential: PeerCredential
        do { credential = try await client.enroll() } catch { throw CLIExit(code: 1, message: "tokentool peer enroll: \(error)") }
        print("enrolled \(summary(credential))")
        print("  key: \(credential.keyPath)")
        print("  chain: \(credential.chainPath)")
        print("  renew after: \(ISO8601Text.string(credential.renewAfter))")
    }
}

struct PeerRenewCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "renew",
        abstract: "Renew the device's certificate over mutual TLS, once or as a daemon.",
        discussion: """
            Once (the default): renews now with the current certificate (POST \
            /v1/certificates/renew, a new key). When the service refuses (the sessions were ended, \
            the session's maximum age) or the certificate expired, it enrolls again with the \
            token file. --daemon keeps running: it renews at each certificate's renewAfter (with \
            jitter), retries with capped backoff while the service is out of reach, fetches the \
            revocation list, prints each event, and runs --exec after each new certificate. \
            SIGTERM or Ctrl-C stop it.

            Examples:
              tokentool peer renew --dir alice
              tokentool peer renew --dir alice --daemon --exec 'systemctl reload app'
            """)

    @Option(help: "The device's state directory (from peer enroll).")
    var dir: String

    @Flag(help: "Keep running: renew before each certificate expires.")
    var daemon = false

    @Option(help: "Shell command run after each new certificate (--daemon).")
    var exec: String?

    @Option(help: "Seconds between revocation list fetches (--daemon).")
    var crlRefresh: Double = 300

    func validate() throws {
        if exec != nil, !daemon { throw ValidationError("--exec goes with --daemon") }
    }

    func run() async throws {
        let client = try DeviceSettings.load(dir).client(dir, revocationRefresh: crlRefresh)
        guard daemon else {
            do {
                _ = try await client.start()
                print("renewed \(summary(try await client.renew()))")
            } catch where error.code == .refused || error.code == .notEnrolled {
                say("authentication required: \(error)")
                do { print("enrolled \(summary(try await client.enroll()))") } catch { throw CLIExit(code: 1, message: "tokentool peer renew: \(error)") }
            } catch { throw CLIExit(code: 1, message: "tokentool peer renew: \(error)") }
            return
        }
        let events = client.events()
        let exec = self.exec
        let printer = Task {
            for await event in events {
                say(describe(event))
                switch event {
                case .enrolled, .renewed: if let exec { runHook(exec) }
                default: break
                }
            }
        }
        let loop = Task { await client.run() }
        say("tokentool peer renew: running for \(dir)")
        await shutdownSignal()
        loop.cancel()
        await loop.value
        printer.cancel()
    }

    /// Runs `command` with /bin/sh and reports a failure (the daemon goes on).
    func runHook(_ command: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", command]
        do {
            try process.run()
            process.waitUntilExit()
            if process.terminationStatus != 0 { say("--exec exited with \(process.terminationStatus)") }
        } catch { say("--exec could not run: \(error)") }
    }
}

struct PeerStatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the device's certificate and whether it is usable.",
        discussion: """
            Reads --dir only (no request). State: valid, expired, or revoked (on the revocation \
            list the device fetched last). Exit status: 0 valid, 1 expired, revoked or not enrolled.

            Examples:
              tokentool peer status --dir alice
            """)

    @Option(help: "The device's state directory.")
    var dir: String

    func run() async throws {
        let roots = (try? Input.read(DeviceSettings.rootsPath(dir))).map { String(decoding: $0, as: UTF8.self) }
        let found: (credential: PeerCredential, revoked: Bool)?
        do { found = try PeerClient.stored(in: dir, trustRootsPEM: roots) } catch { throw CLIExit(code: 1, message: "\(dir): \(error)") }
        guard let (credential, revoked) = found else { throw CLIExit(code: 1, message: "\(dir): not enrolled") }
        let state = revoked ? "revoked" : credential.notAfter <= Date() ? "expired" : "valid"
        print(credential.spiffeID)
        print("  serial: \(credential.serial)")
        print("  not after: \(ISO8601Text.string(credential.notAfter))")
        print("  renew after: \(ISO8601Text.string(credential.renewAfter))")
        print("  state: \(state)")
        if state != "valid" { throw ExitCode(1) }
    }
}

struct PeerListenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "listen",
        abstract: "Accept mutual-TLS connections from peers and echo what they send.",
        discussion: """
            A demonstration of a device's server side: each connection must present a certificate \
            of the same CA (and trust domain) that is not revoked; its identity is printed, and \
            each line it sends is answered "echo <line>". The certificate is kept renewed and the \
            revocation list fetched while it runs (as peer renew --daemon does); new connections \
            get the newest certificate. SIGTERM or Ctrl-C stop it.

            Examples:
              tokentool peer listen --dir bob --port 9443
              tokentool peer listen --dir bob --port 9443 --crl-refresh 60
            """)

    @Option(help: "The device's state directory.")
    var dir: String

    @Option(help: "Address to listen on.")
    var host = "127.0.0.1"

    @Option(help: "Port (0 picks a free one, printed).")
    var port = 0

    @Option(help: "Seconds between revocation list fetches.")
    var crlRefresh: Double = 300

    func run() async throws {
        let client = try DeviceSettings.load(dir).client(dir, revocationRefresh: crlRefresh)
        let credential: PeerCredential
        do { credential = try await client.start() } catch { throw CLIExit(code: 1, message: "tokentool peer listen: \(error)") }
        let events = client.events()
        let printer = Task { for await event in events { say(describe(event)) } }
        let loop = Task { await client.run() }
        let channel: any Channel
        do {
            channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let address = channel.remoteAddress.map { "\($0)" } ?? "?"
                        try client.addServerHandlers(to: channel.pipeline.syncOperations) { peer in
                            say("connection from \(peer.spiffeID) (serial \(peer.serial)) at \(address)")
                        }
                        try channel.pipeline.syncOperations.addHandlers([ByteToMessageHandler(LineDecoder()), EchoHandler()])
                    }
                }
                .bind(host: host, port: port).get()
        } catch {
            loop.cancel()
            throw CLIExit(code: 2, message: "tokentool peer listen: cannot listen on \(host):\(port): \(error)")
        }
        say("tokentool peer listen: listening on \(host):\(channel.localAddress?.port ?? port) as \(credential.spiffeID)")
        await shutdownSignal()
        try? await channel.close()
        loop.cancel()
        await loop.value
        printer.cancel()
    }
}

struct PeerConnectCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "connect",
        abstract: "Connect to a peer over mutual TLS, send a line, print the answer.",
        discussion: """
            Presents the device's certificate, verifies the peer's (same CA and trust domain, not \
            revoked, as of the revocation list the device fetched last), prints the peer's \
            identity, sends --message and prints the line that comes back. Exit status: 0 \
            answered, 1 the handshake failed (either side refused) or no answer.

            Examples:
              tokentool peer connect --dir alice 127.0.0.1:9443
              tokentool peer connect --dir alice --message ping 127.0.0.1:9443
            """)

    @Option(help: "The device's state directory.")
    var dir: String

    @Option(help: "The line to send.")
    var message = "hello"

    @Argument(help: "The peer's HOST:PORT.")
    var address: String

    func run() async throws {
        guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]) else {
            throw CLIExit.usage("\(address) is not HOST:PORT")
        }
        let host = String(address[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        let client = try DeviceSettings.load(dir).client(dir)
        do { _ = try await client.start() } catch { throw CLIExit(code: 1, message: "tokentool peer connect: \(error)") }
        let peer = Mutex<PeerCertificateIdentity?>(nil)
        let reply = MultiThreadedEventLoopGroup.singleton.any().makePromise(of: String.self)
        let channel: any Channel
        do {
            channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(.seconds(10))
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try client.addClientHandlers(to: channel.pipeline.syncOperations) { identity in peer.withLock { $0 = identity } }
                        try channel.pipeline.syncOperations.addHandlers([ByteToMessageHandler(LineDecoder()), ReplyHandler(reply: reply)])
                    }
                }
                .connect(host: host, port: port).get()
        } catch { throw CLIExit(code: 1, message: "tokentool peer connect: cannot connect to \(address): \(error)") }
        channel.writeAndFlush(ByteBuffer(string: message + "\n"), promise: nil)
        let timeout = channel.eventLoop.scheduleTask(in: .seconds(20)) { reply.fail(ChannelError.connectTimeout(.seconds(20))) }
        let answer: String
        do { answer = try await reply.futureResult.get() } catch {
            timeout.cancel()
            try? await channel.close()
            let seen = peer.withLock { $0 }
            let why = seen.map { "\($0.spiffeID) at \(address) closed the connection without an answer: it refused this device's certificate (revoked, expired, another CA or trust domain), or failed" }
                ?? "the TLS handshake with \(address) failed: this device refused the peer's certificate, or the peer refused this device's"
            throw CLIExit(code: 1, message: "tokentool peer connect: \(why)")
        }
        timeout.cancel()
        try? await channel.close()
        if let identity = peer.withLock({ $0 }) { print("connected to \(identity.spiffeID) (serial \(identity.serial))") }
        print(answer)
    }
}

/// Lines (without their newline), 4 KiB at most.
struct LineDecoder: ByteToMessageDecoder {
    typealias InboundOut = String
    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let end = buffer.readableBytesView.firstIndex(of: 0x0A) else {
            if buffer.readableBytes > 4096 { throw ChannelError.inputClosed }
            return .needMoreData
        }
        let line = buffer.readString(length: end - buffer.readerIndex) ?? ""
        buffer.moveReaderIndex(forwardBy: 1)
        context.fireChannelRead(Self.wrapInboundOut(line))
        return .continue
    }
}

/// Answers each line with "echo <line>".
final class EchoHandler: ChannelInboundHandler {
    typealias InboundIn = String
    typealias OutboundOut = ByteBuffer
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let line = Self.unwrapInboundIn(data)
        context.writeAndFlush(Self.wrapOutboundOut(ByteBuffer(string: "echo \(line)\n")), promise: nil)
    }
    func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }
}

/// Completes `reply` with the first line, or fails it when the connection ends first.
final class ReplyHandler: ChannelInboundHandler {
    typealias InboundIn = String
    let reply: EventLoopPromise<String>
    init(reply: EventLoopPromise<String>) { self.reply = reply }
    func channelRead(context: ChannelHandlerContext, data: NIOAny) { reply.succeed(Self.unwrapInboundIn(data)) }
    func channelInactive(context: ChannelHandlerContext) {
        reply.fail(ChannelError.eof)
        context.fireChannelInactive()
    }
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        reply.fail(error)
        context.close(promise: nil)
    }
}
