public import Logging
public import Metrics
import Synchronization
public import TokenKit

/// How long fetched keys are trusted, and how hard an issuer may be asked for them.
public struct KeyStorePolicy: Sendable {
    /// TTL when the response has no `Cache-Control: max-age`. Default 1 h.
    public var defaultTTL: Double = 3600
    /// `max-age` below this is raised to it (and `no-store`/`no-cache` get it). Default 1 min.
    public var minimumTTL: Double = 60
    /// `max-age` above this is lowered to it. Default 24 h.
    public var maximumTTL: Double = 86_400
    /// At most one refetch triggered by an unknown `kid` or a failed signature per source in this
    /// many seconds, counted from the source's last fetch of any kind. Default 30 s.
    public var refreshCooldown: Double = 30
    /// Through an outage, keep serving the last good keys for this long after they expired.
    /// Default 24 h.
    public var maximumStaleness: Double = 86_400
    /// After a failed fetch, answer from that failure (or the stale keys) for this long before
    /// asking the source again. Default 10 s.
    public var failureCacheDuration: Double = 10
    /// The most sources whose keys or last failure are kept. A PDA's keys are fetched from the
    /// host its token names, so forged tokens naming ever new hosts under an allowed suffix would
    /// grow the store without end; past this, sources with no fetch running are forgotten —
    /// those that only failed first, then those fetched longest ago. Default 10,000.
    public var maximumSources = 10_000
    /// The most fetches running at once; a source that needs a fetch beyond it fails at once
    /// (``KeySourceError/Code/busy``) and is not remembered. AsyncHTTPClient bounds connections
    /// per host, not in all: without this, such tokens could open connections until descriptors
    /// ran out. Default 64.
    public var maximumConcurrentFetches = 64

    public init() {}

    func ttl(_ document: HTTPKeyFetcher.Document) -> Double {
        if document.noCache { return minimumTTL }
        return min(max(document.maxAge ?? defaultTTL, minimumTTL), maximumTTL)
    }
}

/// The cache of issuers' keys that all remote verifiers share.
///
/// - Single flight: however many verifications ask for a cold or expired source at once, one
///   HTTP request is made and all of them wait for its result.
/// - Fresh keys are served from memory until their TTL (from `Cache-Control: max-age`, clamped to
///   ``KeyStorePolicy/minimumTTL``…``KeyStorePolicy/maximumTTL``) runs out.
/// - ``refreshed(_:after:reason:)`` refetches on an unknown `kid` or a failed signature, at most once
///   per ``KeyStorePolicy/refreshCooldown`` per source.
/// - When a fetch fails the failure is logged, counted and remembered for
///   ``KeyStorePolicy/failureCacheDuration``; the last good keys keep being served for up to
///   ``KeyStorePolicy/maximumStaleness`` after they expired.
///
/// Metrics (swift-metrics counters, dimension `source` = `pda`/`jwks`/`oidc`):
/// `pdakeys_fetches_total`, `pdakeys_fetch_failures_total`, `pdakeys_cache_hits_total`,
/// `pdakeys_cache_misses_total`, `pdakeys_stale_serves_total`, `pdakeys_refresh_skipped_total`.
///
/// ```swift
/// let fetcher = try HTTPKeyFetcher()
/// let store = RemoteKeyStore(fetcher: fetcher)
/// let keys = try await store.keys(for: .jwks(url: "https://tenant.auth0.com/.well-known/jwks.json"))
/// await fetcher.shutdown()
/// ```
public final class RemoteKeyStore: Sendable {
    public let fetcher: HTTPKeyFetcher
    public let policy: KeyStorePolicy
    public let clock: VerificationClock
    private let logger: Logger
    private let metrics: StoreMetrics
    private let states = Mutex<[KeySource: SourceState]>([:])
    /// Fetches running now (changed with `states`' lock held).
    private let fetching = Atomic<Int>(0)

    private typealias Flight = Task<Result<RemoteKeySet, KeySourceError>, Never>

    private struct SourceState {
        var current: RemoteKeySet?
        var flight: Flight?
        var generation = 0
        var lastFetchStarted = -Double.infinity
        var failure: (at: Double, error: KeySourceError)?

        /// Nothing to remember: never fetched (a source turned away while the fetches were full).
        var isEmpty: Bool { current == nil && flight == nil && failure == nil }
    }

    /// What a source that needs a fetch gets while ``KeyStorePolicy/maximumConcurrentFetches`` run.
    private var busy: KeySourceError {
        KeySourceError(.busy, "\(policy.maximumConcurrentFetches) key fetches are running already; try again shortly")
    }

    /// How many sources the store remembers now.
    package var sourceCount: Int { states.withLock { $0.count } }

    public init(
        fetcher: HTTPKeyFetcher, policy: KeyStorePolicy = KeyStorePolicy(), clock: VerificationClock = .system,
        logger: Logger = Logger(label: "tokentool.pdakeys"), metricsFactory: any MetricsFactory = MetricsSystem.factory
    ) {
        self.fetcher = fetcher
        self.policy = policy
        self.clock = clock
        self.logger = logger
        self.metrics = StoreMetrics(factory: metricsFactory)
    }

    /// The keys of `source`: from memory while fresh, else fetched (one request however many
    /// callers wait), else — through an outage — the last good keys while within the stale bound.
    public func keys(for source: KeySource) async throws(KeySourceError) -> RemoteKeySet {
        enum Decision { case hit(RemoteKeySet), wait(Flight), stale(RemoteKeySet), fail(KeySourceError) }
        let now = clock.now
        let decision: Decision = states.withLock { states in
            var state = states[source] ?? SourceState()
            defer { if !state.isEmpty { states[source] = state } }
            if let current = state.current, now < current.expiresAt { return .hit(current) }
            if let flight = state.flight { return .wait(flight) }
            if let failure = state.failure, now - failure.at < policy.failureCacheDuration {
                if let current = state.current, now < current.expiresAt + policy.maximumStaleness { return .stale(current) }
                return .fail(failure.error)
            }
            guard let flight = startFetch(source, state: &state, in: &states, now: now) else {
                if let current = state.current, now < current.expiresAt + policy.maximumStaleness { return .stale(current) }
                return .fail(busy)
            }
            return .wait(flight)
        }
        switch decision {
        case .hit(let set):
            metrics.hits(source).increment()
            return set
        case .stale(let set):
            metrics.staleServes(source).increment()
            return set
        case .fail(let error):
            metrics.misses(source).increment()
            throw error
        case .wait(let flight):
            metrics.misses(source).increment()
            switch await flight.value {
            case .success(let set): return set
            case .failure(let error):
                let after = clock.now
                let stale = states.withLock { states -> RemoteKeySet? in
                    guard let current = states[source]?.current, after < current.expiresAt + policy.maximumStaleness else { return nil }
                    return current
                }
                guard let stale else { throw error }
                metrics.staleServes(source).increment()
                logger.warning(
                    "serving stale keys through a fetch failure",
                    metadata: ["source": "\(source)", "expired_seconds_ago": "\(Int(after - stale.expiresAt))"])
                return stale
            }
        }
    }

    /// Called when a token names an unknown `kid` or its signature failed with the keys of
    /// `seen`: returns a newer key set — one another caller already fetched, or one fetched now
    /// unless the source was fetched less than ``KeyStorePolicy/refreshCooldown`` ago — or nil
    /// when there is nothing newer to try.
    public func refreshed(_ source: KeySource, after seen: RemoteKeySet, reason: String) async -> RemoteKeySet? {
        enum Decision { case newer(RemoteKeySet), wait(Flight), none }
        let now = clock.now
        let decision: Decision = states.withLock { states in
            var state = states[source] ?? SourceState()
            defer { if !state.isEmpty { states[source] = state } }
            if let current = state.current, current.generation > seen.generation { return .newer(current) }
            if let flight = state.flight { return .wait(flight) }
            if now - state.lastFetchStarted < policy.refreshCooldown { return .none }
            if let failure = state.failure, now - failure.at < policy.failureCacheDuration { return .none }
            guard let flight = startFetch(source, state: &state, in: &states, now: now) else { return .none }
            return .wait(flight)
        }
        switch decision {
        case .newer(let set):
            return set
        case .none:
            metrics.refreshSkipped(source).increment()
            logger.debug("refetch not attempted (cooldown)", metadata: ["source": "\(source)", "reason": "\(reason)"])
            return nil
        case .wait(let flight):
            logger.info("refetching keys", metadata: ["source": "\(source)", "reason": "\(reason)"])
            guard case .success(let set) = await flight.value, set.generation > seen.generation else { return nil }
            return set
        }
    }

    /// Runs `attempt` with the keys of `source`; when it fails with one of `retryingOn` (an
    /// unknown `kid`, a signature that does not verify: the issuer may have rotated its keys), asks
    /// for newer keys (``refreshed(_:after:reason:)``, rate-limited) and runs it once more with
    /// them. Throws ``RemoteVerificationError/keys(_:)`` when no keys can be had, else
    /// `attempt`'s `TokenError` as ``RemoteVerificationError/token(_:)``.
    public func withKeys<T>(
        for source: KeySource, retryingOn codes: Set<TokenError.Code>, _ attempt: (RemoteKeySet) throws(TokenError) -> T
    ) async throws(RemoteVerificationError) -> T {
        let keys: RemoteKeySet
        do throws(KeySourceError) { keys = try await self.keys(for: source) } catch { throw .keys(error) }
        // (A typed `do throws(TokenError)` with a `catch where` in an async function crashes the
        // Swift 6.3.1 SIL ownership verifier; Result says the same.)
        let first = Result { () throws(TokenError) in try attempt(keys) }
        guard case .failure(let error) = first, codes.contains(error.code) else { return try first.getRemote() }
        guard let newer = await refreshed(source, after: keys, reason: error.code.rawValue) else { throw .token(error) }
        return try Result { () throws(TokenError) in try attempt(newer) }.getRemote()
    }

    /// The keys held for `source` right now (fresh or not), without fetching.
    public func cachedKeys(for source: KeySource) -> RemoteKeySet? {
        states.withLock { $0[source]?.current }
    }

    /// Starts the one fetch for `source`, unless ``KeyStorePolicy/maximumConcurrentFetches`` run
    /// (nil); makes room for a source not yet remembered. Called with the lock held.
    private func startFetch(_ source: KeySource, state: inout SourceState, in states: inout [KeySource: SourceState], now: Double) -> Flight? {
        guard fetching.load(ordering: .relaxed) < max(1, policy.maximumConcurrentFetches) else { return nil }
        if states[source] == nil, states.count >= max(1, policy.maximumSources) { forget(from: &states) }
        fetching.add(1, ordering: .relaxed)
        state.lastFetchStarted = now
        metrics.fetches(source).increment()
        let flight = Flight { [self] in
            let outcome: Result<(keys: [JWTKey], skipped: [String], document: HTTPKeyFetcher.Document), KeySourceError>
            do throws(KeySourceError) {
                outcome = .success(try await fetcher.fetchKeys(source))
            } catch {
                outcome = .failure(error)
            }
            let done = clock.now
            let result: Result<RemoteKeySet, KeySourceError> = self.states.withLock { states in
                fetching.subtract(1, ordering: .relaxed)
                var state = states[source] ?? SourceState()
                defer { states[source] = state }
                state.flight = nil
                switch outcome {
                case .success(let fetched):
                    state.generation += 1
                    state.failure = nil
                    let set = RemoteKeySet(
                        source: source, keys: fetched.keys, skipped: fetched.skipped, fetchedAt: done,
                        expiresAt: done + policy.ttl(fetched.document), generation: state.generation)
                    state.current = set
                    return .success(set)
                case .failure(let error):
                    state.failure = (done, error)
                    return .failure(error)
                }
            }
            switch result {
            case .success(let set):
                logger.debug("fetched keys", metadata: ["source": "\(source)", "keys": "\(set.keys.count)", "ttl": "\(Int(set.expiresAt - set.fetchedAt))"])
            case .failure(let error):
                metrics.failures(source).increment()
                logger.error("key fetch failed", metadata: ["source": "\(source)", "code": "\(error.code)", "error": "\(error.message)"])
            }
            return result
        }
        state.flight = flight
        return flight
    }

    /// Forgets sources with no fetch running — those that only failed first, then those fetched
    /// longest ago — until a tenth of ``KeyStorePolicy/maximumSources`` is free (so the sort runs
    /// once per that many new sources). Called with the lock held.
    private func forget(from states: inout [KeySource: SourceState]) {
        let bound = max(1, policy.maximumSources)
        let keep = bound - max(1, bound / 10)
        let idle = states.filter { $0.value.flight == nil }
            .sorted { ($0.value.current == nil ? 0 : 1, $0.value.lastFetchStarted) < ($1.value.current == nil ? 0 : 1, $1.value.lastFetchStarted) }
        for (source, _) in idle.prefix(max(0, states.count - keep)) { states[source] = nil }
    }
}

/// The store's counters, one set per source kind.
private struct StoreMetrics: Sendable {
    let factory: any MetricsFactory
    private let counters: [String: [String: Counter]]

    init(factory: any MetricsFactory) {
        self.factory = factory
        var counters: [String: [String: Counter]] = [:]
        for name in ["fetches", "fetch_failures", "cache_hits", "cache_misses", "stale_serves", "refresh_skipped"] {
            for kind in ["pda", "jwks", "oidc"] {
                counters[name, default: [:]][kind] = Counter(label: "pdakeys_\(name)_total", dimensions: [("source", kind)], factory: factory)
            }
        }
        self.counters = counters
    }

    private func counter(_ name: String, _ source: KeySource) -> Counter {
        // Every (name, kind) pair is created in init.
        counters[name]?[source.kind] ?? Counter(label: "pdakeys_\(name)_total", dimensions: [("source", source.kind)], factory: factory)
    }

    func fetches(_ source: KeySource) -> Counter { counter("fetches", source) }
    func failures(_ source: KeySource) -> Counter { counter("fetch_failures", source) }
    func hits(_ source: KeySource) -> Counter { counter("cache_hits", source) }
    func misses(_ source: KeySource) -> Counter { counter("cache_misses", source) }
    func staleServes(_ source: KeySource) -> Counter { counter("stale_serves", source) }
    func refreshSkipped(_ source: KeySource) -> Counter { counter("refresh_skipped", source) }
}
