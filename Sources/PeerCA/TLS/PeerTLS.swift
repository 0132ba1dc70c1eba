import Foundation
public import NIOCore
public import NIOSSL
import NIOTLS
import SwiftASN1
import Synchronization
import TokenKit
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
        // The device's own CA certificates: what a peer of the same CA chains through.
        let own = chain.dropFirst().compactMap { certificate in (try? certificate.toDERBytes()).flatMap { try? Certificate(derEncoded: $0) } }
        self.current = Current(verifier, own: own.filter { !verifier.roots.contains($0) })
    }

    /// The verifier the handshakes of every copy read, replaced as a whole, and the CA certificates
    /// a resumed session's leaf is verified through (it hands over only its leaf): the device's own
    /// intermediates, and those of paths full handshakes validated — the latest, as many as
    /// ``PeerVerifier/maxIntermediates`` leaves room for. Only validated paths add to it, so a
    /// peer cannot crowd a CA certificate out with certificates it merely sent along.
    final class Current: Sendable {
        let value: Mutex<PeerVerifier>
        private let own: [Certificate]
        private let seen = Mutex<[Certificate]>([])

        init(_ verifier: PeerVerifier, own: [Certificate]) {
            value = Mutex(verifier)
            self.own = Array(own.prefix(PeerVerifier.maxIntermediates))
        }

        /// The CA certificates of a validated path (leaf first, root last), most recent last.
        func remember(path: [Certificate]) {
            let room = PeerVerifier.maxIntermediates - own.count
            guard room > 0, path.count > 2 else { return }
            seen.withLock { seen in
                for certificate in path.dropFirst().dropLast() where !own.contains(certificate) {
                    seen.removeAll { $0 == certificate }
                    seen.append(certificate)
                }
                if seen.count > room { seen.removeFirst(seen.count - room) }
            }
        }

        /// The CA certificates to offer a resumed session's leaf to the verifier with.
        var intermediates: [Certificate] { own + seen.withLock { $0 } }
    }

    /// Makes `list` the CRL that every handshake from now on checks, in handlers already made and
    /// handlers made later, without building the TLS contexts or the servers again. A verifier
    /// refuses every leaf of a CA whose CRL is past its nextUpdate, so a long-running device gives
    /// the CA's latest CRL (`GET /v1/crl`, a new one at least every half validity) before then.
    ///
    /// Refused, leaving the current CRL in place (``PeerCAError/Code/invalidCAMaterial``): a list
    /// that is not current at the verifier's clock (thisUpdate more than
    /// ``PeerVerifier/crlClockSkew`` ahead, past its nextUpdate, or without one); one from another
    /// issuer than the current list's, by name or signing key; and one older than the current
    /// list — a lower CRL number when both carry one, else an earlier thisUpdate — since an old
    /// CRL, replayed from before a revocation, would hide it. The same list again is accepted.
    ///
    /// Connections already open are not checked again; a TLS session a peer resumes later is
    /// (see ``addServerHandlers(to:onPeer:)``).
    public func updateRevocations(_ list: RevocationList) throws(PeerCAError) {
        try current.value.withLock { verifier throws(PeerCAError) in
            let now = Date(timeIntervalSince1970: verifier.clock.now.rounded(.down))
            if let notCurrent = list.notCurrent(at: now) {
                throw PeerCAError(.invalidCAMaterial, "\(notCurrent), now \(ISO8601Text.string(now)))")
            }
            if let present = verifier.revocations {
                guard list.issuer == present.issuer, list.signerKey == present.signerKey else {
                    throw PeerCAError(.invalidCAMaterial, "the CRL is from \(list.issuer), not from the current CRL's issuer \(present.issuer) and key")
                }
                let older: Bool
                if let number = list.number, let presentNumber = present.number { older = number < presentNumber } else { older = list.thisUpdate < present.thisUpdate }
                guard !older else {
                    throw PeerCAError(
                        .invalidCAMaterial,
                        "the CRL is older than the current one (number \(list.number.map(String.init) ?? "none"), thisUpdate \(ISO8601Text.string(list.thisUpdate)); current \(present.number.map(String.init) ?? "none"), \(ISO8601Text.string(present.thisUpdate)))")
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
        try add([tls, ResumedSessionCheck(tls: tls, current: current, role: .client, handshake: handshake, onPeer: onPeer)], to: pipeline)
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
        try add([tls, ResumedSessionCheck(tls: tls, current: current, role: .server, handshake: handshake, onPeer: onPeer)], to: pipeline)
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
                    let (identity, path) = try await verifier.verifiedPath(chain: try PeerVerifier.certificates(der), role: role)
                    current.remember(path: path)
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

/// Sits after the TLS handler: holds every read, write and event until the handshake has
/// completed and the peer is known to be acceptable now. After a full handshake that is at once
/// (the callback verified the chain); after a resumed session, whose handshake skips the callback,
/// the session's certificate is verified again here with the current verifier (its CRL, the time
/// now) and the CA certificates of ``PeerTLS/Current``. A peer that fails is disconnected before
/// any data passes either way. Once open, writes held go first, in order, then the handshake's
/// event, the reads and the other events held.
final class ResumedSessionCheck: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private enum State { case handshaking, checking, open, closed }
    private enum Inbound {
        case read(NIOAny)
        case readComplete
        case event(Any)
    }
    private var state = State.handshaking
    private var inbound: [Inbound] = []
    private var writes: [(NIOAny, EventLoopPromise<Void>?)] = []
    private var flushed = false
    private let tls: NIOSSLHandler
    private let current: PeerTLS.Current
    private let role: PeerVerifier.Role
    private let handshake: Handshake
    private let onPeer: @Sendable (PeerCertificateIdentity) -> Void

    init(
        tls: NIOSSLHandler, current: PeerTLS.Current, role: PeerVerifier.Role, handshake: Handshake,
        onPeer: @escaping @Sendable (PeerCertificateIdentity) -> Void
    ) {
        self.tls = tls
        self.current = current
        self.role = role
        self.handshake = handshake
        self.onPeer = onPeer
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch state {
        case .open: context.fireUserInboundEventTriggered(event)
        case .closed: break
        case .checking: inbound.append(.event(event))
        case .handshaking:
            guard case TLSUserEvent.handshakeCompleted? = event as? TLSUserEvent else {
                inbound.append(.event(event))
                return
            }
            inbound.insert(.event(event), at: 0)
            if handshake.verified.load(ordering: .acquiring) {
                open(context)
            } else {
                check(context)
            }
        }
    }

    /// A resumed session: its certificate (from this connection's own TLS handler) verified again
    /// before anything passes.
    private func check(_ context: ChannelHandlerContext) {
        state = .checking
        let leaf = tls.peerCertificate.flatMap { try? $0.toDERBytes() }.flatMap { try? Certificate(derEncoded: $0) }
        let current = self.current
        let role = self.role
        let checked = context.eventLoop.makePromise(of: PeerCertificateIdentity?.self)
        Task {
            guard let leaf else { return checked.succeed(nil) }
            let verifier = current.value.withLock { $0 }
            checked.succeed(try? await verifier.verify(chain: [leaf] + current.intermediates, role: role))
        }
        checked.futureResult.assumeIsolated().whenSuccess { identity in
            guard self.state == .checking else { return }  // closed meanwhile
            guard let identity, context.channel.isActive else { return self.close(context) }
            self.onPeer(identity)
            self.open(context)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch state {
        case .open: context.fireChannelRead(data)
        case .handshaking, .checking: inbound.append(.read(data))
        case .closed: break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        switch state {
        case .open: context.fireChannelReadComplete()
        case .handshaking, .checking: inbound.append(.readComplete)
        case .closed: break
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if state != .closed { context.fireErrorCaught(error) }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch state {
        case .open: context.write(data, promise: promise)
        case .handshaking, .checking: writes.append((data, promise))
        case .closed: promise?.fail(ChannelError.ioOnClosedChannel)
        }
    }

    func flush(context: ChannelHandlerContext) {
        if state == .open { context.flush() } else { flushed = true }
    }

    func channelInactive(context: ChannelHandlerContext) {
        discard()  // nothing held reaches the application after the connection is gone
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        discard()
    }

    private func open(_ context: ChannelHandlerContext) {
        state = .open
        let (writes, inbound, flushed) = (self.writes, self.inbound, self.flushed)
        (self.writes, self.inbound, self.flushed) = ([], [], false)
        for (data, promise) in writes { context.write(data, promise: promise) }
        if flushed { context.flush() }
        for item in inbound {
            switch item {
            case .read(let data): context.fireChannelRead(data)
            case .readComplete: context.fireChannelReadComplete()
            case .event(let event): context.fireUserInboundEventTriggered(event)
            }
        }
    }

    private func close(_ context: ChannelHandlerContext) {
        discard()
        context.close(promise: nil)
    }

    /// Nothing held passes any more: reads and events are dropped, writes fail.
    private func discard() {
        state = .closed
        inbound = []
        let writes = self.writes
        self.writes = []
        for (_, promise) in writes { promise?.fail(ChannelError.ioOnClosedChannel) }
    }
}
