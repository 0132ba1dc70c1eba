import Foundation
import Logging
import NIOHTTP1
import PeerCA
import Synchronization
import TestSupport
import Testing
import TokenKit
@testable import TokenServer

/// The stand-in for OpenWeb's SSO backend (`Tests/TestSupport/openweb_server.py`): real HTTPS on
/// loopback with a certificate from ``TestPKI``, on a port the OS picks, following the documented
/// `register-user` contract and checking the access token. Stopped by ``stop()`` (and when the
/// test process exits, via its standard input).
final class OpenWebServer: Sendable {
    let port: Int
    let dir: URL
    /// The access token OpenWeb expects; `tokenFile` (mode 0600) holds it.
    let accessToken: String
    let tokenFile: String
    private let process: Process
    private let stdin: Pipe

    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("TestSupport/openweb_server.py").path

    init() throws {
        let pki = try TestPKI.shared.get()
        dir = try temporaryDirectory()
        // `+`, `/` and `=` must reach OpenWeb as themselves (percent-encoded in the query).
        accessToken = "03160206m9oGNw+/=" + UUID().uuidString.prefix(13)
        tokenFile = dir.appendingPathComponent("openweb.token").path
        try SecureFile.writeNew(tokenFile, Array((accessToken + "\n").utf8), mode: 0o600)
        _ = FileManager.default.createFile(atPath: dir.appendingPathComponent("requests.log").path, contents: nil)
        (process, stdin, port) = try startScriptServer(Self.script, [
            "--cert", pki.certFile, "--key", pki.keyFile, "--token-file", tokenFile,
            "--log", dir.appendingPathComponent("requests.log").path, "--mode-file", dir.appendingPathComponent("mode.json").path,
            "--connections", dir.appendingPathComponent("connections.log").path,
        ])
    }

    var baseURL: String { "https://localhost:\(port)/api" }

    /// The behaviour (see the script): `normal`, `json`, `slow` (with `delay`), `redirect`, `echo`,
    /// `empty`, `huge`.
    func setMode(_ mode: String, delay: Double = 0) throws {
        let temporary = dir.appendingPathComponent("mode.tmp")
        try Data(JSONValue.object(["mode": .string(mode), "delay": .number(String(delay))]).compactText.utf8).write(to: temporary)
        guard rename(temporary.path, dir.appendingPathComponent("mode.json").path) == 0 else { throw TestFailure("cannot rename the mode file") }
    }

    /// What OpenWeb received, in order: `{method, path, query: {name: [values]}, accept, codeB}`.
    var requests: [[String: JSONValue]] {
        let text = (try? String(contentsOf: dir.appendingPathComponent("requests.log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { (try? JSONValue.parse(String($0)))?.objectValue }
    }

    /// The TCP connections OpenWeb accepted so far (before their TLS handshakes).
    var connections: Int { acceptedConnections(in: dir) }

    func stop() {
        try? stdin.fileHandleForWriting.close()
        process.waitForExit()
    }

    /// An `openweb` section for this server, trusting the test CA.
    func section(tokenFile: String? = nil, timeout: Double? = nil, caFile: String? = nil) throws -> ServerConfiguration.OpenWeb {
        let testCA = try TestPKI.shared.get().caFile
        return ServerConfiguration.OpenWeb(baseURL: baseURL, accessTokenFile: tokenFile ?? self.tokenFile, caFile: caFile ?? testCA, timeoutSeconds: timeout)
    }
}

extension JSONValue {
    /// A query parameter's only value in a request the stand-in logged.
    func parameter(_ name: String) -> String? {
        guard case .array(let values)? = objectValue?[name], values.count == 1 else { return nil }
        return values[0].stringValue
    }
}

/// A `POST /v1/sso/openweb` over real HTTP: status, JSON and the raw text.
func openWebSSO(_ server: LiveServer, _ object: [String: JSONValue]) async throws -> (status: Int, json: [String: JSONValue], text: String) {
    try await openWebSSO(server, Array(JSONValue.object(object).compactText.utf8))
}

func openWebSSO(_ server: LiveServer, _ body: [UInt8]) async throws -> (status: Int, json: [String: JSONValue], text: String) {
    let (status, bytes, _) = try await server.request(.POST, "/v1/sso/openweb", body: body)
    return (status, (try? JSONValue.parse(bytes))?.objectValue ?? [:], String(decoding: bytes, as: UTF8.self))
}

/// Keeps every log line (level, message, metadata) of a logger.
final class LogCapture: Sendable {
    let lines = Mutex<[String]>([])

    var logger: Logger {
        var logger = Logger(label: "openweb-tests") { _ in Handler(capture: self) }
        logger.logLevel = .trace
        return logger
    }

    struct Handler: LogHandler {
        let capture: LogCapture
        var metadata: Logger.Metadata = [:]
        var metadataProvider: Logger.MetadataProvider?
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let all = metadata.merging(event.metadata ?? [:]) { $1 }
            let line = "\(event.level) \(event.message) \(all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")) \(event.error.map { "\($0)" } ?? "")"
            capture.lines.withLock { $0.append(line) }
        }
    }
}

@Suite("OpenWeb SSO: vouching for a verified user", .serialized)
struct OpenWebTests {
    static let codeA = "egosnilivzvbxeoeazhymjzswmlbplagrcyyvywm"

    /// The flow: the token verified, OpenWeb called with code_a, primary_key, user_name and the
    /// access token, its codeB answered; renewal is the same with a new codeA.
    @Test func vouchesForAVerifiedUser() async throws {
        let openweb = try OpenWebServer()
        defer { openweb.stop() }
        let section = try openweb.section()
        try await LiveServer.with(configure: { $0.openweb = section }) { server in
            let name = "Ada Lovelace & Co+1 = ü"
            let token = try server.token(["name": .string(name)])
            let reply = try await openWebSSO(server, ["provider": .string("dev"), "token": .string(token), "codeA": .string(Self.codeA)])
            #expect(reply.status == 200, "\(reply.text)")
            let received = openweb.requests
            try #require(received.count == 1)
            let query = try #require(received[0]["query"])
            #expect(received[0]["path"]?.stringValue == "/api/sso/v1/register-user")
            #expect(query.parameter("code_a") == Self.codeA)
            #expect(query.parameter("primary_key") == "dev:user-7")  // the account UID
            #expect(query.parameter("user_name") == name)
            #expect(query.parameter("access_token") == openweb.accessToken)  // it reached OpenWeb, intact
            let madeCodeB = try #require(received[0]["codeB"]?.stringValue)
            #expect(reply.json == ["codeB": .string(madeCodeB)])
            #expect(!reply.text.contains(openweb.accessToken))

            // Renewal (renewSSO): a new codeA, a new codeB for the same user.
            let renewed = try await openWebSSO(server, ["provider": .string("dev"), "token": .string(token), "codeA": .string("renewal-code-a_1")])
            #expect(renewed.status == 200)
            let renewedCodeB = try #require(openweb.requests.last?["codeB"]?.stringValue)
            #expect(renewed.json["codeB"]?.stringValue == renewedCodeB)
            #expect(renewedCodeB != madeCodeB)

            // An answer in JSON ({"code_b": …}) works the same.
            try openweb.setMode("json")
            let fromJSON = try await openWebSSO(server, ["provider": .string("dev"), "token": .string(token), "codeA": .string("json-code-a")])
            #expect(fromJSON.status == 200, "\(fromJSON.text)")
            #expect(fromJSON.json["codeB"]?.stringValue == openweb.requests.last?["codeB"]?.stringValue)

            let metrics = String(decoding: try await server.request(.GET, "/metrics").body, as: UTF8.self)
            #expect(metrics.contains(#"tokenserver_openweb_requests_total{result="ok"}"#), "\(metrics.prefix(2000))")
            #expect(metrics.contains(#"endpoint="openweb""#))
            #expect(!metrics.contains(openweb.accessToken))
        }
    }

    /// `primaryKeyClaim` and `userNameClaim` choose the claims; a token without them (or with a
    /// value that is not a string) is refused, and OpenWeb hears nothing.
    @Test func configuredClaimsAreRequired() async throws {
        let openweb = try OpenWebServer()
        defer { openweb.stop() }
        var configured = try openweb.section()
        configured.primaryKeyClaim = "uid"
        configured.userNameClaim = "preferred_username"
        let section = configured
        try await LiveServer.with(configure: { $0.openweb = section }) { server in
            func sso(_ claims: [String: JSONValue]) async throws -> (status: Int, json: [String: JSONValue], text: String) {
                try await openWebSSO(server, ["provider": .string("dev"), "token": .string(try server.token(claims)), "codeA": .string(Self.codeA)])
            }
            let refusals: [([String: JSONValue], String)] = [
                (["preferred_username": .string("ada")], "missing_claim"),  // no uid
                (["uid": .integer(42), "name": .string("Ada")], "missing_claim"),  // the default claim does not stand in
                (["uid": .object([:]), "preferred_username": .string("ada")], "invalid_claim"),
                (["uid": .integer(42), "preferred_username": .string("")], "invalid_claim"),
                (["uid": .integer(42), "preferred_username": .string("ada\nlovelace")], "invalid_claim"),
                (["uid": .integer(42), "preferred_username": .string(String(repeating: "a", count: 257))], "invalid_claim"),
            ]
            for (claims, code) in refusals {
                let reply = try await sso(claims)
                #expect(reply.status == 403, "\(claims)")
                #expect(reply.json["error"].errorCode == code, "\(claims): \(reply.text)")
            }
            #expect(openweb.requests.isEmpty)
            let accepted = try await sso(["uid": .integer(42), "preferred_username": .string("ada")])
            #expect(accepted.status == 200, "\(accepted.text)")
            let query = openweb.requests.last?["query"]
            #expect(query?.parameter("primary_key") == "42")
            #expect(query?.parameter("user_name") == "ada")
        }
    }

    /// Bad input gets the typed errors of the other endpoints, and nothing is sent to OpenWeb.
    @Test func badInputSendsNothing() async throws {
        let openweb = try OpenWebServer()
        defer { openweb.stop() }
        let section = try openweb.section()
        try await LiveServer.with(configure: {
            $0.openweb = section
            $0.providers["dev"]?.factors = .init(require: ["mfa"])
        }) { server in
            let mfa: [String: JSONValue] = ["name": .string("Ada"), "amr": .array([.string("mfa")])]
            let good = try server.token(mfa)
            func body(_ extra: [String: JSONValue]) -> [String: JSONValue] {
                ["provider": .string("dev"), "token": .string(good), "codeA": .string(Self.codeA)].merging(extra) { $1 }
            }
            var withoutCodeA = body([:])
            withoutCodeA["codeA"] = nil
            let cases: [([UInt8], Int, String)] = [
                (Array("{not json".utf8), 400, "invalid_request"),
                (Array(JSONValue.object(withoutCodeA).compactText.utf8), 400, "invalid_request"),
                (Array(JSONValue.object(body(["codeA": .integer(7)])).compactText.utf8), 400, "invalid_request"),
                (Array(JSONValue.object(body(["codeA": .string("")])).compactText.utf8), 400, "invalid_request"),
                (Array(JSONValue.object(body(["codeA": .string(String(repeating: "a", count: 257))])).compactText.utf8), 400, "invalid_request"),
                (Array(JSONValue.object(body(["codeA": .string("code a")])).compactText.utf8), 400, "invalid_request"),
                (Array(JSONValue.object(body(["codeA": .string("code\u{7}a")])).compactText.utf8), 400, "invalid_request"),
                (Array(JSONValue.object(body(["primary_key": .string("someone-else")])).compactText.utf8), 400, "invalid_request"),
                (Array(JSONValue.object(body(["provider": .string("nobody")])).compactText.utf8), 400, "unknown_provider"),
                (Array(JSONValue.object(body(["appID": .string("other-app")])).compactText.utf8), 400, "app_mismatch"),
                (Array(JSONValue.object(body(["token": .string("not-a-token")])).compactText.utf8), 401, "malformed"),
                (Array(JSONValue.object(body(["token": .string(try server.token(mfa, secret: Array(repeating: 7, count: 32)))])).compactText.utf8), 401, "bad_signature"),
                (Array(JSONValue.object(body(["token": .string(try server.token(mfa, lifetime: -120))])).compactText.utf8), 401, "expired"),
                (Array(JSONValue.object(body(["token": .string(try server.token(["name": .string("Ada")]))])).compactText.utf8), 403, "factor_required"),
                (Array(JSONValue.object(body(["token": .string(try server.token(["amr": .array([.string("mfa")])]))])).compactText.utf8), 403, "missing_claim"),
            ]
            for (request, status, code) in cases {
                let reply = try await openWebSSO(server, request)
                #expect(reply.status == status, "\(code): \(reply.text)")
                #expect(reply.json["error"].errorCode == code, "\(reply.text)")
            }
            #expect(openweb.requests.isEmpty, "\(openweb.requests)")

            // The same request, well formed, does reach OpenWeb …
            let accepted = try await openWebSSO(server, body([:]))
            #expect(accepted.status == 200, "\(accepted.text)")
            #expect(openweb.requests.count == 1)
            // … until the user logs out: then the token's session has ended.
            let logout = try await server.json("/v1/logout", ["provider": .string("dev"), "token": .string(good)])
            #expect(logout.status == 200)
            let ended = try await openWebSSO(server, body([:]))
            #expect(ended.status == 401)
            #expect(ended.json["error"].errorCode == "session_ended")
            #expect(openweb.requests.count == 1)

            let metrics = String(decoding: try await server.request(.GET, "/metrics").body, as: UTF8.self)
            #expect(metrics.contains(#"tokenserver_openweb_requests_total{result="rejected"}"#))
        }
    }

    /// OpenWeb's refusals are 502 upstream_refused with its status and a short excerpt — never the
    /// access token, even when OpenWeb echoes it.
    @Test func openWebRefusalsAreReportedWithoutTheSecret() async throws {
        let openweb = try OpenWebServer()
        defer { openweb.stop() }
        // A wrong access token: OpenWeb answers 403.
        let wrongToken = "wrong-" + UUID().uuidString
        let wrongFile = try temporaryDirectory().appendingPathComponent("wrong.token").path
        try SecureFile.writeNew(wrongFile, Array(wrongToken.utf8), mode: 0o600)
        let wrong = try openweb.section(tokenFile: wrongFile)
        try await LiveServer.with(configure: { $0.openweb = wrong }) { server in
            let token = try server.token(["name": .string("Ada")])
            let reply = try await openWebSSO(server, ["provider": .string("dev"), "token": .string(token), "codeA": .string(Self.codeA)])
            #expect(reply.status == 502, "\(reply.text)")
            let error = try #require(reply.json["error"]?.objectValue)
            #expect(error["code"]?.stringValue == "upstream_refused")
            #expect(error["upstreamStatus"] == .integer(403))
            #expect(error["upstreamExcerpt"]?.stringValue?.contains("invalid access token") == true, "\(reply.text)")
            #expect(openweb.requests.last?["query"]?.parameter("access_token") == wrongToken)
            #expect(!reply.text.contains(wrongToken) && !reply.text.contains(openweb.accessToken))
        }
        let section = try openweb.section()
        try await LiveServer.with(configure: { $0.openweb = section }) { server in
            let token = try server.token(["name": .string("Ada")])
            func sso() async throws -> (status: Int, json: [String: JSONValue], text: String) {
                try await openWebSSO(server, ["provider": .string("dev"), "token": .string(token), "codeA": .string(Self.codeA)])
            }
            // OpenWeb's error page echoes the request, access token and all.
            try openweb.setMode("echo")
            let echoed = try await sso()
            #expect(echoed.status == 502)
            #expect(echoed.json["error"]?.objectValue?["upstreamStatus"] == .integer(500))
            let excerpt = echoed.json["error"]?.objectValue?["upstreamExcerpt"]?.stringValue ?? ""
            #expect(excerpt.contains("access_token=[redacted]"), "\(excerpt)")
            #expect(!echoed.text.contains(openweb.accessToken), "\(echoed.text)")
            #expect(!echoed.text.contains(OpenWebSSO.percentEncoded(openweb.accessToken)), "\(echoed.text)")
            #expect(excerpt.count <= OpenWebSSO.maxExcerptCharacters + 3)
            // A success without a codeB, and an answer over the cap.
            for mode in ["empty", "huge"] {
                try openweb.setMode(mode)
                let reply = try await sso()
                #expect(reply.status == 502, "\(mode)")
                #expect(reply.json["error"].errorCode == "upstream_refused", "\(mode): \(reply.text)")
                #expect(reply.json["error"]?.objectValue?["upstreamStatus"] == .integer(200))
            }
            let metrics = String(decoding: try await server.request(.GET, "/metrics").body, as: UTF8.self)
            #expect(metrics.contains(#"tokenserver_openweb_requests_total{result="upstream_refused"}"#))
        }
    }

    /// A redirect from OpenWeb is a refusal; its target is never asked.
    @Test func redirectsAreNotFollowed() async throws {
        let openweb = try OpenWebServer()
        defer { openweb.stop() }
        try openweb.setMode("redirect")
        let section = try openweb.section()
        try await LiveServer.with(configure: { $0.openweb = section }) { server in
            let token = try server.token(["name": .string("Ada")])
            let reply = try await openWebSSO(server, ["provider": .string("dev"), "token": .string(token), "codeA": .string(Self.codeA)])
            #expect(reply.status == 502, "\(reply.text)")
            #expect(reply.json["error"].errorCode == "upstream_refused")
            #expect(reply.json["error"]?.objectValue?["upstreamStatus"] == .integer(302))
            #expect(!reply.text.contains("cb_from_the_redirect_target"))
            // A client that follows redirects asks the target before it hands back an answer; a
            // second call after this one orders the log, so the target would sit between the two.
            try openweb.setMode("normal")
            let after = try await openWebSSO(server, ["provider": .string("dev"), "token": .string(token), "codeA": .string(Self.codeA)])
            #expect(after.status == 200, "\(after.text)")
            #expect(openweb.requests.map { $0["path"]?.stringValue } == ["/api/sso/v1/register-user", "/api/sso/v1/register-user"])
        }
    }

    /// OpenWeb slow, untrusted or down: 503 upstream_unavailable, within the timeout.
    @Test func openWebUnavailable() async throws {
        let openweb = try OpenWebServer()
        defer { openweb.stop() }
        let pki = try TestPKI.shared.get()

        // Slow: the answer would come after 4 s; the timeout is 1 s.
        try openweb.setMode("slow", delay: 4)
        let slow = try openweb.section(timeout: 1)
        try await LiveServer.with(configure: { $0.openweb = slow }) { server in
            let token = try server.token(["name": .string("Ada")])
            let reply = try await openWebSSO(server, ["provider": .string("dev"), "token": .string(token), "codeA": .string(Self.codeA)])
            #expect(reply.status == 503, "\(reply.text)")
            #expect(reply.json["error"].errorCode == "upstream_unavailable")
            // A 503 rather than OpenWeb's answer (after 4 s) is the timeout's doing, and says so.
            #expect(reply.text.contains("no answer"), "\(reply.text)")
            #expect(openweb.requests.count == 1)  // it was asked, and did not answer in time
        }

        // Untrusted: OpenWeb's certificate does not chain to caFile. The failed handshake ends the
        // call with its cause, on the one connection: not tried again until the 8 s timeout.
        try openweb.setMode("normal")
        let untrusted = try openweb.section(timeout: 8, caFile: pki.otherCAFile)
        try await LiveServer.with(configure: { $0.openweb = untrusted }) { server in
            let token = try server.token(["name": .string("Ada")])
            let connectionsBefore = openweb.connections
            let reply = try await openWebSSO(server, ["provider": .string("dev"), "token": .string(token), "codeA": .string(Self.codeA)])
            #expect(openweb.connections == connectionsBefore + 1)
            #expect(reply.status == 503, "\(reply.text)")
            #expect(reply.json["error"].errorCode == "upstream_unavailable")
            #expect(reply.text.contains("TLS"), "\(reply.text)")
            #expect(openweb.requests.count == 1)  // nothing new was received: the handshake failed
        }

        // Down: the server is stopped.
        openweb.stop()
        let down = try openweb.section(timeout: 2)
        try await LiveServer.with(configure: { $0.openweb = down }) { server in
            let token = try server.token(["name": .string("Ada")])
            let reply = try await openWebSSO(server, ["provider": .string("dev"), "token": .string(token), "codeA": .string(Self.codeA)])
            #expect(reply.status == 503, "\(reply.text)")
            #expect(reply.json["error"].errorCode == "upstream_unavailable")
            #expect(!reply.text.contains(openweb.accessToken))
            let metrics = String(decoding: try await server.request(.GET, "/metrics").body, as: UTF8.self)
            #expect(metrics.contains(#"tokenserver_openweb_requests_total{result="upstream_unavailable"}"#))
        }
    }

    /// Without an `openweb` section the endpoint answers 404 openweb_disabled.
    @Test func disabledWithoutConfiguration() async throws {
        try await LiveServer.with { server in
            let reply = try await openWebSSO(server, ["provider": .string("dev"), "token": .string(try server.token()), "codeA": .string(Self.codeA)])
            #expect(reply.status == 404)
            #expect(reply.json["error"].errorCode == "openweb_disabled")
        }
    }

    /// Configuration errors name the key: HTTPS only, a token file that only its owner can read,
    /// a timeout within the request's.
    @Test func configurationIsChecked() async throws {
        let permissions = #""permissions": {"read": {"everything": true, "queriesByCollection": {}}, "write": {"everything": true, "queriesByCollection": {}}}"#
        func key(_ openweb: String, limits: String = "") -> String {
            let json = #"{"providers": {"a": {"type": "pda", \#(permissions)}}, \#(limits)"openweb": \#(openweb)}"#
            do { _ = try ServerConfiguration.parse(Data(json.utf8)); return "" } catch { return error.key }
        }
        #expect(key(#"{"baseURL": "https://www.spot.im/api", "accessTokenFile": "/etc/openweb.token"}"#) == "")
        #expect(key(#"{"baseURL": "http://www.spot.im/api", "accessTokenFile": "/x"}"#) == "openweb.baseURL")
        #expect(key(#"{"baseURL": "http://127.0.0.1:8443/api", "accessTokenFile": "/x"}"#) == "openweb.baseURL")
        #expect(key(#"{"baseURL": "www.spot.im/api", "accessTokenFile": "/x"}"#) == "openweb.baseURL")
        #expect(key(#"{"baseURL": "https://user:pw@www.spot.im/api", "accessTokenFile": "/x"}"#) == "openweb.baseURL")
        #expect(key(#"{"baseURL": "https://www.spot.im/api?x=1", "accessTokenFile": "/x"}"#) == "openweb.baseURL")
        #expect(key(#"{"baseURL": "https://www.spot.im/api"}"#) == "openweb.accessTokenFile")
        #expect(key(#"{"baseURL": "https://www.spot.im/api", "accessTokenFile": ""}"#) == "openweb.accessTokenFile")
        #expect(key(#"{"baseURL": "https://www.spot.im/api", "accessTokenFile": "/x", "userNameClaim": ""}"#) == "openweb.userNameClaim")
        #expect(key(#"{"baseURL": "https://www.spot.im/api", "accessTokenFile": "/x", "primaryKeyClaim": ""}"#) == "openweb.primaryKeyClaim")
        #expect(key(#"{"baseURL": "https://www.spot.im/api", "accessTokenFile": "/x", "timeoutSeconds": 0}"#) == "openweb.timeoutSeconds")
        #expect(key(#"{"baseURL": "https://www.spot.im/api", "accessTokenFile": "/x", "timeoutSeconds": 10}"#) == "openweb.timeoutSeconds")
        #expect(key(#"{"baseURL": "https://www.spot.im/api", "accessTokenFile": "/x", "timeoutSeconds": 10}"#, limits: #""limits": {"requestTimeoutSeconds": 20}, "#) == "")

        // At start: the token file must be private and hold a token; the CA file must be PEM.
        let dir = try temporaryDirectory()
        let secret = "s3cret-" + UUID().uuidString
        func startError(_ contents: String, mode: mode_t, caFile: String? = nil) async throws -> ConfigurationError? {
            let file = dir.appendingPathComponent(UUID().uuidString).path
            try SecureFile.writeNew(file, Array(contents.utf8), mode: 0o600)
            chmod(file, mode)
            var configuration = try ServerConfiguration.embeddedDefaults(state: try temporaryDirectory().path, port: 0)
            configuration.openweb = .init(baseURL: "https://localhost:1/api", accessTokenFile: file, caFile: caFile)
            do {
                let service = try await TokenService.start(configuration: configuration, logger: Logger(label: "test"))
                await service.shutdown()
                return nil
            } catch let error as ConfigurationError {
                return error
            }
        }
        let readable = try await startError(secret, mode: 0o644)
        #expect(readable?.key == "openweb.accessTokenFile")
        #expect(readable?.message.contains("chmod 600") == true, "\(String(describing: readable))")
        #expect(readable?.description.contains(secret) == false)
        #expect(try await startError("  \n", mode: 0o600)?.key == "openweb.accessTokenFile")
        let spaced = try await startError("two words", mode: 0o600)
        #expect(spaced?.key == "openweb.accessTokenFile")
        #expect(spaced?.description.contains("two words") == false)
        let notPEM = dir.appendingPathComponent("not.pem").path
        try "not a certificate".write(toFile: notPEM, atomically: true, encoding: .utf8)
        #expect(try await startError(secret, mode: 0o600, caFile: notPEM)?.key == "openweb.caFile")
        #expect(try await startError(secret, mode: 0o600) == nil)
    }

    /// The access token is in no log line, whatever happens: every line the service logs (at
    /// trace) through success, refusal, an echoing error page and a timeout.
    @Test func theAccessTokenIsNeverLogged() async throws {
        let openweb = try OpenWebServer()
        defer { openweb.stop() }
        let capture = LogCapture()
        var configuration = try ServerConfiguration.embeddedDefaults(state: try temporaryDirectory().path, port: 0)
        configuration.openweb = try openweb.section(timeout: 1)
        let service = try await TokenService.start(configuration: configuration, logger: capture.logger)
        let secret = Array(try Data(contentsOf: URL(fileURLWithPath: ServerConfiguration.devSecretPath(state: configuration.stateDirectory))))
        let now = Int(Date().timeIntervalSince1970)
        let token = try JWTSigner(key: try JWTKey.hmac(secret: secret)).sign(claims: [
            "iss": .string(ServerConfiguration.devIssuer), "sub": .string("logged"), "iat": .integer(now), "exp": .integer(now + 600),
            "name": .string("Ada"),
        ])
        let body = Array(JSONValue.object(["provider": .string("dev"), "token": .string(token), "codeA": .string(Self.codeA)]).compactText.utf8)
        var answers: [String] = []
        for (mode, status) in [("normal", 200), ("echo", 502), ("redirect", 502), ("huge", 502), ("slow", 503)] {
            try openweb.setMode(mode, delay: 3)
            let reply = await service.openWebSSO(body)
            #expect(reply.status == status, "\(mode): \(String(decoding: reply.body, as: UTF8.self))")
            answers.append(String(decoding: reply.body, as: UTF8.self))
        }
        await service.shutdown()
        let lines = capture.lines.withLock { $0 }
        #expect(lines.contains { $0.contains("OpenWeb SSO: vouched") }, "\(lines)")
        #expect(lines.contains { $0.contains("OpenWeb refused") })
        #expect(lines.contains { $0.contains("OpenWeb unavailable") })
        for form in [openweb.accessToken, OpenWebSSO.percentEncoded(openweb.accessToken)] {
            #expect(!lines.contains { $0.contains(form) }, "\(lines)")
            #expect(!answers.contains { $0.contains(form) }, "\(answers)")
        }
        #expect(openweb.requests.allSatisfy { $0["query"]?.parameter("access_token") == openweb.accessToken })
    }

    /// The endpoint's live answers (success and each error) match docs/openapi.json.
    @Test func liveResponsesMatchTheDocument() async throws {
        let openweb = try OpenWebServer()
        defer { openweb.stop() }
        let section = try openweb.section(timeout: 1)
        let disabled = try await LiveServer.with { server in
            [try await openWebSSO(server, ["provider": .string("dev"), "token": .string(try server.token()), "codeA": .string(Self.codeA)])]
        }
        let enabled = try await LiveServer.with(configure: { $0.openweb = section }) { server in
            func sso(_ token: String, codeA: JSONValue = .string(Self.codeA)) async throws -> (status: Int, json: [String: JSONValue], text: String) {
                try await openWebSSO(server, ["provider": .string("dev"), "token": .string(token), "codeA": codeA])
            }
            let named = try server.token(["name": .string("Ada")])
            var replies = [try await sso(named)]  // 200
            replies.append(try await sso(named, codeA: .integer(1)))  // 400
            replies.append(try await sso("a.b.c"))  // 401
            replies.append(try await sso(try server.token()))  // 403 missing_claim
            try openweb.setMode("echo")
            replies.append(try await sso(named))  // 502
            try openweb.setMode("slow", delay: 3)
            replies.append(try await sso(named))  // 503
            return replies
        }
        let recorded: [JSONValue] = (disabled + enabled).map { reply in
            .object([
                "path": .string("/v1/sso/openweb"), "method": .string("post"), "status": .integer(reply.status),
                "contentType": .string("application/json"), "body": .object(reply.json),
            ])
        }
        #expect(recorded.map { $0.objectValue?["status"] } == [404, 200, 400, 401, 403, 502, 503].map { .integer($0) })
        let file = try temporaryDirectory().appendingPathComponent("responses.json")
        try JSONValue.array(recorded).prettyText.write(to: file, atomically: true, encoding: .utf8)
        let python = try #require(which("python3"))
        let result = try await runDetached(python, [
            ContractTests.root.appendingPathComponent("scripts/check_openapi.py").path,
            ContractTests.root.appendingPathComponent("docs/openapi.json").path, file.path,
        ])
        #expect(result.status == 0, "\(result.out)\(result.err)")
        #expect(result.out.contains("7 passed, 0 failed"), "\(result.out)\(result.err)")
    }
}
