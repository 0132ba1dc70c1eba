import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
import TokenKit

/// OpenWeb's half of the SSO handshake: `GET {baseURL}/sso/v1/register-user`.
///
/// The contract is the OpenWeb SSO seed (`seeds/004_8ddc6bc761da8684.txt`, "SSO Handshake
/// Overview", step 4): "make a GET /sso/v1/register-user call to OpenWeb's backend. The API call
/// must include the following information: Your secret access token (access_token); Session ID
/// generated after initiating the SSO session (code_a); Required user details from your backend
/// user management system (primary_key, user_name). OpenWeb's backend logs in the user and
/// returns a success response (codeB)." The seed names the four parameters of the GET but not
/// where each goes nor the answer's shape; OpenWeb's published examples of this call send all four
/// as query parameters (`register-user?code_a=…&access_token=…&primary_key=…&user_name=…`) and
/// read codeB as the answer's text. That is what this does; an answer that is a JSON object
/// `{"code_b": "…"}` is accepted too. Renewal (the seed's `renewSSO`) is the same call with a new
/// code_a.
///
/// Rules: HTTPS only, redirects never followed, one deadline for the whole call, the answer capped
/// at ``maxResponseBytes``. The access token is in the request URL, so neither the URL nor the
/// client's errors are ever logged or put in an answer, and an excerpt of OpenWeb's answer has
/// the token removed. The client is given no logger (AsyncHTTPClient would log the URL at trace).
///
/// Owns an `HTTPClient`: ``shutdown()`` when done (``TokenService/shutdown()`` does).
final class OpenWebSSO: Sendable {
    /// Largest answer read from OpenWeb.
    static let maxResponseBytes = 16 * 1024
    /// Longest `codeA` accepted from a caller.
    static let maxCodeABytes = 256
    /// Longest `codeB` accepted from OpenWeb.
    static let maxCodeBBytes = 1024
    /// Longest `primary_key` and `user_name` sent.
    static let maxUserFieldBytes = 256
    /// Longest excerpt of a refusing answer given to the caller.
    static let maxExcerptCharacters = 160

    /// What start-up checked and read: the configuration made usable.
    struct Settings: Sendable {
        let registerUserURL: String
        let accessToken: String
        let primaryKeyClaim: String?
        let userNameClaim: String
        let timeout: Duration
        let tls: TLSConfiguration

        /// Reads the access token (its file must be mode 0600) and the trust roots; errors name
        /// the configuration key and never quote the token.
        static func load(_ openweb: ServerConfiguration.OpenWeb) throws(ConfigurationError) -> Settings {
            let url = try OpenWebSSO.registerUserURL(openweb.baseURL)
            let path = openweb.accessTokenFile
            try ConfigurationError.checkPrivate(path, key: "openweb.accessTokenFile")
            let data = try ConfigurationError.read(path, key: "openweb.accessTokenFile")
            let token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            guard !token.isEmpty, token.utf8.count <= 4096 else {
                throw ConfigurationError(key: "openweb.accessTokenFile", "must hold the access token (1 to 4096 bytes)")
            }
            guard token.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else {
                throw ConfigurationError(key: "openweb.accessTokenFile", "the access token must be printable ASCII without spaces")
            }
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.minimumTLSVersion = .tlsv12
            if let caFile = openweb.caFile {
                do {
                    let roots = try NIOSSLCertificate.fromPEMFile(caFile)
                    guard !roots.isEmpty else { throw ConfigurationError(key: "openweb.caFile", "\(caFile) holds no PEM certificate") }
                    tls.trustRoots = .certificates(roots)
                } catch let error as ConfigurationError {
                    throw error
                } catch {
                    throw ConfigurationError(key: "openweb.caFile", "\(caFile) cannot be read as PEM certificates (\(error))")
                }
            }
            return Settings(
                registerUserURL: url, accessToken: token, primaryKeyClaim: openweb.primaryKeyClaim, userNameClaim: openweb.userNameClaimName,
                timeout: .milliseconds(Int64(openweb.timeout * 1000)), tls: tls)
        }
    }

    let settings: Settings
    private let client: HTTPClient

    init(settings: Settings) {
        self.settings = settings
        let amount = TimeAmount(settings.timeout)
        var configuration = HTTPClient.Configuration(
            tlsConfiguration: settings.tls, redirectConfiguration: .disallow, timeout: .init(connect: amount, read: amount), decompression: .disabled)
        configuration.httpVersion = .http1Only
        // A refused connection or a failed TLS handshake ends the call at once with its cause,
        // instead of AsyncHTTPClient retrying it until the timeout (when the watchdog below could
        // answer first, without the cause).
        configuration.connectionPool.retryConnectionEstablishment = false
        client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }

    /// Closes the client's connections.
    func shutdown() async {
        try? await client.shutdown()
    }

    /// `{baseURL}/sso/v1/register-user` for an HTTPS base URL without userinfo, query or fragment.
    static func registerUserURL(_ baseURL: String) throws(ConfigurationError) -> String {
        let key = "openweb.baseURL"
        guard let components = URLComponents(string: baseURL), let scheme = components.scheme?.lowercased(), let host = components.host, !host.isEmpty else {
            throw ConfigurationError(key: key, "must be an absolute https:// URL (OpenWeb's API base, e.g. https://www.spot.im/api)")
        }
        guard scheme == "https" else {
            throw ConfigurationError(key: key, "must be https:// (it carries the access token); not \(scheme)://")
        }
        guard components.user == nil, components.password == nil else { throw ConfigurationError(key: key, "must not carry userinfo") }
        guard components.query == nil, components.fragment == nil else { throw ConfigurationError(key: key, "must not have a query or fragment") }
        let base = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        return base + "/sso/v1/register-user"
    }

    /// How a `register-user` call ended.
    enum Outcome: Sendable, Equatable {
        /// OpenWeb logged the user in and answered this codeB.
        case codeB(String)
        /// OpenWeb answered, but not with a codeB: its status, why, and a short excerpt of its
        /// answer (printable ASCII, the access token removed).
        case refused(status: Int, reason: String, excerpt: String)
        /// OpenWeb could not be had (refused connection, TLS failure, no answer in time).
        case unavailable(reason: String)
    }

    /// Asks OpenWeb to log the user in: `code_a` from the SDK, the user's `primary_key` and
    /// `user_name`, and the app's access token — all within the configured timeout, however the
    /// answer trickles in.
    func registerUser(codeA: String, primaryKey: String, userName: String) async -> Outcome {
        let timeout = settings.timeout
        // A little after the client's own deadline (which says why when it can); this one catches
        // an answer that trickles in.
        return await TimeLimit.race(timeout + .milliseconds(250), fallback: .unavailable(reason: "the request was cancelled before OpenWeb answered")) {
            await self.call(codeA: codeA, primaryKey: primaryKey, userName: userName)
        } timedOut: {
            .unavailable(reason: "no answer within \(timeout)")
        }
    }

    private func call(codeA: String, primaryKey: String, userName: String) async -> Outcome {
        // The four parameters the seed lists, as query parameters (see the type's comment).
        let query = [("code_a", codeA), ("access_token", settings.accessToken), ("primary_key", primaryKey), ("user_name", userName)]
            .map { "\($0)=\(Self.percentEncoded($1))" }.joined(separator: "&")
        var request = HTTPClientRequest(url: settings.registerUserURL + "?" + query)
        request.method = .GET
        request.headers.add(name: "Accept", value: "text/plain, application/json")
        request.headers.add(name: "User-Agent", value: "tokentool-openweb/1")
        let limit = Self.maxResponseBytes
        do {
            let response = try await client.execute(request, timeout: TimeAmount(settings.timeout))
            let status = Int(response.status.code)
            if let length = response.headers.first(name: "Content-Length").flatMap(Int.init), length > limit {
                return .refused(status: status, reason: "its answer has \(length) bytes; at most \(limit) are read", excerpt: "")
            }
            let body = Array(try await response.body.collect(upTo: limit).readableBytesView)
            guard (200..<300).contains(status) else {
                let reason = (300..<400).contains(status) ? "it redirected (redirects are not followed)" : "it answered \(status)"
                return .refused(status: status, reason: reason, excerpt: excerpt(body))
            }
            guard let codeB = Self.codeB(body), !codeB.contains(settings.accessToken) else {
                return .refused(status: status, reason: "its answer holds no code_b", excerpt: excerpt(body))
            }
            return .codeB(codeB)
        } catch is NIOTooManyBytesError {
            return .refused(status: 200, reason: "its answer exceeds \(limit) bytes", excerpt: "")
        } catch {
            return .unavailable(reason: Self.unavailability(error))
        }
    }

    /// Why OpenWeb could not be had, in words that never quote the request (its URL holds the
    /// access token).
    static func unavailability(_ error: any Error) -> String {
        if Task.isCancelled { return "no answer in time" }
        if let error = error as? HTTPClientError {
            switch error {
            case .connectTimeout, .deadlineExceeded, .readTimeout, .tlsHandshakeTimeout, .writeTimeout: return "no answer in time"
            case .remoteConnectionClosed: return "the connection was closed before an answer"
            case .alreadyShutdown: return "the client was shut down"
            default: return "the request failed (\(String(describing: type(of: error))))"
            }
        }
        if error is NIOSSLError || error is BoringSSLError { return "the TLS handshake failed (is its certificate trusted?)" }
        if error is CancellationError { return "no answer in time" }
        // Connection refused and the like (NIOPosix's NIOConnectionError, IOError, ChannelError).
        return "the connection failed (\(String(describing: type(of: error))))"
    }

    /// The codeB of a successful answer: its text, or the `code_b` string of a JSON object;
    /// 1 to ``maxCodeBBytes`` printable ASCII characters without spaces. nil otherwise.
    static func codeB(_ body: [UInt8]) -> String? {
        guard let text = String(validating: body, as: UTF8.self)?.trimmingCharacters(in: .whitespacesAndNewlines) else { return nil }
        var code = text
        if text.hasPrefix("{") {
            guard let value = try? JSONValue.parse(text), let inner = value.objectValue?["code_b"]?.stringValue else { return nil }
            code = inner
        }
        guard !code.isEmpty, code.utf8.count <= maxCodeBBytes, code.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else { return nil }
        return code
    }

    /// A short, printable excerpt of an answer, with the access token (raw or percent-encoded) and
    /// any `access_token=` value removed.
    func excerpt(_ body: [UInt8]) -> String {
        var text = String(decoding: body, as: UTF8.self)
        for form in Set([settings.accessToken, Self.percentEncoded(settings.accessToken), settings.accessToken.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed) ?? ""]) where !form.isEmpty {
            text = text.replacingOccurrences(of: form, with: "[redacted]")
        }
        text = Self.redactingAccessTokenParameters(text)
        let printable = String(String.UnicodeScalarView(text.unicodeScalars.map { (0x20...0x7E).contains($0.value) ? $0 : "?" }))
        let collapsed = printable.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
        return collapsed.count > Self.maxExcerptCharacters ? String(collapsed.prefix(Self.maxExcerptCharacters)) + "..." : collapsed
    }

    /// `access_token=<anything up to & or a space or a quote>` → `access_token=[redacted]`.
    static func redactingAccessTokenParameters(_ text: String) -> String {
        var out = ""
        var rest = Substring(text)
        while let range = rest.range(of: "access_token", options: .caseInsensitive) {
            out += rest[..<range.upperBound]
            rest = rest[range.upperBound...]
            let separators = rest.prefix { $0 == "=" || $0 == ":" || $0 == " " || $0 == "\"" || $0 == "'" }
            guard !separators.isEmpty else { continue }
            out += separators
            rest = rest.dropFirst(separators.count)
            let value = rest.prefix { !"&\"' \n\r\t,;}".contains($0) }
            out += value.isEmpty ? "" : "[redacted]"
            rest = rest.dropFirst(value.count)
        }
        return out + rest
    }

    /// RFC 3986 percent-encoding of everything but the unreserved characters (so `+`, `&`, `=`
    /// and `/` reach OpenWeb as themselves).
    static func percentEncoded(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out += String(format: "%%%02X", byte)
            }
        }
        return out
    }
}
