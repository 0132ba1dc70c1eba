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

/// The HTTP service: Hummingbird 2 routes around a ``TokenService``.
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
        let router = Router(context: TokenRequestContext.self)
        let maxBody = service.configuration.maxBodyBytes
        let deadlines = RequestDeadlines(.milliseconds(Int64(service.configuration.requestTimeout * 1000)))
        router.post("/v1/auth") { request, _ -> Response in
            let body = try await collect(request, upTo: maxBody)
            return await deadlines.run { await service.authenticate(body) }.http
        }
        router.post("/v1/certificates") { request, _ -> Response in
            let body = try await collect(request, upTo: maxBody)
            return await deadlines.run { await service.issueCertificate(body) }.http
        }
        router.post("/v1/certificates/renew") { request, context -> Response in
            let body = try await collect(request, upTo: maxBody)
            let presented = try? await context.channel.nioSSL_peerCertificate().get()?.toDERBytes()
            return await deadlines.run { await service.renewCertificate(body, clientCertificateDER: presented) }.http
        }
        router.post("/v1/logout") { request, _ -> Response in
            let body = try await collect(request, upTo: maxBody)
            return await deadlines.run { await service.logout(body) }.http
        }
        router.post("/v1/admin/revoke") { request, _ -> Response in
            let body = try await collect(request, upTo: maxBody)
            let authorization = request.headers[.authorization]
            return await deadlines.run { await service.adminRevoke(body, authorization: authorization) }.http
        }
        router.post("/v1/sso/openweb") { request, _ -> Response in
            let body = try await collect(request, upTo: maxBody)
            return await deadlines.run { await service.openWebSSO(body) }.http
        }
        router.post("/v1/token") { request, _ -> Response in
            let body = try await collect(request, upTo: maxBody)
            let contentType = request.headers[.contentType]
            return await deadlines.run { await service.exchange(body, contentType: contentType) }.http
        }
        router.get("/.well-known/openid-configuration") { _, _ -> Response in service.discoveryDocument().http }
        router.get("/.well-known/jwks.json") { _, _ -> Response in service.publishedKeys().http }
        router.get("/v1/ca") { _, _ -> Response in
            ServiceResponse(status: 200, contentType: "application/x-pem-file", body: Array(service.caPEM.utf8)).http
        }
        router.get("/v1/crl") { _, _ -> Response in await service.crl().http }
        router.post("/v1/ocsp") { request, _ -> Response in
            let body = try await collect(request, upTo: maxBody)
            return await service.ocsp(body).http
        }
        router.get("/healthz") { _, _ -> Response in
            ServiceResponse(status: 200, contentType: "text/plain; charset=utf-8", body: Array("ok\n".utf8)).http
        }
        if let metrics {
            // The ledger's group commit, read at each scrape: certificates per transaction is
            // certificates / commits.
            let commits = metrics.makeGauge(descriptor: MetricNameDescriptor(metricName: "tokenserver_ledger_commits", unitName: "", helpText: "Ledger transactions that recorded certificates"))
            let committed = metrics.makeGauge(descriptor: MetricNameDescriptor(metricName: "tokenserver_ledger_committed_certificates", unitName: "", helpText: "Certificates recorded by those transactions"))
            let largest = metrics.makeGauge(descriptor: MetricNameDescriptor(metricName: "tokenserver_ledger_largest_commit", unitName: "", helpText: "The most certificates one transaction recorded"))
            // SQLite ledgers' batches written at a raised priority in this process, and whether the
            // kernel refused to raise it (1: batches are written at the thread's own priority;
            // CAP_SYS_NICE or an RLIMIT_NICE of 30 allows it).
            let raised = metrics.makeGauge(descriptor: MetricNameDescriptor(metricName: "tokenserver_ledger_writer_raised_batches", unitName: "", helpText: "SQLite ledger batches written at a raised thread priority"))
            let refused = metrics.makeGauge(descriptor: MetricNameDescriptor(metricName: "tokenserver_ledger_writer_raise_refused", unitName: "", helpText: "1 when the kernel refused to raise the SQLite ledger writer's priority"))
            // The layer over SQLite's page cache (CSQLiteWAL): 1 when installed in this process, and
            // the cache truncations it skipped (each commit's, when no page lies past the end).
            let pageCacheInstalled = metrics.makeGauge(descriptor: MetricNameDescriptor(metricName: "tokenserver_sqlite_pagecache_installed", unitName: "", helpText: "1 when the layer that skips SQLite page-cache truncations with nothing to drop is installed"))
            let pageCacheSkipped = metrics.makeGauge(descriptor: MetricNameDescriptor(metricName: "tokenserver_sqlite_pagecache_skipped_truncations", unitName: "", helpText: "SQLite page-cache truncations skipped because no cached page lay past the limit"))
            // The CA's signatures made from a nonce computed beforehand, the batches of nonces
            // signatures computed themselves because none was ready, and the signatures made whole
            // (a P-256 issuing key; none otherwise).
            let presigned = metrics.makeGauge(descriptor: MetricNameDescriptor(metricName: "tokenserver_ca_presigned_signatures", unitName: "", helpText: "CA signatures finished from a nonce computed beforehand (by the idle-time thread, or in a batch)"))
            let refills = metrics.makeGauge(descriptor: MetricNameDescriptor(metricName: "tokenserver_ca_presign_refills", unitName: "", helpText: "Batches of nonces computed by a CA signature that found none ready"))
            let whole = metrics.makeGauge(descriptor: MetricNameDescriptor(metricName: "tokenserver_ca_whole_signatures", unitName: "", helpText: "CA signatures (P-256 issuing key) made whole: the presigning thread held its lock, or no nonce could be computed"))
            router.get("/metrics") { _, _ -> Response in
                if let statistics = service.store.commitStatistics {
                    commits.set(Int64(statistics.batches))
                    committed.set(Int64(statistics.requests))
                    largest.set(Int64(statistics.largestBatch))
                }
                let boost = SQLiteLedger.writerBoostCounters
                raised.set(boost.boosted)
                refused.set(Int64(boost.state == .refused ? 1 : 0))
                let pageCache = SQLiteLedger.pageCacheCounters
                pageCacheInstalled.set(Int64(pageCache.state == .installed ? 1 : 0))
                pageCacheSkipped.set(pageCache.skipped)
                if let statistics = service.ca.authority.presigner?.statistics {
                    presigned.set(Int64(statistics.used))
                    refills.set(Int64(statistics.refills))
                    whole.set(Int64(statistics.missed + statistics.busy))
                }
                return ServiceResponse(status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8", body: metrics.emitToBuffer()).http
            }
        }
        return CountedRouter(router: router, counters: RequestCounters(factory: metricsFactory))
    }

    static func collect(_ request: Request, upTo limit: Int) async throws -> [UInt8] {
        do {
            return Array(try await request.body.collect(upTo: limit).readableBytesView)
        } catch is NIOTooManyBytesError {
            throw ServiceHTTPError(.error(413, "body_too_large", "the request body exceeds \(limit) bytes"))
        }
    }

    /// An application listening where the configuration says (HTTPS when `tls` is set);
    /// `onRunning` receives the bound port.
    public static func application(
        _ service: TokenService, logger: Logger, metrics: PrometheusCollectorRegistry? = nil,
        onRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) throws -> some ApplicationProtocol {
        let configuration = service.configuration
        let server: HTTPServerBuilder
        let http1 = HTTPServerBuilder.http1(configuration: .init(idleTimeout: .seconds(Int64(max(configuration.requestTimeout, 5)))))
        if let tls = configuration.tls {
            try ConfigurationError.checkPrivate(tls.key, key: "tls.key")
            do {
                let chain = try NIOSSLCertificate.fromPEMFile(tls.certificate)
                let key = try NIOSSLPrivateKey(file: tls.key, format: .pem)
                var tlsConfiguration = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
                // Devices may present their peer certificate (renewal by mutual TLS); one that
                // does not chain to this CA ends the handshake. Presenting none is fine.
                tlsConfiguration.certificateVerification = .optionalVerification
                tlsConfiguration.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(Array(service.caPEM.utf8)))
                server = try .tls(http1, tlsConfiguration: tlsConfiguration)
            } catch {
                throw ConfigurationError(key: "tls", "the certificate or key cannot be used (\(error))")
            }
        } else {
            server = http1
        }
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
    /// PostgreSQL ledger's connection pool) first, then the HTTP application. Graceful shutdown
    /// (on `signals`, or `triggerGracefulShutdown()`) stops the application first — requests in
    /// flight finish — then the ledger. `metrics` is what `/metrics` shows (see
    /// ``router(_:metrics:)``); `onRunning` receives the bound port.
    public static func serviceGroup(
        _ service: TokenService, logger: Logger, signals: [UnixSignal] = [], metrics: PrometheusCollectorRegistry? = nil,
        onRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) throws -> ServiceGroup {
        let scheme = service.configuration.tls == nil ? "http" : "https"
        let host = service.configuration.listen.host
        let app = try application(service, logger: logger, metrics: metrics) { port in
            service.listening(at: "\(scheme)://\(host.contains(":") ? "[\(host)]" : host):\(port)")
            await onRunning(port)
        }
        return ServiceGroup(configuration: .init(services: service.services + [app], gracefulShutdownSignals: signals, logger: logger))
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
