import NIOCore
import NIOSSL
import PeerCA
import PeerCAPostgres
import Prometheus

/// One request as the service's endpoints see it: the body
/// (already within `limits.maxBodyBytes`), the headers an endpoint reads, and the certificate
/// the client presented over mutual TLS, read only by the endpoint that wants it.
struct ServiceRequest: Sendable {
    var body: [UInt8]
    var authorization: String?
    var contentType: String?
    /// Ditto's `ditto-signature` header (several joined with commas), read by the webhook.
    var dittoSignature: String? = nil
    /// The connection the request came on (its TLS handler holds the client's certificate).
    var channel: any Channel

    /// The DER of the certificate the client presented in the TLS handshake, if any.
    func clientCertificateDER() async -> [UInt8]? {
        try? await channel.nioSSL_peerCertificate().get()?.toDERBytes()
    }
}

/// One endpoint: its method and path, its name in `tokenserver_requests_total`, and what it
/// answers (within the request timeout, for the endpoints that have one).
struct ServiceEndpoint: Sendable {
    enum Method: Sendable { case get, post }
    let method: Method
    let path: String
    /// The `endpoint` dimension of the request counter.
    let name: String
    let respond: @Sendable (ServiceRequest) async -> ServiceResponse

    /// A POST reads its body; a GET has none.
    var readsBody: Bool { method == .post }
}

/// Every endpoint of a ``TokenService``, in one table, which the Hummingbird router
/// (``TokenHTTPServer/router(_:metrics:)``) serves — embedded in a program, and in `tokentool
/// serve`. Routes, deadlines, body limits and request counts are defined here once.
struct ServiceEndpoints: Sendable {
    let endpoints: [ServiceEndpoint]
    /// The largest body a request may carry (`limits.maxBodyBytes`).
    let maxBody: Int
    /// How long a request's body may take to arrive, however steadily it trickles: three idle
    /// timeouts (a byte a second would otherwise hold a connection without end). Past it: 408.
    var readTimeout: Duration = .seconds(15)
    /// The request counters (`tokenserver_requests_total`).
    let counters: RequestCounters
    private let byPath: [String: ServiceEndpoint]

    /// The `endpoint` dimension of a path: its endpoint's name (`metrics` for `/metrics` also
    /// without a registry: its 404s are counted so), `unknown` for a path the service does not serve.
    func name(ofPath path: String) -> String { byPath[path]?.name ?? (path == "/metrics" ? "metrics" : "unknown") }

    /// The method `path` is served with, whatever was asked: a request with another is 405.
    func method(ofPath path: String) -> ServiceEndpoint.Method? { byPath[path]?.method }

    /// The endpoint serving `method` on `path`.
    func endpoint(method: ServiceEndpoint.Method, path: String) -> ServiceEndpoint? {
        guard let endpoint = byPath[path], endpoint.method == method else { return nil }
        return endpoint
    }

    /// The answer to a body over ``maxBody``.
    var bodyTooLarge: ServiceResponse { .error(413, "body_too_large", "the request body exceeds \(maxBody) bytes") }

    /// A table of `endpoints` (the first of two on one path serves it).
    init(endpoints: [ServiceEndpoint], maxBody: Int, counters: RequestCounters) {
        self.endpoints = endpoints
        self.maxBody = maxBody
        self.counters = counters
        byPath = Dictionary(endpoints.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
    }

    init(_ service: TokenService, metrics: PrometheusCollectorRegistry?, counters: RequestCounters) {
        // Past the request timeout the request is answered 503 `timeout` (OCSP: `tryLater`) and its
        // work cancelled; the answer does not wait for the work to stop (RequestDeadlines).
        let deadlines = RequestDeadlines(.milliseconds(Int64(service.configuration.requestTimeout * 1000)))
        func post(
            _ path: String, _ name: String, timedOut: ServiceResponse? = nil,
            _ respond: @escaping @Sendable (ServiceRequest) async -> ServiceResponse
        ) -> ServiceEndpoint {
            ServiceEndpoint(method: .post, path: path, name: name) { request in await deadlines.run(timedOut: timedOut) { await respond(request) } }
        }
        // GETs answer from memory, except the CRL, which reads the ledger: it has the deadline.
        func get(_ path: String, _ name: String, deadline: Bool = false, _ respond: @escaping @Sendable () async -> ServiceResponse) -> ServiceEndpoint {
            ServiceEndpoint(method: .get, path: path, name: name) { _ in deadline ? await deadlines.run { await respond() } : await respond() }
        }
        // OCSP clients read an OCSP response: past the deadline, `tryLater`.
        let ocspTryLater = ServiceResponse(status: 200, contentType: "application/ocsp-response", body: PeerCertificateAuthority.ocspTryLater)
        var endpoints = [
            post("/v1/auth", "auth") { await service.authenticate($0.body, dittoSignature: $0.dittoSignature) },
            post("/v1/certificates", "certificates") { await service.issueCertificate($0.body) },
            post("/v1/certificates/renew", "renew") { await service.renewCertificate($0.body, clientCertificateDER: await $0.clientCertificateDER()) },
            post("/v1/logout", "logout") { await service.logout($0.body) },
            post("/v1/admin/revoke", "admin_revoke") { await service.adminRevoke($0.body, authorization: $0.authorization) },
            post("/v1/admin/certificates", "admin_certificates") { await service.adminIssue($0.body, authorization: $0.authorization) },
            post("/v1/sso/openweb", "openweb") { await service.openWebSSO($0.body) },
            post("/v1/token", "token") { await service.exchange($0.body, contentType: $0.contentType) },
            get("/.well-known/openid-configuration", "discovery") { service.discoveryDocument() },
            get("/.well-known/jwks.json", "jwks") { service.publishedKeys() },
            get("/v1/ca", "ca") { ServiceResponse(status: 200, contentType: "application/x-pem-file", body: Array(service.caPEM.utf8)) },
            get("/v1/crl", "crl", deadline: true) { await service.crl() },
            post("/v1/ocsp", "ocsp", timedOut: ocspTryLater) { await service.ocsp($0.body) },
            get("/healthz", "healthz") { ServiceResponse(status: 200, contentType: "text/plain; charset=utf-8", body: Array("ok\n".utf8)) },
        ]
        if let metrics {
            let scrape = MetricsScrape(service: service, registry: metrics)
            endpoints.append(get("/metrics", "metrics") { scrape.response() })
        }
        self.init(endpoints: endpoints, maxBody: service.configuration.maxBodyBytes, counters: counters)
        readTimeout = .seconds(3 * TokenHTTPServer.idleTimeout(service))
    }

    /// The path a request target names, as the router matches it and as requests are counted:
    /// without its query, and without empty segments (`//v1/ca`, `/healthz/`).
    static func routePath(_ target: String) -> String {
        var path = Substring(target)
        if let query = path.utf8.firstIndex(of: UInt8(ascii: "?")) { path = path[..<query] }
        // Byte by byte: Foundation's `contains` on a string cost ≈ 1.5 µs a request.
        let slash = UInt8(ascii: "/")
        let doubled = zip(path.utf8, path.utf8.dropFirst()).contains { $0 == slash && $1 == slash }
        if doubled || (path.utf8.count > 1 && path.utf8.last == slash) {
            return "/" + path.split(separator: "/").joined(separator: "/")
        }
        return String(path)
    }
}

/// `GET /metrics`: the registry's text, with the ledger's group commit read at each scrape.
private struct MetricsScrape: Sendable {
    let service: TokenService
    let registry: PrometheusCollectorRegistry
    let commits, committed, largest, withdrawn: Gauge
    let sessionsAge, sessionsFailures: Gauge
    /// The issuer's key directory (only with an issuer configured).
    let issuerKeysAge, issuerReloadFailures: Gauge?

    init(service: TokenService, registry: PrometheusCollectorRegistry) {
        self.service = service
        self.registry = registry
        func gauge(_ name: String, _ help: String) -> Gauge {
            registry.makeGauge(descriptor: MetricNameDescriptor(metricName: name, unitName: "", helpText: help))
        }
        // The ledger's group commit: certificates per transaction is certificates / commits.
        commits = gauge("tokenserver_ledger_commits", "Ledger transactions that recorded certificates")
        committed = gauge("tokenserver_ledger_committed_certificates", "Certificates recorded by those transactions")
        largest = gauge("tokenserver_ledger_largest_commit", "The most certificates one transaction recorded")
        // Certificates withdrawn before their transaction began because their request's work was
        // cancelled (its deadline passed): not recorded, their tokens unused.
        withdrawn = gauge("tokenserver_ledger_withdrawn", "Certificates withdrawn before their transaction began because their request was cancelled (its deadline passed): not recorded")
        // The ended-sessions list: how long since it last reflected the ledger (-1: never), and
        // the reloads that failed or went unanswered (the list stayed as it was).
        sessionsAge = gauge("tokenserver_sessions_list_age_seconds", "Seconds since the ended-sessions list was last loaded from the ledger (-1: never)")
        sessionsFailures = gauge("tokenserver_sessions_reload_failures", "Reloads of the ended-sessions list that failed or went unanswered past their limit; the last list stayed in use")
        // The issuer's keys (token exchange): how long since they were read from the key
        // directory, and the reloads that failed (a rotation made elsewhere not yet seen here).
        let issuer = service.issuer != nil
        issuerKeysAge = issuer ? gauge("tokenserver_issuer_keys_age_seconds", "Seconds since the issuer's keys were last read from its key directory") : nil
        issuerReloadFailures = issuer ? gauge("tokenserver_issuer_keys_reload_failures", "Reloads of the issuer's key directory that failed; the keys read before stayed in use") : nil
    }

    func response() -> ServiceResponse {
        if let statistics = service.store.commitStatistics {
            commits.set(Int64(statistics.batches))
            committed.set(Int64(statistics.requests))
            largest.set(Int64(statistics.largestBatch))
            withdrawn.set(Int64(statistics.withdrawn))
        }
        let sessions = service.sessions.statistics
        sessionsAge.set(sessions.loadedAt.map { (ContinuousClock.now - $0) / .seconds(1) } ?? -1)
        sessionsFailures.set(Int64(sessions.failures))
        if let reloads = service.issuer?.reloadStatistics {
            issuerKeysAge?.set((ContinuousClock.now - reloads.loadedAt) / .seconds(1))
            issuerReloadFailures?.set(Int64(reloads.failures))
        }
        return ServiceResponse(status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8", body: registry.emitToBuffer())
    }
}
