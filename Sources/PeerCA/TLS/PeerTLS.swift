public import NIOCore
public import NIOSSL
import NIOTLS
import Synchronization
import X509

/// Mutual TLS between devices holding peer certificates: builds swift-nio-ssl handlers from a
/// device's key and certificate chain, presenting them and verifying the other side with a
/// ``PeerVerifier`` (chain to the CA roots, trust domain, EKU, revocation) instead of
/// host-name checks — peers are named by SPIFFE IDs, not DNS names.
///
/// ```swift
/// let tls = try PeerTLS(certificateChainPEM: issued.chainPEM, privateKeyPEM: deviceKeyPEM,
///                       verifier: PeerVerifier(roots: [root], trustDomain: "app-1234"))
/// // in a channel initializer, before the application's handlers:
/// try tls.addServerHandlers(to: channel.pipeline.syncOperations) { peer in print(peer.spiffeID) }
/// // before the CRL's nextUpdate, with the CA's latest (GET /v1/crl):
/// try tls.updateRevocations(try RevocationList(crlDER, issuer: caIssuerCertificate))
/// ```
///
/// Copies of a `PeerTLS` share its current verifier: a CRL given to one is the CRL every handler
/// made from any of them checks from then on.
public struct PeerTLS: Sendable {
    /// The verifier handshakes use now: the one given at creation, with the CRL of the latest
    /// ``updateRevocations(_:)``.
    public var verifier: PeerVerifier { current.value.withLock { $0 } }
    private let current: Current
    private let serverContext: NIOSSLContext
    private let clientContext: NIOSSLContext

    /// The TLS configuration the server side uses (TLS 1.2+, client certificate required).
    public let serverConfiguration: TLSConfiguration
    /// The TLS configuration the client side uses (TLS 1.2+, presents the certificate).
    public let clientConfiguration: TLSConfiguration

    public init(certificateChainPEM: String, privateKeyPEM: String, verifier: PeerVerifier) throws(PeerCAError) {
        let chain: [NIOSSLCertificate]
        let key: NIOSSLPrivateKey
        do { chain = try NIOSSLCertificate.fromPEMBytes(Array(certificateChainPEM.utf8)) } catch {
            throw PeerCAError(.invalidCAMaterial, "the device certificate chain is not PEM")
        }
        guard !chain.isEmpty else { throw PeerCAError(.invalidCAMaterial, "the device certificate chain is empty") }
        do { key = try NIOSSLPrivateKey(bytes: Array(privateKeyPEM.utf8), format: .pem) } catch {
            throw PeerCAError(.invalidCAMaterial, "the device key is not a PEM private key")
        }
        let roots: [NIOSSLCertificate]
        do { roots = try verifier.roots.map { try NIOSSLCertificate(bytes: $0.derBytes, format: .der) } } catch {
            throw PeerCAError(.invalidCAMaterial, "a CA root cannot be used by TLS")
        }
        var server = TLSConfiguration.makeServerConfigurationWithMTLS(
            certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key), trustRoots: .certificates(roots))
        server.minimumTLSVersion = .tlsv12
        server.verifySignatureAlgorithms = PeerTLS.signatureAlgorithms
        var client = TLSConfiguration.makeClientConfiguration()
        client.certificateChain = chain.map { .certificate($0) }
        client.privateKey = .privateKey(key)
        client.trustRoots = .certificates(roots)
        client.certificateVerification = .noHostnameVerification
        client.minimumTLSVersion = .tlsv12
        client.verifySignatureAlgorithms = PeerTLS.signatureAlgorithms
        do {
            serverContext = try NIOSSLContext(configuration: server)
            clientContext = try NIOSSLContext(configuration: client)
        } catch {
            throw PeerCAError(.invalidCAMaterial, "the device key and certificate cannot be used for TLS (\(error))")
        }
        self.serverConfiguration = server
        self.clientConfiguration = client
        self.current = Current(verifier)
    }

    /// The verifier the handshakes of every copy read, replaced as a whole, and the CA
    /// certificates full handshakes presented after the leaf (DER, the latest
    /// ``PeerVerifier/maxIntermediates``): a resumed session hands over only its leaf.
    final class Current: Sendable {
        let value: Mutex<PeerVerifier>
        let intermediates = Mutex<[[UInt8]]>([])
        init(_ verifier: PeerVerifier) { value = Mutex(verifier) }

        func remember(intermediates presented: ArraySlice<[UInt8]>) {
            intermediates.withLock { known in
                for der in presented where !known.contains(der) { known.append(der) }
                if known.count > PeerVerifier.maxIntermediates { known.removeFirst(known.count - PeerVerifier.maxIntermediates) }
            }
        }
    }

    /// Makes `list` the CRL that every handshake from now on checks, in handlers already made and
    /// handlers made later, without building the TLS contexts or the servers again. A verifier
    /// refuses every leaf of a CA whose CRL is past its nextUpdate, so a long-running device gives
    /// the CA's latest CRL (`GET /v1/crl`, a new one at least every half validity) before then.
    ///
    /// Refused, leaving the current CRL in place (``PeerCAError/Code/invalidCAMaterial``): a list
    /// from another issuer than the current one's, and a list older than the current one — an
    /// earlier thisUpdate, or a lower CRL number — since an old CRL, replayed from before a
    /// revocation, would hide it. The same list again is accepted.
    ///
    /// Connections already open are not checked again; a TLS session a peer resumes later is
    /// (see ``addServerHandlers(to:onPeer:)``).
    public func updateRevocations(_ list: RevocationList) throws(PeerCAError) {
        try current.value.withLock { verifier throws(PeerCAError) in
            if let present = verifier.revocations {
                guard list.issuer == present.issuer else {
                    throw PeerCAError(.invalidCAMaterial, "the CRL is from \(list.issuer), not from \(present.issuer) as the current one")
                }
                var older = list.thisUpdate < present.thisUpdate
                if let number = list.number, let presentNumber = present.number, number < presentNumber { older = true }
                guard !older else {
                    throw PeerCAError(
                        .invalidCAMaterial,
                        "the CRL is older than the current one (thisUpdate \(list.thisUpdate), number \(list.number.map(String.init) ?? "none"); current \(present.thisUpdate), number \(present.number.map(String.init) ?? "none"))")
                }
            }
            verifier = PeerVerifier(roots: verifier.roots, trustDomain: verifier.trustDomain, revocations: list, clock: verifier.clock)
        }
    }

    /// Adds to a new connection's pipeline, on the accepting side, TLS that presents this device's
    /// certificate and verifies the device that connected (the handshake fails for any other),
    /// then a check of resumed sessions; `onPeer` receives the verified identity.
    ///
    /// A TLS session the peer resumes (a TLS 1.3 ticket, a TLS 1.2 session ID or ticket) completes
    /// without the certificate verification callback: the check added after TLS verifies the
    /// session's certificate again — chain, time and the current CRL — before any data passes
    /// either way, and closes the connection when it fails. Add the application's handlers after.
    public func addServerHandlers(
        to pipeline: ChannelPipeline.SynchronousOperations, onPeer: @escaping @Sendable (PeerCertificateIdentity) -> Void = { _ in }
    ) throws(PeerCAError) {
        let handshake = Handshake()
        let tls = NIOSSLServerHandler(context: serverContext, customVerificationCallback: callback(role: .client, handshake, onPeer))
        try add([tls, ResumedSessionCheck(current: current, role: .client, handshake: handshake, onPeer: onPeer)], to: pipeline)
    }

    /// Adds to a new connection's pipeline, on the connecting side, TLS that presents this
    /// device's certificate and verifies the device connected to, then the same check of resumed
    /// sessions as ``addServerHandlers(to:onPeer:)``; `onPeer` receives the verified identity.
    public func addClientHandlers(
        to pipeline: ChannelPipeline.SynchronousOperations, onPeer: @escaping @Sendable (PeerCertificateIdentity) -> Void = { _ in }
    ) throws(PeerCAError) {
        let handshake = Handshake()
        let tls: NIOSSLClientHandler
        do {
            tls = try NIOSSLClientHandler(context: clientContext, serverHostname: nil, customVerificationCallback: callback(role: .server, handshake, onPeer))
        } catch {
            throw PeerCAError(.invalidCAMaterial, "cannot create the TLS client handler (\(error))")
        }
        try add([tls, ResumedSessionCheck(current: current, role: .server, handshake: handshake, onPeer: onPeer)], to: pipeline)
    }

    private func add(_ handlers: [any ChannelHandler], to pipeline: ChannelPipeline.SynchronousOperations) throws(PeerCAError) {
        do { try pipeline.addHandlers(handlers) } catch { throw PeerCAError(.io, "cannot add the TLS handlers to the connection (\(error))") }
    }

    /// What peers may sign the handshake with: every key type the CA certifies. BoringSSL leaves
    /// Ed25519 out by default, which would make devices with Ed25519 keys unreachable.
    static let signatureAlgorithms: [SignatureAlgorithm] = [
        .ecdsaSecp256R1Sha256, .ecdsaSecp384R1Sha384, .ed25519, .rsaPssRsaeSha256, .rsaPssRsaeSha384, .rsaPssRsaeSha512,
        .rsaPkcs1Sha256, .rsaPkcs1Sha384, .rsaPkcs1Sha512,
    ]

    private func callback(
        role: PeerVerifier.Role, _ handshake: Handshake, _ onPeer: @escaping @Sendable (PeerCertificateIdentity) -> Void
    ) -> NIOSSLCustomVerificationCallback {
        let current = self.current
        return { certificates, promise in
            let der = certificates.compactMap { try? $0.toDERBytes() }
            let verifier = current.value.withLock { $0 }  // the CRL of the latest update, at each handshake
            Task {
                do {
                    let identity = try await verifier.verify(derChain: der, role: role)
                    current.remember(intermediates: der.dropFirst())
                    handshake.verified.store(true, ordering: .releasing)  // before the handshake can complete
                    onPeer(identity)
                    promise.succeed(.certificateVerified)
                } catch {
                    promise.succeed(.failed)
                }
            }
        }
    }
}

/// Whether a connection's TLS handshake called the verification callback (a full handshake) or
/// not (a resumed session).
final class Handshake: Sendable {
    let verified = Atomic<Bool>(false)
}

/// Sits after the TLS handler: holds every read and write until the handshake has completed and
/// the peer is known to be acceptable now. After a full handshake that is at once (the callback
/// verified the chain); after a resumed session, whose handshake skips the callback, the session's
/// certificate is verified again here with the current verifier (its CRL, the time now) and the
/// CA certificates that full handshakes presented. A peer that fails is disconnected before any
/// data passes.
final class ResumedSessionCheck: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private enum State { case handshaking, checking, open, refused }
    private var state = State.handshaking
    private var reads: [NIOAny] = []
    private var readCompleted = false
    private var writes: [(NIOAny, EventLoopPromise<Void>?)] = []
    private var flushed = false
    private let current: PeerTLS.Current
    private let role: PeerVerifier.Role
    private let handshake: Handshake
    private let onPeer: @Sendable (PeerCertificateIdentity) -> Void

    init(current: PeerTLS.Current, role: PeerVerifier.Role, handshake: Handshake, onPeer: @escaping @Sendable (PeerCertificateIdentity) -> Void) {
        self.current = current
        self.role = role
        self.handshake = handshake
        self.onPeer = onPeer
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard state == .handshaking, case TLSUserEvent.handshakeCompleted? = event as? TLSUserEvent else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        if handshake.verified.load(ordering: .acquiring) {
            open(context, event)
            return
        }
        // A resumed session: verify its certificate again before anything passes.
        state = .checking
        let leaf = (try? context.pipeline.syncOperations.handler(type: NIOSSLHandler.self).peerCertificate).flatMap { try? $0.toDERBytes() }
        let chain = leaf.map { [$0] + current.intermediates.withLock { $0 } }
        let verifier = current.value.withLock { $0 }
        let role = self.role
        let checked = context.eventLoop.makePromise(of: PeerCertificateIdentity?.self)
        Task {
            guard let chain else { return checked.succeed(nil) }
            checked.succeed(try? await verifier.verify(derChain: chain, role: role))
        }
        checked.futureResult.assumeIsolated().whenSuccess { identity in
            guard self.state == .checking else { return }
            if let identity {
                self.onPeer(identity)
                self.open(context, event)
            } else {
                self.refuse(context)
            }
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch state {
        case .open: context.fireChannelRead(data)
        case .handshaking, .checking: reads.append(data)
        case .refused: break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if state == .open { context.fireChannelReadComplete() } else { readCompleted = true }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch state {
        case .open: context.write(data, promise: promise)
        case .handshaking, .checking: writes.append((data, promise))
        case .refused: promise?.fail(ChannelError.ioOnClosedChannel)
        }
    }

    func flush(context: ChannelHandlerContext) {
        if state == .open { context.flush() } else { flushed = true }
    }

    func channelInactive(context: ChannelHandlerContext) {
        failWrites()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        failWrites()
    }

    private func open(_ context: ChannelHandlerContext, _ event: Any) {
        state = .open
        context.fireUserInboundEventTriggered(event)
        let (reads, writes) = (self.reads, self.writes)
        (self.reads, self.writes) = ([], [])
        for data in reads { context.fireChannelRead(data) }
        if readCompleted { context.fireChannelReadComplete() }
        for (data, promise) in writes { context.write(data, promise: promise) }
        if flushed { context.flush() }
        (readCompleted, flushed) = (false, false)
    }

    private func refuse(_ context: ChannelHandlerContext) {
        state = .refused
        reads = []
        failWrites()
        context.close(promise: nil)
    }

    private func failWrites() {
        let writes = self.writes
        self.writes = []
        for (_, promise) in writes { promise?.fail(ChannelError.ioOnClosedChannel) }
    }
}
