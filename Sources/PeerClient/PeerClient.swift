import AsyncHTTPClient
import Foundation
public import NIOCore
import NIOHTTP1
import NIOSSL
public import PeerCA
import Synchronization
import TokenKit
import X509

/// The device's half of tokentool: enrolls with the service (`POST /v1/certificates`, a token
/// from the app's own login), keeps the certificate renewed over mutual TLS
/// (`POST /v1/certificates/renew`), follows the CA's revocation list (`GET /v1/crl`), and gives
/// the app mutual TLS with its peers that picks up each new certificate and list for new
/// connections, without a restart.
///
/// ```swift
/// let client = try PeerClient(
///     configuration: PeerClientConfiguration(serviceURL: "https://127.0.0.1:8443", trustRootsPEM: rootPEM,
///                                            provider: "dev", stateDirectory: "device-state"),
///     tokenProvider: { try await myApp.signIn() })
/// _ = try await client.start()                 // the certificate on disk, or a new enrollment
/// Task { for await event in client.events() { print(event) } }
/// Task { await client.run() }                  // renewals, retries, revocation lists; until cancelled
/// // in a NIO channel initializer, before the app's handlers:
/// try client.addServerHandlers(to: channel.pipeline.syncOperations) { peer in print(peer.spiffeID) }
/// ```
///
/// Keys are made on the device (P-256 unless ``PeerClientConfiguration/keyAlgorithm`` says
/// otherwise), a new one for each enrollment and renewal, and never leave it; the state directory
/// holds them with mode 0600 and is replaced atomically (see the "A device's life" article).
public actor PeerClient {
    public nonisolated let configuration: PeerClientConfiguration
    private let tokenProvider: @Sendable () async throws -> String
    private let store: CredentialStore
    private nonisolated let roots: [Certificate]
    private nonisolated let rootsTLS: [NIOSSLCertificate]
    private let base: String
    private nonisolated let shared = Shared()

    private var stored: StoredCredential?
    private var revocations: RevocationList?
    /// Why a new token is needed, once the client knows it is.
    private var enrollmentReason: String?
    private var nextRenewal = Date.distantPast
    private var nextRevocationRefresh = Date.distantPast
    private var nextEnrollment = Date.distantPast
    private var warnedExpiring = false
    private var failures = (enrollment: 0, renewal: 0, revocations: 0)

    /// A client for `configuration`; `tokenProvider` is asked for a new token at each enrollment
    /// (the first, and after ``PeerClientEvent/authenticationRequired(reason:)``). Nothing is
    /// fetched or written but the state directory until ``start()`` or ``run()``.
    ///
    /// Refused (``PeerClientError/Code/configuration``): a URL that is not `http(s)://`, roots
    /// that are not PEM certificates; (``PeerClientError/Code/storage``) a state directory that
    /// cannot be made.
    public init(configuration: PeerClientConfiguration, tokenProvider: @escaping @Sendable () async throws -> String) throws(PeerClientError) {
        guard let url = URL(string: configuration.serviceURL), ["http", "https"].contains(url.scheme ?? ""), url.host != nil else {
            throw PeerClientError(.configuration, "the service URL \(configuration.serviceURL) is not an http(s):// URL")
        }
        do { roots = try DeviceCSR.certificates(pem: configuration.trustRootsPEM) } catch {
            throw PeerClientError(.configuration, "the trust roots are not PEM certificates")
        }
        guard !roots.isEmpty else { throw PeerClientError(.configuration, "no certificate in the trust roots") }
        do { rootsTLS = try roots.map { try NIOSSLCertificate(bytes: $0.derBytes, format: .der) } } catch {
            throw PeerClientError(.configuration, "a trust root cannot be used by TLS")
        }
        self.configuration = configuration
        self.tokenProvider = tokenProvider
        self.store = try CredentialStore(directory: configuration.stateDirectory)
        var base = configuration.serviceURL
        while base.hasSuffix("/") { base.removeLast() }
        self.base = base
    }

    // MARK: - What the app reads

    /// The certificate in use, if any.
    public nonisolated var credential: PeerCredential? { shared.state.withLock { $0.credential } }

    /// The mutual-TLS material of the certificate in use: its NIOSSL server and client
    /// configurations, its `verifier` with the latest revocation list. A renewal makes a
    /// new one; ``addServerHandlers(to:onPeer:)`` and ``addClientHandlers(to:onPeer:)`` always
    /// take the one current when the connection starts.
    public nonisolated var tls: PeerTLS? { shared.state.withLock { $0.tls } }

    /// A new subscription to the client's events, from now on (each subscriber gets every event;
    /// the newest 256 are kept for a subscriber that does not keep up).
    public nonisolated func events() -> AsyncStream<PeerClientEvent> { shared.subscribe() }

    /// Adds to an accepted connection's pipeline mutual TLS with the current certificate, verifying
    /// the peer (chain to the roots, trust domain, EKU, revocation list); `onPeer` receives its
    /// identity. Add the app's handlers after.
    public nonisolated func addServerHandlers(
        to pipeline: ChannelPipeline.SynchronousOperations, onPeer: @escaping @Sendable (PeerCertificateIdentity) -> Void = { _ in }
    ) throws(PeerClientError) {
        guard let tls else { throw PeerClientError(.notEnrolled, "the device has no certificate yet") }
        do { try tls.addServerHandlers(to: pipeline, onPeer: onPeer) } catch { throw PeerClientError(.configuration, error.message) }
    }

    /// The connecting side of ``addServerHandlers(to:onPeer:)``.
    public nonisolated func addClientHandlers(
        to pipeline: ChannelPipeline.SynchronousOperations, onPeer: @escaping @Sendable (PeerCertificateIdentity) -> Void = { _ in }
    ) throws(PeerClientError) {
        guard let tls else { throw PeerClientError(.notEnrolled, "the device has no certificate yet") }
        do { try tls.addClientHandlers(to: pipeline, onPeer: onPeer) } catch { throw PeerClientError(.configuration, error.message) }
    }

    // MARK: - Operations

    /// Uses the certificate in the state directory when it is still valid (and not on the stored
    /// revocation list); otherwise enrolls. Tries once: ``run()`` retries.
    public func start() async throws(PeerClientError) -> PeerCredential {
        if stored == nil, let found = try store.load() {
            if let der = store.loadRevocationList(), let issuer = found.issuerCertificate(roots: roots),
                let list = try? RevocationList(der, issuer: issuer), list.notCurrent(at: Date()) == nil
            {
                revocations = list
            }
            if found.notAfter > Date(), revocations?.isRevoked(found.leaf.serialNumber) != true {
                return adopt(found)
            }
        }
        if let stored, stored.notAfter > Date(), enrollmentReason == nil { return Self.credential(stored, store: store) }
        return try await enroll()
    }

    /// Enrolls now with a new token from the token provider and a new key, whatever the current
    /// certificate: `enrolled` is published.
    @discardableResult
    public func enroll() async throws(PeerClientError) -> PeerCredential {
        let token: String
        do { token = try await tokenProvider() } catch {
            throw PeerClientError(.tokenProvider, "the token provider failed: \(type(of: error))")
        }
        let (keyPEM, csr) = try newKey()
        var body: [String: JSONValue] = ["provider": .string(configuration.provider), "token": .string(token), "csr": .string(csr)]
        if let validity = configuration.validitySeconds { body["validitySeconds"] = .integer(validity) }
        let reply = try await post("/v1/certificates", body, presenting: nil)
        let credential = try await accept(reply, keyPEM: keyPEM, sameIdentityAs: nil)
        enrollmentReason = nil
        shared.publish(.enrolled(credential))
        return credential
    }

    /// Renews now over mutual TLS with the current certificate and a new key: `renewed` is
    /// published. A refusal (``PeerClientError/Code/refused``: the sessions were ended, the
    /// session's maximum age, a revoked certificate) means a new token is needed.
    @discardableResult
    public func renew() async throws(PeerClientError) -> PeerCredential {
        guard let current = stored else { throw PeerClientError(.notEnrolled, "the device has no certificate to renew") }
        let (keyPEM, csr) = try newKey()
        var body: [String: JSONValue] = ["csr": .string(csr)]
        if let validity = configuration.validitySeconds { body["validitySeconds"] = .integer(validity) }
        let reply = try await post("/v1/certificates/renew", body, presenting: current)
        let credential = try await accept(reply, keyPEM: keyPEM, sameIdentityAs: current.spiffeID)
        shared.publish(.renewed(credential))
        return credential
    }

    /// Fetches the CA's revocation list now and puts it in force for new handshakes with peers
    /// (and for resumed sessions). When the device's own certificate is on it, `revoked` and
    /// `authenticationRequired` are published.
    @discardableResult
    public func refreshRevocations() async throws(PeerClientError) -> RevocationList {
        let der = try await get("/v1/crl")
        guard let issuer = stored?.issuerCertificate(roots: roots) ?? roots.first else {
            throw PeerClientError(.configuration, "no CA certificate to check the revocation list with")
        }
        let list: RevocationList
        do { list = try RevocationList(der, issuer: issuer) } catch {
            throw PeerClientError(.invalidReply, "the revocation list does not verify: \(error.message)")
        }
        if let tls {
            do { try tls.updateRevocations(list) } catch { throw PeerClientError(.invalidReply, "the revocation list cannot be used: \(error.message)") }
        }
        revocations = list
        try store.saveRevocationList(der)
        shared.publish(.revocationListUpdated(number: list.number))
        if let stored, list.isRevoked(stored.leaf.serialNumber), enrollmentReason == nil {
            shared.publish(.revoked(serial: stored.serial))
            needNewToken("the certificate \(stored.serial) was revoked")
        }
        return list
    }

    /// Keeps the device's certificate usable until the task is cancelled: enrolls when there is
    /// none, renews at `renewAfter` (with jitter), asks for a new token when a renewal is refused
    /// or the certificate expired or was revoked, retries with capped exponential backoff when
    /// the service cannot be reached, publishes `expiringSoon`, and fetches the revocation list
    /// every ``PeerClientConfiguration/revocationRefreshInterval``.
    public func run() async {
        if stored == nil, let found = try? store.load(), found.notAfter > Date() { adopt(found) }
        while !Task.isCancelled {
            let now = Date()
            if let stored, stored.notAfter <= now, enrollmentReason == nil { needNewToken("the certificate \(stored.serial) expired") }
            if stored == nil || enrollmentReason != nil {
                if now >= nextEnrollment {
                    do { try await enroll() } catch {
                        failures.enrollment += 1
                        nextEnrollment = Date().addingTimeInterval(backoff(failures.enrollment))
                        shared.publish(.failed(error))
                        continue
                    }
                    failures.enrollment = 0
                    continue
                }
                await sleep(until: nextEnrollment)
                continue
            }
            guard let stored else { continue }
            let threshold = configuration.expiringSoonThreshold ?? max(0, stored.notAfter.timeIntervalSince(stored.renewAfter)) / 2
            if !warnedExpiring, now >= stored.notAfter.addingTimeInterval(-threshold) {
                warnedExpiring = true
                shared.publish(.expiringSoon(secondsRemaining: max(0, Int(stored.notAfter.timeIntervalSince(now)))))
            }
            if now >= nextRenewal {
                do { try await renew() } catch {
                    shared.publish(.failed(error))
                    if error.code == .refused {
                        needNewToken("the renewal was refused: \(error.serviceCode ?? "HTTP \(error.status ?? 0)")")
                    } else {
                        failures.renewal += 1
                        nextRenewal = min(Date().addingTimeInterval(backoff(failures.renewal)), stored.notAfter)
                    }
                    continue
                }
                failures.renewal = 0
                continue
            }
            if now >= nextRevocationRefresh {
                do {
                    let list = try await refreshRevocations()
                    failures.revocations = 0
                    var next = Date().addingTimeInterval(configuration.revocationRefreshInterval)
                    if let nextUpdate = list.nextUpdate { next = min(next, max(Date().addingTimeInterval(1), nextUpdate.addingTimeInterval(-60))) }
                    nextRevocationRefresh = next
                } catch {
                    failures.revocations += 1
                    nextRevocationRefresh = Date().addingTimeInterval(min(configuration.revocationRefreshInterval, backoff(failures.revocations)))
                    shared.publish(.failed(error))
                }
                continue
            }
            var wake = min(nextRenewal, nextRevocationRefresh, stored.notAfter)
            if !warnedExpiring { wake = min(wake, stored.notAfter.addingTimeInterval(-threshold)) }
            await sleep(until: wake)
        }
    }

    /// What the state directory holds, read without the service: the certificate, and whether the
    /// stored revocation list lists it (when the list verifies with the leaf's issuer: the next
    /// certificate in the chain, else the root in `trustRootsPEM` that issued it).
    public static func stored(in directory: String, trustRootsPEM: String? = nil) throws(PeerClientError) -> (credential: PeerCredential, revoked: Bool)? {
        let store = try CredentialStore(directory: directory)
        guard let found = try store.load() else { return nil }
        let roots = trustRootsPEM.flatMap { try? DeviceCSR.certificates(pem: $0) } ?? []
        var revoked = false
        if let der = store.loadRevocationList(), let issuer = found.issuerCertificate(roots: roots),
            let list = try? RevocationList(der, issuer: issuer)
        {
            revoked = list.isRevoked(found.leaf.serialNumber)
        }
        return (Self.credential(found, store: store), revoked)
    }

    // MARK: - Internals

    private func needNewToken(_ reason: String) {
        enrollmentReason = reason
        nextEnrollment = .distantPast
        shared.publish(.authenticationRequired(reason: reason))
    }

    private func newKey() throws(PeerClientError) -> (keyPEM: String, csr: String) {
        do {
            let key = try configuration.keyAlgorithm.generate()
            return (try DeviceCSR.keyPEM(key), try DeviceCSR.make(key: key))
        } catch { throw PeerClientError(.configuration, "cannot make a key and CSR: \(error.message)") }
    }

    /// The service's certificate reply, checked (a chain to the roots, for the new key, the same
    /// identity on renewal), stored, and put in use.
    private func accept(_ reply: [UInt8], keyPEM: String, sameIdentityAs expected: String?) async throws(PeerClientError) -> PeerCredential {
        guard let object = (try? JSONValue.parse(reply))?.objectValue, let chainPEM = object["certificate"]?.stringValue else {
            throw PeerClientError(.invalidReply, "the service's answer has no \"certificate\"")
        }
        let found = try StoredCredential(keyPEM: keyPEM, chainPEM: chainPEM, renewAfter: object["renewAfter"]?.stringValue.flatMap(ISO8601.parse))
        do { _ = try await PeerVerifier(roots: roots).verify(chain: found.chain, role: .client) } catch {
            throw PeerClientError(.invalidReply, "the issued certificate does not verify to the trust roots: \(error.message)")
        }
        if let expected, found.spiffeID != expected {
            throw PeerClientError(.invalidReply, "the renewed certificate is for \(found.spiffeID), not \(expected)")
        }
        try store.save(found)
        return adopt(found)
    }

    /// Makes `found` the certificate in use: a new TLS context (with the latest revocation list
    /// of its issuer), the next renewal time with jitter.
    @discardableResult
    private func adopt(_ found: StoredCredential) -> PeerCredential {
        stored = found
        warnedExpiring = false
        failures.renewal = 0
        let left = max(0, found.notAfter.timeIntervalSince(found.renewAfter))
        nextRenewal = found.renewAfter.addingTimeInterval(Double.random(in: 0...max(0, min(configuration.renewalJitter, 1))) * left)
        let trustDomain = configuration.trustDomain ?? Self.trustDomain(of: found.spiffeID)
        let issuer = found.issuerCertificate(roots: roots)
        let list = revocations.flatMap { list in issuer.flatMap { list.issuer == $0.subject ? list : nil } }
        let tls = try? PeerTLS(
            certificateChainPEM: found.chainPEM, privateKeyPEM: found.keyPEM, verifier: PeerVerifier(roots: roots, trustDomain: trustDomain, revocations: list))
        let credential = Self.credential(found, store: store)
        shared.state.withLock {
            $0.credential = credential
            if let tls { $0.tls = tls }
        }
        return credential
    }

    private static func credential(_ found: StoredCredential, store: CredentialStore) -> PeerCredential {
        PeerCredential(
            spiffeID: found.spiffeID, serial: found.serial, notAfter: found.notAfter, renewAfter: found.renewAfter, chainPEM: found.chainPEM,
            keyPath: store.path("key.pem"), chainPath: store.path("chain.pem"))
    }

    /// `spiffe://<trust domain>/<path>` → the trust domain.
    static func trustDomain(of spiffeID: String) -> String? {
        guard spiffeID.hasPrefix("spiffe://") else { return nil }
        return spiffeID.dropFirst("spiffe://".count).split(separator: "/", maxSplits: 1).first.map(String.init)
    }

    /// The wait before attempt `failures + 1`: doubling from the initial delay up to the maximum,
    /// drawn from the upper half.
    private func backoff(_ failures: Int) -> TimeInterval {
        let delay = min(configuration.maximumRetryDelay, configuration.initialRetryDelay * pow(2, Double(max(0, failures - 1))))
        return Double.random(in: (delay / 2)...max(delay / 2, delay))
    }

    private func sleep(until date: Date) async {
        let seconds = date.timeIntervalSinceNow
        guard seconds > 0 else { return }
        try? await Task.sleep(for: .milliseconds(Int64(min(seconds, 86_400) * 1000) + 1))
    }

    // MARK: - HTTP

    private func tlsConfiguration(presenting credential: StoredCredential?) throws(PeerClientError) -> TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = .tlsv12
        tls.trustRoots = .certificates(rootsTLS)
        if let credential {
            do {
                tls.certificateChain = try NIOSSLCertificate.fromPEMBytes(Array(credential.chainPEM.utf8)).map { .certificate($0) }
                tls.privateKey = .privateKey(try NIOSSLPrivateKey(bytes: Array(credential.keyPEM.utf8), format: .pem))
            } catch { throw PeerClientError(.storage, "the device's key or certificate cannot be used for TLS") }
        }
        return tls
    }

    private func post(_ path: String, _ body: [String: JSONValue], presenting credential: StoredCredential?) async throws(PeerClientError) -> [UInt8] {
        var request = HTTPClientRequest(url: base + path)
        request.method = .POST
        request.headers.add(name: "content-type", value: "application/json")
        request.body = .bytes(ByteBuffer(string: JSONValue.object(body).compactText))
        return try await send(request, presenting: credential)
    }

    private func get(_ path: String) async throws(PeerClientError) -> [UInt8] {
        try await send(HTTPClientRequest(url: base + path), presenting: nil)
    }

    private func send(_ request: HTTPClientRequest, presenting credential: StoredCredential?) async throws(PeerClientError) -> [UInt8] {
        var request = request
        if request.url.hasPrefix("https://") { request.tlsConfiguration = try tlsConfiguration(presenting: credential) }
        let status: Int, bytes: [UInt8]
        do {
            let response = try await peerClientHTTP.execute(request, timeout: TimeAmount.milliseconds(Int64(configuration.requestTimeout * 1000)))
            status = Int(response.status.code)
            bytes = Array(try await response.body.collect(upTo: 1 << 22).readableBytesView)
        } catch {
            throw PeerClientError(.unreachable, "\(request.method.rawValue) \(request.url) failed: \(Self.describe(error))")
        }
        guard status == 200 else {
            let failure = (try? JSONValue.parse(bytes))?.objectValue?["error"]?.objectValue
            let code = failure?["code"]?.stringValue, message = failure?["message"]?.stringValue ?? "no reason given"
            if (400..<500).contains(status), status != 408, status != 429 {
                throw PeerClientError(.refused, "\(request.url) refused the request: \(message)", status: status, serviceCode: code)
            }
            throw PeerClientError(.unreachable, "\(request.url) answered \(status): \(message)", status: status, serviceCode: code)
        }
        return bytes
    }

    /// An HTTP client error in words: NIOSSL's and NIO's errors name the TLS alert or the errno.
    private static func describe(_ error: any Error) -> String {
        if let error = error as? HTTPClientError { return error.description }
        return String(describing: error)
    }

    /// What the nonisolated members read and the event subscribers, shared with the actor.
    final class Shared: Sendable {
        struct State {
            var credential: PeerCredential?
            var tls: PeerTLS?
        }
        let state = Mutex(State())
        private let subscribers = Mutex<(next: Int, all: [Int: AsyncStream<PeerClientEvent>.Continuation])>((0, [:]))

        func subscribe() -> AsyncStream<PeerClientEvent> {
            let (stream, continuation) = AsyncStream<PeerClientEvent>.makeStream(bufferingPolicy: .bufferingNewest(256))
            let id = subscribers.withLock { subscribers in
                subscribers.next += 1
                subscribers.all[subscribers.next] = continuation
                return subscribers.next
            }
            continuation.onTermination = { [weak self] _ in _ = self?.subscribers.withLock { $0.all.removeValue(forKey: id) } }
            return stream
        }

        func publish(_ event: PeerClientEvent) {
            for continuation in subscribers.withLock({ Array($0.all.values) }) { continuation.yield(event) }
        }

        deinit {
            for continuation in subscribers.withLock({ Array($0.all.values) }) { continuation.finish() }
        }
    }
}

/// The clients' HTTP client, for the life of the process (like AsyncHTTPClient's `shared`, but
/// never following a redirect: a token or CSR is sent only where the configuration says).
private let peerClientHTTP: HTTPClient = {
    var configuration = HTTPClient.Configuration()
    configuration.redirectConfiguration = .disallow
    configuration.timeout = HTTPClient.Configuration.Timeout(connect: .seconds(10), read: .seconds(60))
    configuration.connectionPool = HTTPClient.Configuration.ConnectionPool(idleTimeout: .seconds(30))
    return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
}()
