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
/// no route. Handlers count only what is theirs to know (decisions, certificates issued).
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
        let endpoint = endpoints.name(ofPath: request.uri.path)
        do {
            let response = try await inner.respond(to: request, context: context)
            endpoints.counters.counter(endpoint: endpoint, status: response.status.code).increment()
            return response
        } catch {
            endpoints.counters.counter(endpoint: endpoint, status: (error as? any HTTPResponseError)?.status.code ?? 500).increment()
            throw error
        }
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
