import NIOCore
public import NIOSSL
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
/// // in a channel initializer:
/// try channel.pipeline.syncOperations.addHandler(tls.makeServerHandler { peer in print(peer.spiffeID) })
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

    /// The verifier the handshakes of every copy read, replaced as a whole.
    private final class Current: Sendable {
        let value: Mutex<PeerVerifier>
        init(_ verifier: PeerVerifier) { value = Mutex(verifier) }
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
    /// Connections already open are not checked again, and neither is a TLS session a peer
    /// resumes (see the README's peer-side notes).
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

    /// A handler for the accepting side; `onPeer` receives the verified identity of the device
    /// that connected (the handshake fails for any other).
    public func makeServerHandler(onPeer: @escaping @Sendable (PeerCertificateIdentity) -> Void = { _ in }) -> NIOSSLServerHandler {
        NIOSSLServerHandler(context: serverContext, customVerificationCallback: callback(role: .client, onPeer))
    }

    /// A handler for the connecting side; `onPeer` receives the verified identity of the device
    /// connected to.
    public func makeClientHandler(onPeer: @escaping @Sendable (PeerCertificateIdentity) -> Void = { _ in }) throws(PeerCAError) -> NIOSSLClientHandler {
        do {
            return try NIOSSLClientHandler(context: clientContext, serverHostname: nil, customVerificationCallback: callback(role: .server, onPeer))
        } catch {
            throw PeerCAError(.invalidCAMaterial, "cannot create the TLS client handler (\(error))")
        }
    }

    /// What peers may sign the handshake with: every key type the CA certifies. BoringSSL leaves
    /// Ed25519 out by default, which would make devices with Ed25519 keys unreachable.
    static let signatureAlgorithms: [SignatureAlgorithm] = [
        .ecdsaSecp256R1Sha256, .ecdsaSecp384R1Sha384, .ed25519, .rsaPssRsaeSha256, .rsaPssRsaeSha384, .rsaPssRsaeSha512,
        .rsaPkcs1Sha256, .rsaPkcs1Sha384, .rsaPkcs1Sha512,
    ]

    private func callback(role: PeerVerifier.Role, _ onPeer: @escaping @Sendable (PeerCertificateIdentity) -> Void) -> NIOSSLCustomVerificationCallback {
        let current = self.current
        return { certificates, promise in
            let der = certificates.compactMap { try? $0.toDERBytes() }
            let verifier = current.value.withLock { $0 }  // the CRL of the latest update, at each handshake
            Task {
                do {
                    let identity = try await verifier.verify(derChain: der, role: role)
                    onPeer(identity)
                    promise.succeed(.certificateVerified)
                } catch {
                    promise.succeed(.failed)
                }
            }
        }
    }
}
