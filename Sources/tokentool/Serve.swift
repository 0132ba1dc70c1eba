import ArgumentParser
import CStandardStreams
import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Metrics
import Prometheus
import PeerCA
import ServiceLifecycle
import TokenKit
import TokenServer
import UnixSignals
import X509

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the HTTP service: the auth webhook and certificate issuance.",
        discussion: """
            Without --config it runs on embedded defaults: state in ./tokentool-state (a development \
            CA made on first start, an SQLite ledger), 127.0.0.1:8080, and one provider, "dev", that \
            accepts HS256 tokens with iss "tokentool-dev" signed with the secret in \
            tokentool-state/dev-hs256.secret. It prints where it listens and a curl line to try.

            Endpoints: POST /v1/auth (Ditto webhook: {appID, provider, token}), POST \
            /v1/certificates ({provider, token, csr}), POST /v1/certificates/renew (mutual TLS), \
            POST /v1/logout, POST /v1/admin/revoke, POST /v1/token (token exchange), POST \
            /v1/sso/openweb, GET /.well-known/openid-configuration, GET /.well-known/jwks.json, \
            GET /v1/ca, GET /v1/crl, POST /v1/ocsp, GET /healthz, GET /metrics (the README lists \
            what each takes and answers).

            It speaks HTTP/1.1 (keep-alive, pipelined requests answered in order; HTTPS with \
            --tls-certificate and --tls-key, or --tls: a certificate from its own CA for \
            localhost, 127.0.0.1, ::1 and each --tls-name, which devices holding \
            tokentool-state/ca/root.pem trust). A connection silent for the request timeout (at \
            least 5 s) outside an answer is closed. SIGTERM or Ctrl-C shut it down gracefully: \
            it stops accepting, and requests in flight finish.

            --config FILE reads a JSON configuration (see the README, "TokenServer"); errors name \
            the offending key.

            Examples:
              tokentool serve
              tokentool serve --port 9000 --state /tmp/tt
              tokentool serve --tls --port 8443   # HTTPS, certificate from its own CA
              tokentool serve --config /etc/tokentool/server.json
              tokentool serve --self-check   # start, call both endpoints once, then stop
            """)

    @Option(help: "JSON configuration file.")
    var config: String?

    @Option(help: "State directory for the embedded defaults.")
    var state: String = "tokentool-state"

    @Option(help: "Port (overrides the configuration; 0 picks a free one).")
    var port: Int?

    @Option(help: "Most connections open at once; past it, accepting stops until one closes (overrides the configuration's limits.maxConnections; default, and most: the open-file limit less 128, at least 16).")
    var maxConnections: Int?

    @Option(help: "PEM certificate chain: serve HTTPS (with --tls-key; overrides the configuration's tls). Devices may then renew over mutual TLS.")
    var tlsCertificate: String?

    @Option(help: "PEM private key of --tls-certificate (mode 0600).")
    var tlsKey: String?

    @Flag(help: "Serve HTTPS with a server certificate from the service's own CA, made at each start (embedded defaults only).")
    var tls = false

    @Option(help: "A name for the --tls certificate besides localhost, 127.0.0.1 and ::1 (repeatable).")
    var tlsName: [String] = []

    func validate() throws {
        if (tlsCertificate == nil) != (tlsKey == nil) { throw ValidationError("--tls-certificate and --tls-key go together") }
        if tls, tlsCertificate != nil { throw ValidationError("--tls makes its own certificate: leave out --tls-certificate and --tls-key") }
        if tls, config != nil { throw ValidationError("--tls is for the embedded defaults; with --config, set tls in the configuration") }
        if !tlsName.isEmpty, !tls { throw ValidationError("--tls-name goes with --tls") }
    }

    @Flag(help: "Start, send one webhook request and one certificate request to itself, print the answers, and stop.")
    var selfCheck = false

    func run() async throws {
        // Formats its metadata only for a message it writes (swift-log's default handler formats
        // it at each set; the service sets metadata on paths that rarely log).
        var logger = Logger(label: "tokentool.serve") { ServerLogHandler.standardError(label: $0) }
        logger.logLevel = .info
        var configuration: ServerConfiguration
        if let config {
            let data = Data(try Input.read(config))
            do { configuration = try ServerConfiguration.parse(data) } catch { throw CLIExit.usage("\(config): \(error)") }
        } else {
            do throws(ConfigurationError) { configuration = try ServerConfiguration.embeddedDefaults(state: state) } catch {
                throw CLIExit.usage("defaults: \(error)")
            }
        }
        if let port { configuration.listen.port = port }
        if let maxConnections {
            var limits = configuration.limits ?? ServerConfiguration.Limits()
            limits.maxConnections = maxConnections
            configuration.limits = limits
        }
        if let tlsCertificate, let tlsKey { configuration.tls = ServerConfiguration.TLS(certificate: tlsCertificate, key: tlsKey) }
        if tls { configuration.tls = OwnTLS.files(state: state) }
        if selfCheck { configuration.listen.port = 0 }
        // A configuration error names where the configuration came from.
        let misconfigured = { (error: ConfigurationError) in CLIExit.usage("\(config ?? "defaults"): \(error)") }
        let service: TokenService
        do { service = try await TokenService.start(configuration: configuration, logger: logger) } catch let error as ConfigurationError {
            throw misconfigured(error)
        }
        if tls {
            do { try OwnTLS.make(service: service, state: state, names: OwnTLS.names(listen: configuration.listen.host, extra: tlsName)) } catch {
                await service.shutdown()
                throw error
            }
        }
        let started = AsyncStream<Int>.makeStream()
        // The process's metrics go to one Prometheus registry, which GET /metrics shows.
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        let group: ServiceGroup
        do {
            group = try TokenHTTPServer.serviceGroup(service, logger: logger, signals: [.sigterm, .sigint], metrics: registry) { port in
                started.continuation.yield(port)
                started.continuation.finish()
            }
        } catch let error as ConfigurationError {  // the TLS files: unreadable, or not a certificate and its key
            await service.shutdown()
            throw misconfigured(error)
        }
        let devToken = config == nil ? try Self.devToken(state: state) : nil
        let scheme = configuration.tls == nil ? "http" : "https"
        let address = "\(configuration.listen.host):\(configuration.listen.port)"
        do {
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask {
                    // The stream ends with the group, so a server that never binds does not leave
                    // the wait below hanging (and the group's error, say EADDRINUSE, is thrown).
                    defer { started.continuation.finish() }
                    try await group.run()
                }
                guard let bound = await started.stream.first(where: { _ in true }) else {
                    try await tasks.waitForAll()
                    return
                }
                try await announceAndWait(bound: bound, scheme: scheme, configuration: configuration, devToken: devToken, group: group, tasks: &tasks)
            }
        } catch let error as IOError where Self.bindErrors.contains(error.errnoCode) {
            await service.shutdown()
            throw CLIExit(code: 2, message: Self.bindFailure(address: address, errno: error.errnoCode))
        } catch {
            await service.shutdown()
            throw error
        }
        await service.shutdown()
    }

    /// The errors `bind` gives for an address this process cannot listen on.
    static let bindErrors: Set<Int32> = [EADDRINUSE, EACCES, EADDRNOTAVAIL]

    /// What to tell the operator when the listening address cannot be bound.
    static func bindFailure(address: String, errno code: Int32) -> String {
        switch code {
        case EADDRINUSE:
            return "tokentool serve: \(address) is already in use (another tokentool serve?). Stop what listens there, "
                + "or choose another port with --port PORT (--port 0 picks a free one)."
        case EACCES:
            return "tokentool serve: not allowed to listen on \(address) (ports below 1024 need privileges); choose another port with --port PORT."
        default:
            return "tokentool serve: cannot listen on \(address): the host is not an address of this machine (listen.host)."
        }
    }

    /// Prints where the server listens (and, on the embedded defaults, a curl line to try), runs
    /// the self-check when asked, then waits for the server to stop.
    func announceAndWait(
        bound: Int, scheme: String, configuration: ServerConfiguration, devToken: String?, group: ServiceGroup,
        tasks: inout ThrowingTaskGroup<Void, any Error>
    ) async throws {
        let base = "\(scheme)://\(configuration.listen.host):\(bound)"
        say("tokentool serve: listening on \(base) (CA root: GET \(base)/v1/ca)")
        if let devToken {
            say("try it:")
            say("  curl -s -X POST \(base)/v1/auth -H 'content-type: application/json' -d '{\"appID\":\"dev\",\"provider\":\"dev\",\"token\":\"\(devToken)\"}'")
        }
        if selfCheck {
            do { try await Self.selfCheck(base: base, token: devToken, state: state) } catch {
                await group.triggerGracefulShutdown()
                throw error
            }
            await group.triggerGracefulShutdown()
        }
        try await tasks.waitForAll()
    }

    /// A token the `dev` provider accepts: HS256, iss tokentool-dev, one hour.
    static func devToken(state: String) throws -> String {
        guard let secret = FileManager.default.contents(atPath: ServerConfiguration.devSecretPath(state: state)) else {
            throw CLIExit.usage("no development secret in \(state)")
        }
        let now = Int(Date().timeIntervalSince1970)
        return try JWTSigner(key: try JWTKey.hmac(secret: Array(secret))).sign(claims: [
            "iss": .string(ServerConfiguration.devIssuer), "sub": .string("dev-user"), "name": .string("Dev User"),
            "iat": .integer(now), "exp": .integer(now + 3600), "jti": .string(UUID().uuidString.lowercased()),
        ])
    }

    static func selfCheck(base: String, token: String?, state: String) async throws {
        guard let token else { throw CLIExit.usage("--self-check needs the embedded defaults (no --config)") }
        let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup)
        func post(_ path: String, _ body: JSONValue) async throws -> (Int, String) {
            var request = HTTPClientRequest(url: base + path)
            request.method = .POST
            request.headers.add(name: "content-type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: body.compactText))
            let response = try await client.execute(request, timeout: .seconds(10))
            let bytes = try await response.body.collect(upTo: 1 << 20)
            return (Int(response.status.code), String(buffer: bytes))
        }
        do {
            let (authStatus, auth) = try await post("/v1/auth", .object(["appID": .string("dev"), "provider": .string("dev"), "token": .string(token)]))
            say("POST /v1/auth → \(authStatus) \(auth)")
            let csr = try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate())
            let (certStatus, cert) = try await post("/v1/certificates", .object(["provider": .string("dev"), "token": .string(token), "csr": .string(csr)]))
            let summary = (try? JSONValue.parse(Array(cert.utf8)))?.objectValue.map { object in
                "serial \(object["serial"]?.stringValue ?? "-"), \(object["spiffeID"]?.stringValue ?? "-"), until \(object["notAfter"]?.stringValue ?? "-")"
            } ?? cert
            say("POST /v1/certificates → \(certStatus) \(summary)")
            try await client.shutdown()
            guard authStatus == 200, auth.contains("\"authenticate\":true"), certStatus == 200 else {
                throw CLIExit(code: 1, message: "tokentool serve: self-check failed")
            }
            say("self-check passed")
        } catch {
            try? await client.shutdown()
            throw error
        }
    }
}

/// `serve --tls`: the service's own HTTPS certificate, from its CA, made anew at each start.
enum OwnTLS {
    static func files(state: String) -> ServerConfiguration.TLS {
        let dir = (state as NSString).appendingPathComponent("tls")
        return ServerConfiguration.TLS(certificate: (dir as NSString).appendingPathComponent("server.pem"), key: (dir as NSString).appendingPathComponent("server.key"))
    }

    /// localhost, 127.0.0.1, ::1, the listening host when it is a specific one, and `extra`.
    static func names(listen: String, extra: [String]) -> [String] {
        var names = ["localhost", "127.0.0.1", "::1"]
        for name in [listen] + extra where !["0.0.0.0", "::", ""].contains(name) && !names.contains(name) { names.append(name) }
        return names
    }

    /// A new P-256 key and a 90-day server certificate for `names` from the service's CA, each
    /// file written whole and renamed over the last start's.
    static func make(service: TokenService, state: String, names: [String]) throws {
        let files = files(state: state)
        let dir = (files.certificate as NSString).deletingLastPathComponent
        if mkdir(dir, 0o700) != 0, errno != EEXIST { throw CLIExit.usage("cannot create \(dir): \(String(cString: strerror(errno)))") }
        let authority = service.ca.authority
        do {
            let key = try CAKeyAlgorithm.p256.generate()
            let certificate = try authority.serviceCertificate(publicKey: key.publicKey, names: names, validity: 90 * 86_400)
            var chain = PEMText.encode(certificate.derBytes, label: "CERTIFICATE")
            for intermediate in authority.intermediates { chain += PEMText.encode(intermediate.derBytes, label: "CERTIFICATE") }
            for (path, contents, mode) in [(files.key, try DeviceCSR.keyPEM(key), mode_t(0o600)), (files.certificate, chain, mode_t(0o644))] {
                try DeviceSettings.replace(path, Array(contents.utf8), mode: mode)
            }
        } catch let error as PeerCAError { throw CLIExit.usage("--tls: \(error.message)") }
    }
}

/// Writes a line to standard output at once (print is block-buffered into a pipe or a log file,
/// and "listening on" must be seen when it happens).
/// A failure to write it (a full disk under a log file) is not the server's to die of: ignored.
func say(_ line: String) {
    tt_stdout_say(line + "\n")
}
