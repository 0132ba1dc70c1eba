import Foundation
import HTTPTypes
public import Hummingbird
import Metrics
import Synchronization

/// The service's router with every request counted once, in `tokenserver_requests_total` with
/// the dimensions `endpoint` (`auth`, `certificates`, `logout`, `admin_revoke`, `openweb`, `ca`, `crl`, `ocsp`,
/// `healthz`, `metrics`;
/// `unknown` for a path no route serves) and `status`. It wraps the whole router rather than
/// sitting in it as a middleware, because a router's middleware never sees a request that matches
/// no route; for the same reason it answers what the router alone would not: 405 with `Allow` for
/// a path served with another method, and the service's JSON errors for 404. Handlers count only
/// what is theirs to know (decisions, certificates issued).
public struct CountedRouter: HTTPResponderBuilder {
    let router: Router<TokenRequestContext>
    let endpoints: ServiceEndpoints

    public func buildResponder() -> CountingResponder {
        CountingResponder(inner: router.buildResponder(), endpoints: endpoints)
    }
}

/// The responder of a ``CountedRouter``.
public struct CountingResponder: HTTPResponder {
    public typealias Context = TokenRequestContext
    let inner: RouterResponder<TokenRequestContext>
    let endpoints: ServiceEndpoints

    public func respond(to request: Request, context: Context) async throws -> Response {
        let path = ServiceEndpoints.routePath(request.uri.path)
        let endpoint = endpoints.name(ofPath: path)
        let method: ServiceEndpoint.Method? = switch request.method {
        case .get, .head: .get
        case .post: .post
        default: nil
        }
        let response: Response
        do {
            if let refusal = Self.refusal(of: request) {
                response = refusal.http(close: true)
            } else if method.flatMap({ endpoints.endpoint(method: $0, path: path) }) == nil {
                response = notFound(request, path: path)
            } else {
                // The router's own errors (ours, thrown from a route, included) come back as responses.
                response = try await inner.respond(to: request, context: context)
            }
        } catch {
            endpoints.counters.counter(endpoint: endpoint, status: (error as? any HTTPResponseError)?.status.code ?? 500).increment()
            throw error
        }
        endpoints.counters.counter(endpoint: endpoint, status: response.status.code).increment()
        return response
    }

    /// A path the service serves with another method: 405 and the methods it takes (RFC 9110
    /// §15.5.6); otherwise 404, both in the service's JSON.
    private func notFound(_ request: Request, path: String) -> Response {
        let shown = path.count > 200 ? String(path.prefix(200)) + "…" : path
        let method = String(request.method.rawValue.prefix(20))
        guard let served = endpoints.method(ofPath: path) else {
            return ServiceResponse.error(404, "not_found", "no endpoint \(method) \(shown)").http
        }
        let allowed = served == .get ? "GET, HEAD" : "POST"
        var response = ServiceResponse.error(405, "method_not_allowed", "\(method) is not allowed on \(shown); it takes \(allowed)").http
        response.headers[.allow] = allowed
        return response
    }

    /// What a request's head alone makes it refused with, the connection closed after: a transfer
    /// coding other than `chunked` alone (501: read as chunked, "gzip, chunked" is how requests are
    /// smuggled past a proxy), or more than one `Authorization` (400: which would one be?).
    static func refusal(of request: Request) -> ServiceResponse? {
        let codings = request.headers[values: .transferEncoding].flatMap { $0.split(separator: ",") }
            .map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        if !codings.isEmpty, codings != ["chunked"] {
            return .error(501, "unsupported_transfer_coding", "transfer coding \(codings.joined(separator: ", ").prefix(80)) is not supported; send chunked or a Content-Length")
        }
        if request.headers[values: .authorization].count > 1 {
            return .error(400, "invalid_request", "the request has more than one Authorization header")
        }
        return nil
    }
}

/// The request counters, one per (endpoint, status), kept in a ``CounterCache``.
final class RequestCounters: Sendable {
    static let label = "tokenserver_requests_total"

    private let cache: CounterCache

    /// Counts with `factory` (the bootstrapped metrics system by default).
    init(factory: any MetricsFactory = MetricsSystem.factory) { cache = CounterCache(factory: factory) }

    func counter(endpoint: String, status: Int) -> Counter {
        cache.counter(RequestCounters.label, [("endpoint", endpoint), ("status", String(status))])
    }
}

/// Counters made once per label and dimensions and kept, so counting costs a dictionary lookup
/// under a lock, not a trip through the metrics factory (which, for Prometheus, checks the
/// names, sorts and hashes the labels and takes the registry's lock: ≈ 2 µs, on every certificate
/// and webhook decision before this cache). The factory gives the same counter for the same
/// label and dimensions, so keeping it changes nothing that is counted.
final class CounterCache: Sendable {
    private struct Key: Hashable {
        let label: String
        let dimensions: [String]
    }
    private let counters = Mutex<[Key: Counter]>([:])
    private let factory: (any MetricsFactory)?

    /// Counters made by `factory`; with nil, by the metrics system as it is when each counter is
    /// first used (a service is made before `tokentool serve` bootstraps it). A counter first used
    /// before `MetricsSystem.bootstrap` is kept with the no-op factory it got then.
    init(factory: (any MetricsFactory)? = nil) { self.factory = factory }

    func counter(_ label: String, _ dimensions: [(String, String)] = []) -> Counter {
        let key = Key(label: label, dimensions: dimensions.flatMap { [$0.0, $0.1] })
        return counters.withLock { counters in
            if let counter = counters[key] { return counter }
            let counter = Counter(label: label, dimensions: dimensions, factory: factory ?? MetricsSystem.factory)
            counters[key] = counter
            return counter
        }
    }
}
