import Foundation
import TestSupport
import Testing
import TokenKit

#if canImport(Glibc)
    import Glibc
#endif

/// `tokentool issuer` and `tokentool exchange` as a user runs them, against a live
/// `tokentool serve` whose configuration has an issuer.
@Suite("tokentool issuer and exchange")
struct ExchangeCLITests {
    @Test func exchangeRotateAndVerify() async throws {
        try await offThePool { try walk() }
    }

    func walk() throws {
        let dir = try temporaryDirectory()
        let state = dir.appendingPathComponent("state").path
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let secret = (state as NSString).appendingPathComponent("idp.secret")
        #expect(FileManager.default.createFile(atPath: secret, contents: Data("exchange-test-secret-0123456789abcdef".utf8), attributes: [.posixPermissions: 0o600]))
        let keys = (state as NSString).appendingPathComponent("issuer")
        let configuration = """
            {"state": "\(state)", "listen": {"port": 0},
             "providers": {"idp": {"type": "hs256", "secretFile": "\(secret)", "issuers": ["idp"],
               "permissions": {"read": {"everything": true, "queriesByCollection": {}}, "write": {"everything": false, "queriesByCollection": {}}}}},
             "issuer": {"audiences": ["partner-api"], "keyDirectory": "\(keys)", "reloadSeconds": 0.1}}
            """
        try configuration.write(to: dir.appendingPathComponent("server.json"), atomically: true, encoding: .utf8)
        let serve = try ServeProcess.start(until: "listening on", arguments: ["serve", "--config", "server.json"], in: dir)
        let process = serve.process
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        let text = serve.output
        let base = try #require(text.firstMatch(of: /listening on (http:\/\/127\.0\.0\.1:\d+)/)?.1).description

        let listed = try run(tokentoolExecutable, ["issuer", "list", "--dir", keys])
        #expect(listed.out.contains("current") && listed.out.contains("next"), "\(listed.out)\(listed.err)")
        let user = try run(tokentoolExecutable, ["sign", "--secret-file", secret, "--iss", "idp", "--sub", "u1", "--expires-in", "600"], cwd: dir)
        #expect(user.status == 0, "\(user.err)")
        let exchanged = try run(tokentoolExecutable, ["exchange", "--url", base, "--provider", "idp", "--audience", "partner-api", "-"], stdin: Data(user.out.utf8))
        #expect(exchanged.status == 0, "\(exchanged.err)")
        let token = exchanged.out.trimmingCharacters(in: .whitespacesAndNewlines)
        let verified = try run(tokentoolExecutable, ["verify", "--oidc", base, "--allow-http-loopback", "--aud", "partner-api", "-"], stdin: Data(token.utf8))
        #expect(verified.status == 0, "\(verified.out)\(verified.err)")
        #expect(verified.out.contains("idp:u1"), "\(verified.out)")
        let refused = try run(tokentoolExecutable, ["exchange", "--url", base, "--provider", "idp", "--audience", "evil", "-"], stdin: Data(user.out.utf8))
        #expect(refused.status == 1)
        #expect(refused.err.contains("REFUSED invalid_target"), "\(refused.err)")

        func kid(_ token: String) -> String? {
            guard let header = token.split(separator: ".").first, let bytes = Base64URL.decode(String(header)) else { return nil }
            return (try? JSONValue.parse(bytes))?.objectValue?["kid"]?.stringValue
        }
        func key(_ state: String) throws -> String? {
            let listed = try run(tokentoolExecutable, ["issuer", "list", "--dir", keys])
            return listed.out.split(separator: "\n").first { $0.hasSuffix("  \(state)") }?.split(separator: " ").first.map(String.init)
        }
        let before = try #require(try key("current"))
        let next = try #require(try key("next"))
        #expect(kid(token) == before, "\(token)")

        let rotated = try run(tokentoolExecutable, ["issuer", "rotate", "--dir", keys, "--retire-after", "600"])
        #expect(rotated.status == 0, "\(rotated.err)")
        #expect(rotated.out.contains("retired (published until"), "\(rotated.out)")
        #expect(try key("current") == next, "the next key became the current one")
        // The server re-reads the directory every 0.1 s; polled, with a generous deadline, until an
        // exchanged token is signed by the new key.
        var renewed = ""
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            let again = try run(tokentoolExecutable, ["exchange", "--url", base, "--provider", "idp", "--audience", "partner-api", "-"], stdin: Data(user.out.utf8))
            #expect(again.status == 0, "\(again.err)")
            renewed = again.out.trimmingCharacters(in: .whitespacesAndNewlines)
            if kid(renewed) == next || again.status != 0 { break }
            usleep(100_000)
        }
        #expect(kid(renewed) == next, "tokens after the rotation carry the new kid: \(renewed)")
        // Both verify from the published keys: the new token, and the old one (its key is retired,
        // still published).
        for (name, jwt) in [("new", renewed), ("old", token)] {
            let checked = try run(tokentoolExecutable, ["verify", "--oidc", base, "--allow-http-loopback", "--aud", "partner-api", "-"], stdin: Data(jwt.utf8))
            #expect(checked.status == 0, "\(name): \(checked.out)\(checked.err)")
        }
        process.terminate()
        process.waitForExit()
    }
    /// An exchange ends within its --timeout even when the server sends the head of its answer
    /// and then its body a little at a time: AsyncHTTPClient's deadline covered the head only,
    /// and the command waited as long as the server kept sending.
    @Test func anExchangeEndsWithinItsTimeout() async throws {
        // 128 KiB a KiB a second: two minutes, were the body not cut off.
        let server = try KeyServer(plain: true, routes: ["/v1/token": Route(body: String(repeating: " ", count: 128 * 1024), trickle: 1)])
        defer { server.stop() }
        let started = Date()
        let result = try await runDetached(
            tokentoolExecutable, ["exchange", "--url", "http://127.0.0.1:\(server.port)", "--provider", "idp", "--audience", "a", "--timeout", "1.5", "a.b.c"])
        let took = Date().timeIntervalSince(started)
        #expect(result.status == 2, "\(result.out)\(result.err)")
        #expect(result.err.contains("did not answer in full within 1.5 s"), "\(result.err)")
        #expect(took < 60, "took \(took) s")  // 1.5 s and the process's start and exit, with room for a busy machine
        #expect(server.requests.contains { $0.hasPrefix("POST 127.0.0.1/v1/token") }, "\(server.requests)")
        #expect(try run(tokentoolExecutable, ["exchange", "--url", "http://x", "--provider", "p", "--audience", "a", "--timeout", "0", "a.b.c"]).status == 2)
    }

}
