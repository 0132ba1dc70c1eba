import Foundation
@testable import PDAKeys
import Synchronization
import TestSupport
import TokenKit

/// A clock the tests move by hand.
final class ManualClock: Sendable {
    private let seconds: Mutex<Double>
    init(_ start: Double = 1_800_000_000) { seconds = Mutex(start) }
    var now: Double { seconds.withLock { $0 } }
    func advance(_ delta: Double) { seconds.withLock { $0 += delta } }
    var verificationClock: VerificationClock { VerificationClock { [self] in now } }
}

/// A fetcher trusting the test CA, sending `*.hubat.net` and friends to loopback.
func testFetcher(_ server: KeyServer, _ configure: (inout KeyFetchConfiguration) -> Void = { _ in }) throws -> HTTPKeyFetcher {
    var configuration = KeyFetchConfiguration()
    configuration.trustRoots = .pemFile(try TestPKI.shared.get().caFile)
    configuration.pdaPort = server.port
    configuration.hostOverrides = [
        "alice.hubat.net": "127.0.0.1", "bob.hubofallthings.net": "127.0.0.1", "idp.test": "127.0.0.1", "mallory.hubat.net": "127.0.0.1",
    ]
    configuration.totalTimeout = .seconds(5)
    configure(&configuration)
    return try HTTPKeyFetcher(configuration: configuration)
}

/// Runs `body` with a started server and a fetcher/store around it, and stops them after.
func withServer<T>(
    plain: Bool = false, routes: [String: Route], clock: ManualClock = ManualClock(), policy: KeyStorePolicy = KeyStorePolicy(),
    configure: (inout KeyFetchConfiguration) -> Void = { _ in },
    _ body: (KeyServer, RemoteKeyStore) async throws -> T
) async throws -> T {
    let server = try KeyServer(plain: plain, routes: routes)
    defer { server.stop() }
    let fetcher = try testFetcher(server, configure)
    let store = RemoteKeyStore(fetcher: fetcher, policy: policy, clock: clock.verificationClock)
    do {
        let result = try await body(server, store)
        await fetcher.shutdown()
        return result
    } catch {
        await fetcher.shutdown()
        throw error
    }
}

/// The error `body` throws, or nil.
func thrown(_ body: () async throws -> Void) async -> (any Error)? {
    do { try await body() } catch { return error }
    return nil
}

func sourceCode(_ error: (any Error)?) -> String? {
    switch error {
    case let error as KeySourceError: error.code.rawValue
    case let error as TokenError: error.code.rawValue
    case let error as RemoteVerificationError: error.code
    default: nil
    }
}
