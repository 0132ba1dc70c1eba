import Foundation
import HTTPTypes
public import Hummingbird
import HummingbirdCore
import HummingbirdTLS
public import Logging
import Metrics
import NIOCore
import NIOSSL
import PeerCA
import PeerCAPostgres
public import Prometheus
public import ServiceLifecycle
public import UnixSignals
import TokenKit

/// The HTTP service around a ``TokenService``: its endpoints as Hummingbird 2 routes
/// (``router(_:metrics:)``, ``application(_:logger:metrics:onRunning:)``), and the lean SwiftNIO
/// server `tokentool serve` runs (``serviceGroup(_:logger:signals:metrics:onRunning:)``), both
/// from one table of endpoints.
///
/// | endpoint | what |
/// |---|---|
/// | `POST /v1/auth` | the authentication webhook (Ditto's JSON) |
/// | `POST /v1/certificates` | `{provider, token, csr}` → PEM chain, serial, notAfter |
/// | `POST /v1/certificates/renew` | mutual TLS with the current certificate, `{csr}` → a new one |
/// | `POST /v1/logout` | `{provider, token}` → the account's certificates revoked, its sessions ended |
/// | `POST /v1/admin/revoke` | `Authorization: Bearer …`, `{serial | account, reason?}` |
/// | `POST /v1/sso/openweb` | `{provider, token, codeA}` → `{codeB}` from OpenWeb's `register-user` |
/// | `POST /v1/token` | token exchange (RFC 8693) → a JWT signed by the service's issuer |
/// | `GET /.well-known/openid-configuration`, `GET /.well-known/jwks.json` | the issuer's discovery document and keys |
/// | `GET /v1/ca` | the CA root (PEM) |
/// | `GET /v1/crl` | a signed CRL (DER) |
/// | `POST /v1/ocsp` | OCSP (DER request → DER response) |
/// | `GET /healthz` | `ok` |
/// | `GET /metrics` | Prometheus text (when the program gives a registry) |
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
        let endpoints = ServiceEndpoints(service, metrics: metrics, counters: RequestCounters(factory: metricsFactory))
        let router = Router(context: TokenRequestContext.self)
        for endpoint in endpoints.endpoints {
            router.on(RouterPath(endpoint.path), method: endpoint.method == .get ? .get : .post) { request, context -> Response in
                let body = endpoint.readsBody ? try await collect(request, within: endpoints) : []
                let serviceRequest = ServiceRequest(
                    body: body, authorization: request.headers[.authorization], contentType: request.headers[.contentType], channel: context.channel)
                return await endpoint.respond(serviceRequest).http
            }
        }
        return CountedRouter(router: router, endpoints: endpoints)
    }

    static func collect(_ request: Request, within endpoints: ServiceEndpoints) async throws -> [UInt8] {
        do {
            return Array(try await request.body.collect(upTo: endpoints.maxBody).readableBytesView)
        } catch is NIOTooManyBytesError {
            throw ServiceHTTPError(endpoints.bodyTooLarge)
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
    /// when `tls` is set), for a program that adds routes of its own; `onRunning` receives the
    /// bound port. `tokentool serve` runs ``serviceGroup(_:logger:signals:metrics:onRunning:)``
    /// instead, whose server answers the same endpoints at less cost a request.
    public static func application(
        _ service: TokenService, logger: Logger, metrics: PrometheusCollectorRegistry? = nil,
        onRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) throws -> some ApplicationProtocol {
        let configuration = service.configuration
        let http1 = HTTPServerBuilder.http1(configuration: .init(idleTimeout: .seconds(idleTimeout(service))))
        let server: HTTPServerBuilder = try tlsConfiguration(service).map { try .tls(http1, tlsConfiguration: $0) } ?? http1
        var application = Application(
            router: router(service, metrics: metrics), server: server,
            configuration: ApplicationConfiguration(address: .hostname(configuration.listen.host, port: configuration.listen.port), serverName: "tokentool"),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? configuration.listen.port) },
            logger: logger)
        // The ledger's tables exist before the first request (its pool runs in the same group).
        application.beforeServerStarts { try await service.prepare() }
        return application
    }

    /// Everything `tokentool serve` runs, as one `ServiceGroup`: the service's own services (a
    /// PostgreSQL ledger's connection pool) first, then the HTTP server (every endpoint of
    /// ``router(_:metrics:)``, served by SwiftNIO's HTTP/1.1 codec and one channel handler, HTTPS
    /// when `tls` is set). Graceful shutdown (on `signals`, or `triggerGracefulShutdown()`) stops
    /// the server first — it stops accepting, closes idle connections, and requests in flight
    /// finish — then the ledger. `metrics` is what `/metrics` shows (see ``router(_:metrics:)``);
    /// `onRunning` receives the bound port. A configuration error (`tls`) is thrown here; a port
    /// that cannot be bound, by the group's `run()` (NIO's `IOError`, with its errno).
    public static func serviceGroup(
        _ service: TokenService, logger: Logger, signals: [UnixSignal] = [], metrics: PrometheusCollectorRegistry? = nil,
        onRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) throws -> ServiceGroup {
        let configuration = service.configuration
        let scheme = configuration.tls == nil ? "http" : "https"
        let host = configuration.listen.host
        let tls = try tlsConfiguration(service).map { configuration in try usableTLS { try NIOSSLContext(configuration: configuration) } }
        let server = ServiceHTTPServer(
            endpoints: ServiceEndpoints(service, metrics: metrics, counters: RequestCounters(factory: MetricsSystem.factory)),
            host: host, port: configuration.listen.port, tls: tls, idleTimeout: .seconds(idleTimeout(service)),
            maxConnections: configuration.maxConnections, logger: logger,
            beforeStart: { try await service.prepare() },
            onRunning: { port in
                service.listening(at: "\(scheme)://\(host.contains(":") ? "[\(host)]" : host):\(port)")
                await onRunning(port)
            })
        return ServiceGroup(configuration: .init(services: service.services + [server], gracefulShutdownSignals: signals, logger: logger))
    }
}

extension ServiceResponse {
    var http: Response {
        var headers: HTTPFields = [.contentType: contentType]
        headers[.cacheControl] = "no-store"
        return Response(status: HTTPResponse.Status(code: status), headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: body)))
    }
}

/// A ``ServiceResponse`` thrown from a route (body too large).
struct ServiceHTTPError: HTTPResponseError {
    let serviceResponse: ServiceResponse
    init(_ response: ServiceResponse) { serviceResponse = response }
    var status: HTTPResponse.Status { HTTPResponse.Status(code: serviceResponse.status) }
    func response(from request: Request, context: some RequestContext) throws -> Response { serviceResponse.http }
}
