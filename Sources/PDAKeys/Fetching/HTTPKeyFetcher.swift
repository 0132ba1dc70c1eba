import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
import TokenKit

/// How remote keys are fetched: timeouts, size cap, trust roots, and what is allowed.
public struct KeyFetchConfiguration: Sendable, Hashable {
    /// Which certificate authorities a server's certificate must chain to.
    public enum TrustRoots: Sendable, Hashable {
        /// The system's trust store.
        case system
        /// The certificates in a PEM file (private PKI); the system store is not used.
        case pemFile(String)
        /// The certificates in PEM text.
        case pem(String)
    }

    /// Time allowed to establish a connection (TCP and TLS). Default 5 s.
    public var connectTimeout: Duration = .seconds(5)
    /// Time allowed for the whole request, body included. Default 10 s.
    public var totalTimeout: Duration = .seconds(10)
    /// The longest either timeout may be (``HTTPKeyFetcher`` refuses more): a day.
    public static let longestTimeout: Duration = .seconds(86_400)
    /// Largest accepted response body. Default 64 KiB.
    public var maxBodyBytes: Int = 64 * 1024
    /// Allow `http://` URLs whose host is `localhost`, `127.x.x.x` or `::1` (tests, sidecars).
    /// Default false: everything else is HTTPS.
    public var allowPlainHTTPForLoopback = false
    /// Trust roots for HTTPS. Default: the system store.
    public var trustRoots: TrustRoots = .system
    /// Connect to another address for a host name (`["alice.hubat.net": "127.0.0.1"]`); TLS still
    /// checks the certificate against the name. For tests and split-horizon deployments.
    public var hostOverrides: [String: String] = [:]
    /// The port PDA `/publickey` requests go to. Default 443.
    public var pdaPort: Int = 443
    /// The `User-Agent` sent with every request.
    public var userAgent = "tokentool-pdakeys/1"

    public init() {}
}

/// Fetches key documents over HTTPS with the rules of ``KeyFetchConfiguration``: no redirects
/// followed, body capped, connect and total timeouts, optional private trust roots.
///
/// Owns an `HTTPClient`: call ``shutdown()`` when done with it.
public final class HTTPKeyFetcher: Sendable {
    public let configuration: KeyFetchConfiguration
    private let client: HTTPClient

    /// Throws ``KeySourceError/Code/invalidConfiguration`` for a timeout that is not more than
    /// zero or is longer than a day (``KeyFetchConfiguration/connectTimeout``,
    /// ``KeyFetchConfiguration/totalTimeout``) or a body cap that is not more than zero, and
    /// ``KeySourceError/Code/connection`` for trust roots that cannot be read.
    public init(configuration: KeyFetchConfiguration = KeyFetchConfiguration()) throws(KeySourceError) {
        for (name, timeout) in [("connectTimeout", configuration.connectTimeout), ("totalTimeout", configuration.totalTimeout)]
        where !(timeout > .zero && timeout <= KeyFetchConfiguration.longestTimeout) {
            throw KeySourceError(.invalidConfiguration, "\(name) must be more than 0 and at most a day, not \(timeout)")
        }
        guard configuration.maxBodyBytes > 0 else {
            throw KeySourceError(.invalidConfiguration, "maxBodyBytes must be more than 0, not \(configuration.maxBodyBytes)")
        }
        self.configuration = configuration
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = .tlsv12
        do {
            switch configuration.trustRoots {
            case .system: break
            case .pemFile(let path):
                guard FileManager.default.isReadableFile(atPath: path) else {
                    throw KeySourceError(.connection, "cannot read the trust-root file \(path)")
                }
                tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(path))
            case .pem(let text):
                tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(Array(text.utf8)))
            }
        } catch let error as KeySourceError {
            throw error
        } catch {
            throw KeySourceError(.connection, "the trust roots are not PEM certificates (\(error))")
        }
        var http = HTTPClient.Configuration(
            tlsConfiguration: tls,
            redirectConfiguration: .disallow,
            timeout: .init(connect: TimeAmount(configuration.connectTimeout), read: TimeAmount(configuration.totalTimeout)),
            decompression: .disabled)
        http.dnsOverride = configuration.hostOverrides
        http.httpVersion = .http1Only
        // A connection that cannot be made — refused, or a TLS handshake that fails (an untrusted
        // certificate, a name it does not cover) — fails the request at once with its cause.
        // AsyncHTTPClient's default retries it with backoff until the request's deadline: every
        // such fetch then took the whole total timeout, and under load the watchdog below could
        // fire first and report a timeout instead of the cause.
        http.connectionPool.retryConnectionEstablishment = false
        client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: http)
    }

    /// Closes connections. Requests after this fail with ``KeySourceError/Code/shutDown``.
    public func shutdown() async {
        try? await client.shutdown()
    }

    /// A fetched document: its body and what `Cache-Control` said.
    public struct Document: Sendable {
        public let body: [UInt8]
        /// `max-age` in seconds, if the response gave one.
        public let maxAge: Double?
        /// True for `no-store` / `no-cache` (the store then keeps keys for its minimum TTL).
        public let noCache: Bool
    }

    /// GET `url` (after ``checkURL(_:)``), requiring status 200 and a body within the cap, all
    /// within ``KeyFetchConfiguration/totalTimeout`` (a server that trickles its body is cut off).
    public func get(_ url: String, accept: String) async throws(KeySourceError) -> Document {
        try await get(url, accept: accept, within: configuration.totalTimeout)
    }

    /// ``get(_:accept:)`` within `timeout` (what remains of a fetch that makes two requests).
    private func get(_ url: String, accept: String, within timeout: Duration) async throws(KeySourceError) -> Document {
        let checked = try checkURL(url)
        guard timeout > .zero else { throw KeySourceError(.timeout, "no time was left to fetch \(checked) within \(configuration.totalTimeout)") }
        // A little after the client's own deadline, which reports the cause (refused, TLS failure)
        // when it can; this one catches a body that trickles in.
        let outcome: Result<Document, KeySourceError> = await TimeLimit.race(timeout + .milliseconds(250), fallback: .failure(KeySourceError(.timeout, "the fetch of \(checked) was cancelled before it answered"))) {
            do throws(KeySourceError) { return .success(try await self.request(checked, accept: accept, timeout: timeout)) } catch { return .failure(error) }
        } timedOut: {
            .failure(KeySourceError(.timeout, "\(checked) did not send its whole answer within \(timeout)"))
        }
        return try outcome.get()
    }

    private func request(_ checked: String, accept: String, timeout: Duration) async throws(KeySourceError) -> Document {
        var request = HTTPClientRequest(url: checked)
        request.method = .GET
        request.headers.add(name: "Accept", value: accept)
        request.headers.add(name: "User-Agent", value: configuration.userAgent)
        let limit = configuration.maxBodyBytes
        do {
            let response = try await client.execute(request, timeout: TimeAmount(timeout))
            guard response.status == .ok else {
                let location = response.headers.first(name: "Location").map { " to \(IssuerAllowList.printable($0))" } ?? ""
                throw KeySourceError(.httpStatus, "\(checked) answered \(response.status.code)\(location)\((300..<400).contains(response.status.code) ? " (redirects are not followed)" : "")")
            }
            if let length = response.headers.first(name: "Content-Length").flatMap(Int.init), length > limit {
                throw KeySourceError(.responseTooLarge, "\(checked) sent \(length) bytes; at most \(limit) are accepted")
            }
            let buffer = try await response.body.collect(upTo: limit)
            let cacheControl = CacheControl(response.headers[canonicalForm: "Cache-Control"].map(String.init).joined(separator: ","))
            return Document(body: Array(buffer.readableBytesView), maxAge: cacheControl.maxAge, noCache: cacheControl.noCache)
        } catch let error as KeySourceError {
            throw error
        } catch is NIOTooManyBytesError {
            throw KeySourceError(.responseTooLarge, "\(checked) sent more than \(limit) bytes")
        } catch let error as HTTPClientError {
            switch error {
            case .connectTimeout, .deadlineExceeded, .readTimeout, .tlsHandshakeTimeout, .writeTimeout:
                throw KeySourceError(.timeout, "\(checked) did not answer in time (\(error))")
            case .alreadyShutdown:
                throw KeySourceError(.shutDown, "the key fetcher was shut down")
            default:
                throw KeySourceError(.connection, "\(checked): \(error)")
            }
        } catch {
            if Task.isCancelled { throw KeySourceError(.timeout, "\(checked) did not answer in time") }
            throw KeySourceError(.connection, "\(checked): \(error)")
        }
    }

    /// Refuses URLs that are not HTTPS (plain HTTP only to loopback, when enabled) or that carry
    /// userinfo; returns the URL text to request.
    public func checkURL(_ text: String) throws(KeySourceError) -> String {
        let shown = IssuerAllowList.printable(text)
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
            let host = components.host, !host.isEmpty
        else {
            throw KeySourceError(.insecureURL, "\"\(shown)\" is not an absolute URL")
        }
        if components.user != nil || components.password != nil {
            throw KeySourceError(.insecureURL, "\"\(shown)\" carries userinfo")
        }
        switch scheme {
        case "https": break
        case "http":
            guard configuration.allowPlainHTTPForLoopback else {
                throw KeySourceError(.insecureURL, "\"\(shown)\" is plain HTTP; keys are fetched over HTTPS only")
            }
            guard HTTPKeyFetcher.isLoopback(host) else {
                throw KeySourceError(.insecureURL, "\"\(shown)\" is plain HTTP to a host that is not loopback")
            }
        default:
            throw KeySourceError(.insecureURL, "\"\(shown)\" has scheme \(scheme); keys are fetched over HTTPS only")
        }
        return text
    }

    static func isLoopback(_ host: String) -> Bool {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if bare == "localhost" || bare == "::1" { return true }
        let parts = bare.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { part in UInt8(part) != nil }
    }


    // MARK: Sources

    /// The keys a source publishes now, and the TTL its response asked for.
    func fetchKeys(_ source: KeySource) async throws(KeySourceError) -> (keys: [JWTKey], skipped: [String], document: Document) {
        switch source {
        case .pda(let host):
            let port = configuration.pdaPort == 443 ? "" : ":\(configuration.pdaPort)"
            let url = "https://\(host)\(port)/publickey"
            let document = try await get(url, accept: "text/plain")
            return ([try HTTPKeyFetcher.pdaKey(document.body, url: url)], [], document)
        case .jwks(let url):
            let document = try await get(url, accept: "application/json")
            let (keys, skipped) = try HTTPKeyFetcher.jwks(document.body, url: url)
            return (keys, skipped, document)
        case .oidc(let issuer):
            let base = issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer
            let discoveryURL = base + "/.well-known/openid-configuration"
            // One total time for both requests, as for a source fetched with one.
            let deadline = ContinuousClock.now + configuration.totalTimeout
            let discovery = try await get(discoveryURL, accept: "application/json")
            let jwksURL = try HTTPKeyFetcher.jwksURI(discovery.body, issuer: issuer, url: discoveryURL)
            let document = try await get(jwksURL, accept: "application/json", within: deadline - ContinuousClock.now)
            let (keys, skipped) = try HTTPKeyFetcher.jwks(document.body, url: jwksURL)
            return (keys, skipped, document)
        }
    }

    /// A PDA's `/publickey` body: exactly one PEM public key, RSA of at least 2048 bits.
    static func pdaKey(_ body: [UInt8], url: String) throws(KeySourceError) -> JWTKey {
        guard let text = String(validating: body, as: UTF8.self) else {
            throw KeySourceError(.invalidDocument, "\(url) did not send UTF-8 text")
        }
        let blocks: [PEM.Block]
        do { blocks = try PEM.parse(text) } catch {
            throw KeySourceError(.invalidDocument, "\(url) did not send a PEM public key (\(error.message))")
        }
        guard blocks.count == 1, let block = blocks.first, block.label == "PUBLIC KEY" else {
            throw KeySourceError(.invalidDocument, "\(url) must send exactly one PEM \"PUBLIC KEY\" block; it sent \(blocks.map { "\"\($0.label)\"" }.joined(separator: ", "))")
        }
        let key: JWTKey
        do { key = try JWTKey(der: block.der) } catch {
            throw KeySourceError(error.code == .weakKey ? .unusableKey : .invalidDocument, "\(url): \(error.message)")
        }
        guard case .rsa(let bits) = key.type, bits >= 2048 else {
            throw KeySourceError(.unusableKey, "\(url) published a \(key.type) key; a PDA key must be RSA of at least 2048 bits")
        }
        do { return try key.with(algorithms: [.rs256]) } catch {
            throw KeySourceError(.unusableKey, "\(url): \(error.message)")
        }
    }

    /// A JWK Set body: its public, signature-capable keys (at least one). HMAC secrets in a
    /// published set are refused; private keys are reduced to their public half.
    static func jwks(_ body: [UInt8], url: String) throws(KeySourceError) -> ([JWTKey], [String]) {
        guard let text = String(validating: body, as: UTF8.self) else {
            throw KeySourceError(.invalidDocument, "\(url) did not send UTF-8 text")
        }
        let set: JWKSet
        do { set = try JWKSet(json: text) } catch {
            throw KeySourceError(.invalidDocument, "\(url) did not send a usable JWK Set (\(error.code): \(error.message))")
        }
        if set.keys.contains(where: { $0.type.isHMAC }) {
            throw KeySourceError(.unusableKey, "\(url) publishes an HMAC secret; a public JWK Set may hold only public keys")
        }
        let keys = set.keys.map { $0.isPrivate ? $0.publicKey : $0 }
        guard !keys.isEmpty else {
            throw KeySourceError(.unusableKey, "\(url) holds no signature key (\(set.skipped.count) skipped)")
        }
        return (keys, set.skipped)
    }

    /// The `jwks_uri` of an OpenID Provider configuration whose `issuer` equals `issuer`.
    static func jwksURI(_ body: [UInt8], issuer: String, url: String) throws(KeySourceError) -> String {
        let document: JSONValue
        do { document = try JSONValue.parse(body) } catch {
            throw KeySourceError(.invalidDocument, "\(url) is not JSON (\(error.message))")
        }
        guard let object = document.objectValue else {
            throw KeySourceError(.invalidDocument, "\(url) is not a JSON object")
        }
        guard let published = object["issuer"]?.stringValue else {
            throw KeySourceError(.invalidDocument, "\(url) has no \"issuer\" string")
        }
        guard published == issuer else {
            throw KeySourceError(.issuerMismatch, "\(url) names issuer \"\(IssuerAllowList.printable(published))\", not the configured \"\(IssuerAllowList.printable(issuer))\"")
        }
        guard let jwksURI = object["jwks_uri"]?.stringValue else {
            throw KeySourceError(.invalidDocument, "\(url) has no \"jwks_uri\" string")
        }
        return jwksURI
    }
}

extension JWTKey.KeyType {
    var isHMAC: Bool { if case .hmac = self { true } else { false } }
}

/// The directives of `Cache-Control` that matter for key caching.
struct CacheControl {
    var maxAge: Double?
    var noCache = false

    init(_ header: String) {
        for directive in header.split(separator: ",") {
            let parts = directive.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            guard let name = parts.first else { continue }
            switch name {
            case "max-age":
                if parts.count == 2, let value = UInt32(parts[1].trimmingCharacters(in: CharacterSet(charactersIn: "\""))) {
                    maxAge = Double(value)
                }
            case "no-store", "no-cache":
                noCache = true
            default:
                continue
            }
        }
    }
}
