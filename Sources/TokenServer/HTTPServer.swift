import Foundation
import HTTPTypes
public import Hummingbird
import HummingbirdCore
import HummingbirdTLS
public import Logging
import Metrics
import NIOCore
import NIOHTTPTypes
import NIOSSL
import PeerCA
import PeerCAPostgres
public import Prometheus
public import ServiceLifecycle
public import UnixSignals
import TokenKit

/// The HTTP service around a ``TokenService``: its endpoints as Hummingbird 2 routes
/// (``router(_:metrics:)``), and the Hummingbird application that serves them
/// (``application(_:logger:metrics:onRunning:)``, ``serviceGroup(_:logger:signals:metrics:onRunning:)``):
/// what `tokentool serve` runs is what a program embeds.
///
/// | endpoint | what |
/// |---|---|
/// | `POST /v1/auth` | the authentication webhook (Ditto's JSON) |
/// | `POST /v1/certificates` | `{provider, token, csr}` → PEM chain, serial, notAfter |
/// | `POST /v1/certificates/renew` | mutual TLS with the current certificate, `{csr}` → a new one |
/// | `POST /v1/logout` | `{provider, token}` → the account's certificates revoked, its sessions ended |
/// | `POST /v1/admin/revoke` | `Authorization: Bearer …`, `{serial | account, reason?}` |
/// | `POST /v1/admin/certificates` | `Authorization: Bearer …`, `{deviceID, csr, validitySeconds, by?}`: a manual (Ditto Manual identity) certificate |
/// | `POST /v1/sso/openweb` | `{provider, token, codeA}` → `{codeB}` from OpenWeb's `register-user` |
/// | `POST /v1/token` | token exchange (RFC 8693) → a JWT signed by the service's issuer |
/// | `GET /.well-known/openid-configuration`, `GET /.well-known/jwks.json` | the issuer's discovery document and keys |
/// | `GET /v1/ca` | the CA root (PEM) |
/// | `GET /v1/crl` | a signed CRL (DER) |
/// | `POST /v1/ocsp` | OCSP (DER request → DER response) |
/// | `GET /healthz` | `ok` |
/// | `GET /metrics` | Prometheus text (when the program gives a registry) |
///
/// At the edge, from Hummingbird and this module's router and channel handler: HEAD is GET
/// without the body; a method a path does not take is 405 with `Allow`; a body declared over
/// `limits.maxBodyBytes` is 413 before it is read (and the connection closed), one that grows past
/// it while read is 413 too; a transfer coding other than `chunked` is 501; a body still arriving
/// after three idle timeouts is 408; `Expect: 100-continue` is answered before the body;
/// keep-alive and pipelined requests (answered in order); a connection silent for the idle
/// timeout is closed; at most `limits.maxConnections` open at once (accepting pauses past it);
/// graceful shutdown; HTTPS, with a client certificate optional (renewal).
public enum TokenHTTPServer {
    /// The router with every endpoint, each request counted (`tokenserver_requests_total`, by
    /// endpoint and status). `/metrics` shows `metrics` (the registry the program bootstrapped
    /// swift-metrics with: `MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))`);
    /// without one it answers 404. Give it to Hummingbird's `Application(router:)`.
    public static func router(_ service: TokenService, metrics: PrometheusCollectorRegistry? = nil) -> CountedRouter {
        router(service, metrics: metrics, metricsFactory: MetricsSystem.factory)
    }

    /// ``router(_:metrics:)`` whose request counts go to `metricsFactory` (tests give their own).
    static func router(_ service: TokenService, metrics: PrometheusCollectorRegistry?, metricsFactory: any MetricsFactory) -> CountedRouter {
        router(ServiceEndpoints(service, metrics: metrics, counters: RequestCounters(factory: metricsFactory)))
    }

    /// The router of a table of endpoints (tests give their own table).
    static func router(_ endpoints: ServiceEndpoints) -> CountedRouter {
        let dittoSignature = HTTPField.Name(DittoWebhookSignature.headerName)
        // HEAD: each GET route's answer without its body (a load balancer's HEAD /healthz).
        let router = Router(context: TokenRequestContext.self, options: .autoGenerateHeadEndpoints)
        for endpoint in endpoints.endpoints {
            router.on(RouterPath(endpoint.path), method: endpoint.method == .get ? .get : .post) { request, context -> Response in
                let body = endpoint.readsBody ? try await collect(request, within: endpoints) : []
                let signatures = dittoSignature.map { request.headers[values: $0] } ?? []
                let serviceRequest = ServiceRequest(
                    body: body, authorization: request.headers[.authorization], contentType: request.headers[.contentType],
                    dittoSignature: signatures.isEmpty ? nil : signatures.joined(separator: ","), channel: context.channel)
                return await endpoint.respond(serviceRequest).http
            }
        }
        return CountedRouter(router: router, endpoints: endpoints)
    }

    /// The request's body, up to the endpoints' limit: a body declared too large is refused before
    /// anything of it is read, and one that grows past the limit as it is read is refused then
    /// (413, the connection closed). (A body still arriving at the read timeout is answered 408
    /// by ``EdgeHandler``, on the connection's event loop.)
    static func collect(_ request: Request, within endpoints: ServiceEndpoints) async throws -> [UInt8] {
        if let declared = request.headers[.contentLength].flatMap({ Int($0) }), declared > endpoints.maxBody {
            throw ServiceHTTPError(endpoints.bodyTooLarge, close: true)
        }
        do {
            return Array(try await request.body.collect(upTo: endpoints.maxBody).readableBytesView)
        } catch is NIOTooManyBytesError {
            throw ServiceHTTPError(endpoints.bodyTooLarge, close: true)
        }
    }

    /// The configuration's `tls` as a server TLS configuration (nil without `tls`): its chain and
    /// key, and the CA's root to verify the certificate a device may present (renewal by mutual
    /// TLS; presenting none is fine, one that does not chain to this CA ends the handshake). A key
    /// file others can read is refused.
    static func tlsConfiguration(_ service: TokenService) throws -> TLSConfiguration? {
        guard let tls = service.configuration.tls else { return nil }
        try ConfigurationError.checkPrivate(tls.key, key: "tls.key")
        return try usableTLS {
            let chain = try NIOSSLCertificate.fromPEMFile(tls.certificate)
            let key = try NIOSSLPrivateKey(file: tls.key, format: .pem)
            var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
            configuration.certificateVerification = .optionalVerification
            configuration.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(Array(service.caPEM.utf8)))
            return configuration
        }
    }

    /// `make`'s result, or its error as the configuration's `tls` that cannot be used.
    private static func usableTLS<T>(_ make: () throws -> T) throws -> T {
        do { return try make() } catch {
            throw ConfigurationError(key: "tls", "the certificate or key cannot be used (\(error))")
        }
    }

    /// How long a connection may stay silent before it is closed: the request timeout, at least 5 s.
    static func idleTimeout(_ service: TokenService) -> Int64 { Int64(max(service.configuration.requestTimeout, 5)) }

    /// The service as a Hummingbird application listening where the configuration says (HTTPS
    /// when `tls` is set), with the edge behaviour described on this type; `onRunning` receives
    /// the bound port. Run it in a `ServiceGroup` beside ``TokenService/services``, or use
    /// ``serviceGroup(_:logger:signals:metrics:onRunning:)``, which does.
    public static func application(
        _ service: TokenService, logger: Logger, metrics: PrometheusCollectorRegistry? = nil,
        onRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) throws -> some ApplicationProtocol {
        try makeApplication(service, logger: logger, router: router(service, metrics: metrics), onRunning: onRunning)
    }

    /// The application of ``application(_:logger:metrics:onRunning:)`` around `router`
    /// (`idleTimeout`: tests give a shorter one than the configuration's).
    static func makeApplication(
        _ service: TokenService, logger: Logger, router: CountedRouter, idleTimeout: TimeAmount? = nil,
        onRunning: @escaping @Sendable (Int) async -> Void
    ) throws -> Application<CountingResponder> {
        let configuration = service.configuration
        let maxBody = configuration.maxBodyBytes
        let idle = idleTimeout ?? .seconds(Self.idleTimeout(service))
        let readTimeout = router.endpoints.readTimeout
        let http1 = HTTPServerBuilder.http1(
            configuration: .init(additionalChannelHandlers: [EdgeHandler(maxBody: maxBody, readTimeout: readTimeout)], idleTimeout: idle))
        var server = http1
        if let tls = try tlsConfiguration(service) { server = try usableTLS { try .tls(http1, tlsConfiguration: tls) } }
        let scheme = configuration.tls == nil ? "http" : "https"
        let host = configuration.listen.host
        if configuration.maxConnectionsLowered {
            logger.warning(
                "limits.maxConnections is past the open-file limit less 128; lowered",
                metadata: ["asked": "\(configuration.limits?.maxConnections ?? 0)", "used": "\(configuration.maxConnections)"])
        }
        var application = Application(
            router: router, server: server,
            configuration: ApplicationConfiguration(
                address: .hostname(host, port: configuration.listen.port), serverName: "tokentool", backlog: 256,
                availableConnectionsDelegate: ConnectionCap(limit: configuration.maxConnections, logger: logger)),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? configuration.listen.port
                logger.info("HTTP server listening", metadata: ["host": "\(host)", "port": "\(port)", "tls": "\(scheme == "https")"])
                service.listening(at: "\(scheme)://\(host.contains(":") ? "[\(host)]" : host):\(port)")
                await onRunning(port)
            },
            logger: logger)
        // The ledger's tables exist before the first request (its pool runs in the same group).
        application.beforeServerStarts { try await service.prepare() }
        return application
    }

    /// Everything `tokentool serve` runs, as one `ServiceGroup`: the service's own services (a
    /// PostgreSQL ledger's connection pool) first, then the application of
    /// ``application(_:logger:metrics:onRunning:)``. Graceful shutdown (on `signals`, or
    /// `triggerGracefulShutdown()`) stops the server first — it stops accepting, closes idle
    /// connections, and requests in flight finish — then the ledger. `metrics` is what `/metrics`
    /// shows (see ``router(_:metrics:)``); `onRunning` receives the bound port. A configuration
    /// error (`tls`) is thrown here; a port that cannot be bound, by the group's `run()` (NIO's
    /// `IOError`, with its errno).
    public static func serviceGroup(
        _ service: TokenService, logger: Logger, signals: [UnixSignal] = [], metrics: PrometheusCollectorRegistry? = nil,
        onRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) throws -> ServiceGroup {
        let application = try makeApplication(service, logger: logger, router: router(service, metrics: metrics), onRunning: onRunning)
        return ServiceGroup(configuration: .init(services: service.services + [application], gracefulShutdownSignals: signals, logger: logger))
    }
}

extension ServiceResponse {
    /// The answer as Hummingbird's response; `close`: the connection ends after it.
    func http(close: Bool) -> Response {
        var headers: HTTPFields = [.contentType: contentType]
        headers[.cacheControl] = "no-store"
        if let retryAfter { headers[.retryAfter] = String(retryAfter) }
        if close { headers[.connection] = "close" }
        return Response(status: HTTPResponse.Status(code: status), headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: body)))
    }

    var http: Response { http(close: false) }
}

/// A ``ServiceResponse`` thrown from a route or the responder (a body too large or too slow, a
/// transfer coding not supported), and whether the connection ends after it.
struct ServiceHTTPError: HTTPResponseError {
    let serviceResponse: ServiceResponse
    let close: Bool
    init(_ response: ServiceResponse, close: Bool = false) {
        serviceResponse = response
        self.close = close
    }
    var status: HTTPResponse.Status { HTTPResponse.Status(code: serviceResponse.status) }
    func response(from request: Request, context: some RequestContext) throws -> Response { serviceResponse.http(close: close) }
}

/// `limits.maxConnections` through Hummingbird's own hook: past the cap, accepting stops — new
/// connections wait in the kernel's queue rather than take the descriptors the ledger, key
/// fetches and logs need — until one closes; reaching it is said once each time (Hummingbird's
/// `MaximumAvailableConnections` says nothing above trace).
struct ConnectionCap: AvailableConnectionsDelegate {
    let limit: Int
    let logger: Logger
    var open = 0

    init(limit: Int, logger: Logger) {
        self.limit = max(1, limit)
        self.logger = logger
    }

    mutating func connectionOpened() {
        open += 1
        if open == limit {
            logger.warning("connection limit reached; accepting again when one closes", metadata: ["open": "\(open)", "limit": "\(limit)"])
        }
    }

    mutating func connectionClosed() { open -= 1 }

    func isAcceptingNewConnections() -> Bool { open < limit }
}

/// What Hummingbird's HTTP/1.1 channel leaves to the application at the edge, as a channel
/// handler between its codec and its connection handler, on the connection's event loop:
/// - `Expect: 100-continue` is answered `100 Continue` before the body is read (curl waits a
///   second for it before sending a body over 1 KiB), unless the body declared is over the limit:
///   then the final answer, 413, comes instead;
/// - a request whose body is still arriving `readTimeout` after its head (however steadily it
///   trickles: a byte a second would otherwise hold the connection without end; silence alone is
///   Hummingbird's idle timeout) is answered `408` and the connection closed;
/// - an answer that says `Connection: close` (413, 408, 501) closes the connection once it is
///   written: the client's remaining bytes are not read.
final class EdgeHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let maxBody: Int
    private let readTimeout: TimeAmount
    private var closeAfterAnswer = false
    /// The 408 of the request being read, due at its read timeout (nil: no body is awaited).
    private var readDeadline: Scheduled<Void>?
    /// A 408 was written: nothing more is.
    private var timedOut = false

    init(maxBody: Int, readTimeout: Duration) {
        self.maxBody = maxBody
        self.readTimeout = TimeAmount(readTimeout)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !timedOut else { return }
        switch unwrapInboundIn(data) {
        case .head(let head):
            let declared = head.headerFields[.contentLength].flatMap { Int($0) } ?? 0
            if declared <= maxBody, head.headerFields[.expect]?.lowercased() == "100-continue" {
                context.writeAndFlush(wrapOutboundOut(.head(HTTPResponse(status: .continue))), promise: nil)
            }
            // A body to wait for: a length over zero, or a transfer coding.
            if declared > 0 || head.headerFields[.transferEncoding] != nil {
                let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
                let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
                readDeadline?.cancel()
                readDeadline = context.eventLoop.scheduleTask(in: readTimeout) { handler.value.readTimedOut(bound.value) }
            }
        case .end:
            readDeadline?.cancel()
            readDeadline = nil
        case .body:
            break
        }
        context.fireChannelRead(data)
    }

    /// The request's body did not arrive whole in time: 408, and the connection closed.
    private func readTimedOut(_ context: ChannelHandlerContext) {
        readDeadline = nil
        timedOut = true
        let seconds = readTimeout.nanoseconds / 1_000_000_000
        let answer = ServiceResponse.error(408, "request_timeout", "the request did not arrive whole within \(seconds) s")
        let body = answer.body
        // The headers every answer of the service has (``ServiceResponse/http(close:)``), and its length.
        var head = answer.http(close: true).head
        head.headerFields[.contentLength] = String(body.count)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(context.channel.allocator.buffer(bytes: body))), promise: nil)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        // After a 408 the application's own answer (to a request that never arrived whole) is dropped.
        guard !timedOut else {
            promise?.fail(ChannelError.ioOnClosedChannel)
            return
        }
        switch unwrapOutboundIn(data) {
        case .head(let head) where head.status.kind != .informational:
            // Answered before the body came whole (413): the body is no longer waited for.
            readDeadline?.cancel()
            readDeadline = nil
            closeAfterAnswer = head.headerFields[.connection]?.lowercased() == "close"
            context.write(data, promise: promise)
        case .end where closeAfterAnswer:
            closeAfterAnswer = false
            let channel = context.channel
            context.writeAndFlush(data).whenComplete { result in
                promise?.completeWith(result)
                channel.close(promise: nil)
            }
        default:
            context.write(data, promise: promise)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        readDeadline?.cancel()
        readDeadline = nil
    }
}
