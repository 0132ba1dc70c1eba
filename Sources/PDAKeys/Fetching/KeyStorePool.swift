public import Logging
import Synchronization
public import TokenKit

/// Key stores shared by many verifiers: one ``RemoteKeyStore`` (with its ``HTTPKeyFetcher``) per
/// distinct ``KeyFetchConfiguration``, so providers that fetch the same way share connections and
/// cached keys. Shut it down when done; that closes every fetcher it made.
///
/// ```swift
/// let pool = KeyStorePool(logger: logger)
/// let store = try pool.store(for: KeyFetchConfiguration())
/// let verifier = try TokenVerifierDescription(keys: .pda(applications: ["my-app"])).makeVerifier(store: store)
/// // …
/// await pool.shutdown()
/// ```
public final class KeyStorePool: Sendable {
    private let clock: VerificationClock
    private let logger: Logger
    private let stores = Mutex<[KeyFetchConfiguration: RemoteKeyStore]>([:])

    public init(clock: VerificationClock = .system, logger: Logger = Logger(label: "tokentool.pdakeys")) {
        self.clock = clock
        self.logger = logger
    }

    /// The store for `configuration`, made on first use.
    public func store(for configuration: KeyFetchConfiguration) throws(KeySourceError) -> RemoteKeyStore {
        try stores.withLock { stores throws(KeySourceError) in
            if let existing = stores[configuration] { return existing }
            let store = RemoteKeyStore(fetcher: try HTTPKeyFetcher(configuration: configuration), clock: clock, logger: logger)
            stores[configuration] = store
            return store
        }
    }

    /// Shuts down every fetcher the pool made.
    public func shutdown() async {
        let all = stores.withLock { stores in
            defer { stores.removeAll() }
            return Array(stores.values)
        }
        for store in all { await store.fetcher.shutdown() }
    }
}
