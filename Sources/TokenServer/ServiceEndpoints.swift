import NIOCore
import NIOSSL
import PeerCA
import PeerCAPostgres
import Prometheus

/// One request as the service's endpoints see it, whichever HTTP front end read it: the body
/// (already within `limits.maxBodyBytes`), the two headers an endpoint reads, and the certificate
/// the client presented over mutual TLS, read only by the endpoint that wants it.
struct ServiceRequest: Sendable {
    var body: [UInt8]
    var authorization: String?
    var contentType: String?
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
    /// Whether `tokentool serve` runs its work on the connection's event loop (see
    /// ``LoopTaskExecutor``): yes for the endpoints whose work is short and bounded per request;
    /// no for those whose work grows with the ledger or the CA key (the CRL sorts and signs every
    /// revoked serial; an OCSP answer with a nonce is signed each time, ≈ 1 ms with an RSA CA
    /// key), which stay on Swift's global pool so that a burst of them does not hold a loop's
    /// other connections.
    var onLoop = true
    let respond: @Sendable (ServiceRequest) async -> ServiceResponse

    /// A POST reads its body; a GET has none.
    var readsBody: Bool { method == .post }
}

/// Every endpoint of a ``TokenService``, in one table that both HTTP front ends serve: the
/// Hummingbird router (``TokenHTTPServer/router(_:metrics:)``, for embedding) and the server
/// `tokentool serve` runs (``TokenHTTPServer/serviceGroup(_:logger:signals:metrics:onRunning:)``).
/// Routes, deadlines, body limits and request counts are defined here once.
struct ServiceEndpoints: Sendable {
    let endpoints: [ServiceEndpoint]
    /// The largest body a request may carry (`limits.maxBodyBytes`).
    let maxBody: Int
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
            _ path: String, _ name: String, timedOut: ServiceResponse? = nil, onLoop: Bool = true,
            _ respond: @escaping @Sendable (ServiceRequest) async -> ServiceResponse
        ) -> ServiceEndpoint {
            ServiceEndpoint(method: .post, path: path, name: name, onLoop: onLoop) { request in await deadlines.run(timedOut: timedOut) { await respond(request) } }
        }
        // GETs answer from memory, except the CRL, which reads the ledger: it has the deadline.
        func get(
            _ path: String, _ name: String, deadline: Bool = false, onLoop: Bool = true, _ respond: @escaping @Sendable () async -> ServiceResponse
        ) -> ServiceEndpoint {
            ServiceEndpoint(method: .get, path: path, name: name, onLoop: onLoop) { _ in deadline ? await deadlines.run { await respond() } : await respond() }
        }
        // OCSP clients read an OCSP response: past the deadline, `tryLater`.
        let ocspTryLater = ServiceResponse(status: 200, contentType: "application/ocsp-response", body: PeerCertificateAuthority.ocspTryLater)
        var endpoints = [
            post("/v1/auth", "auth") { await service.authenticate($0.body) },
            post("/v1/certificates", "certificates") { await service.issueCertificate($0.body) },
            post("/v1/certificates/renew", "renew") { await service.renewCertificate($0.body, clientCertificateDER: await $0.clientCertificateDER()) },
            post("/v1/logout", "logout") { await service.logout($0.body) },
            post("/v1/admin/revoke", "admin_revoke") { await service.adminRevoke($0.body, authorization: $0.authorization) },
            post("/v1/sso/openweb", "openweb") { await service.openWebSSO($0.body) },
            post("/v1/token", "token") { await service.exchange($0.body, contentType: $0.contentType) },
            get("/.well-known/openid-configuration", "discovery") { service.discoveryDocument() },
            get("/.well-known/jwks.json", "jwks") { service.publishedKeys() },
            get("/v1/ca", "ca") { ServiceResponse(status: 200, contentType: "application/x-pem-file", body: Array(service.caPEM.utf8)) },
            get("/v1/crl", "crl", deadline: true, onLoop: false) { await service.crl() },
            post("/v1/ocsp", "ocsp", timedOut: ocspTryLater, onLoop: false) { await service.ocsp($0.body) },
            get("/healthz", "healthz") { ServiceResponse(status: 200, contentType: "text/plain; charset=utf-8", body: Array("ok\n".utf8)) },
        ]
        if let metrics {
            let scrape = MetricsScrape(service: service, registry: metrics)
            endpoints.append(get("/metrics", "metrics") { scrape.response() })
        }
        self.init(endpoints: endpoints, maxBody: service.configuration.maxBodyBytes, counters: counters)
    }
}

/// `GET /metrics`: the registry's text, with the ledger's group commit, the SQLite writer's
/// priority and page-cache layer, and the CA's presigning read at each scrape.
private struct MetricsScrape: Sendable {
    let service: TokenService
    let registry: PrometheusCollectorRegistry
    let commits, committed, largest, withdrawn, raised, refused, pageCacheInstalled, pageCacheSkipped, presigned, refills, whole: Gauge
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
        // SQLite ledgers' batches written at a raised priority in this process, and whether the
        // kernel refused to raise it (1: batches are written at the thread's own priority;
        // CAP_SYS_NICE or an RLIMIT_NICE of 30 allows it).
        raised = gauge("tokenserver_ledger_writer_raised_batches", "SQLite ledger batches written at a raised thread priority")
        refused = gauge("tokenserver_ledger_writer_raise_refused", "1 when the kernel refused to raise the SQLite ledger writer's priority")
        // The layer over SQLite's page cache (CSQLiteWAL): 1 when installed in this process, and
        // the cache truncations it skipped (each commit's, when no page lies past the end).
        pageCacheInstalled = gauge("tokenserver_sqlite_pagecache_installed", "1 when the layer that skips SQLite page-cache truncations with nothing to drop is installed")
        pageCacheSkipped = gauge("tokenserver_sqlite_pagecache_skipped_truncations", "SQLite page-cache truncations skipped because no cached page lay past the limit")
        // The CA's signatures made from a nonce computed beforehand, the batches of nonces
        // signatures computed themselves because none was ready, and the signatures made whole
        // (a P-256 issuing key; none otherwise).
        presigned = gauge("tokenserver_ca_presigned_signatures", "CA signatures finished from a nonce computed beforehand (by the idle-time thread, or in a batch)")
        refills = gauge("tokenserver_ca_presign_refills", "Batches of nonces computed by a CA signature that found none ready")
        whole = gauge("tokenserver_ca_whole_signatures", "CA signatures (P-256 issuing key) made whole: the presigning thread held its lock, or no nonce could be computed")
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
        let boost = SQLiteLedger.writerBoostCounters
        raised.set(boost.boosted)
        refused.set(Int64(boost.state == .refused ? 1 : 0))
        let pageCache = SQLiteLedger.pageCacheCounters
        pageCacheInstalled.set(Int64(pageCache.state == .installed ? 1 : 0))
        pageCacheSkipped.set(pageCache.skipped)
        let sessions = service.sessions.statistics
        sessionsAge.set(sessions.loadedAt.map { (ContinuousClock.now - $0) / .seconds(1) } ?? -1)
        sessionsFailures.set(Int64(sessions.failures))
        if let reloads = service.issuer?.reloadStatistics {
            issuerKeysAge?.set((ContinuousClock.now - reloads.loadedAt) / .seconds(1))
            issuerReloadFailures?.set(Int64(reloads.failures))
        }
        if let statistics = service.ca.authority.presigner?.statistics {
            presigned.set(Int64(statistics.used))
            refills.set(Int64(statistics.refills))
            whole.set(Int64(statistics.missed + statistics.busy))
        }
        return ServiceResponse(status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8", body: registry.emitToBuffer())
    }
}
