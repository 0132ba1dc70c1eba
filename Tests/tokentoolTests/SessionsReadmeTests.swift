import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The README's "Identity and sessions" shell lines, run with bash against a live
/// `tokentool serve` on the embedded defaults: log in, get a certificate, log out, and the same
/// token refused.
@Suite("README sessions walk-through")
struct SessionsReadmeTests {
    @Test func theReadmeSessionLinesWork() async throws {
        try await offThePool { try walkThrough() }
    }

    func walkThrough() throws {
        let readme = try String(contentsOf: Fixtures.root.appendingPathComponent("README.md"), encoding: .utf8)
        let block = try #require(readme.firstMatch(of: /<!-- sessions:begin -->\n```sh\n([\s\S]*?)```\n<!-- sessions:end -->/)?.1)
        let serve = try ServeProcess.start(until: "curl -s")
        defer { if serve.process.isRunning { kill(serve.process.processIdentifier, SIGKILL) } }
        let base = try #require(serve.output.firstMatch(of: /listening on (http:\/\/127\.0\.0\.1:\d+)/)?.1)
        #expect(block.contains("BASE=http://127.0.0.1:8080"))
        let script = "set -euo pipefail\n" + block.replacingOccurrences(of: "BASE=http://127.0.0.1:8080", with: "BASE=\(base)")
            .replacingOccurrences(of: "   # \"session_ended\"", with: "")
        // One output line per curl, in order: login, certificate, logout, login again.
        let tools = tokentoolExecutable.deletingLastPathComponent().path
        let bash = try #require(which("bash"))
        let result = try run(bash, ["-c", "export PATH=\"\(tools):$PATH\"\n" + script.replacingOccurrences(of: "\ncurl ", with: "\necho; curl ")], cwd: serve.directory)
        #expect(result.status == 0, "\(result.out)\(result.err)")
        let answers = result.out.split(separator: "\n").filter { $0.hasPrefix("{") }
        #expect(answers.count == 4, "\(result.out)")
        guard answers.count == 4 else { return }
        #expect(answers[0].contains(#""authenticate":true"#) && answers[0].contains(#""userID":"dev:ada""#), "\(answers[0])")
        #expect(answers[1].contains(#""serial":"#) && answers[1].contains(#""account":"dev:ada""#), "\(answers[1])")
        #expect(answers[2].contains(#""revoked":[""#), "\(answers[2])")
        #expect(answers[3].contains(#""session_ended""#), "\(answers[3])")
        serve.process.terminate()
        serve.process.waitForExit()
    }
}

func readmeBlock(_ name: String) throws -> String {
    let readme = try String(contentsOf: Fixtures.root.appendingPathComponent("README.md"), encoding: .utf8)
    guard let begin = readme.range(of: "<!-- \(name):begin -->\n```sh\n"), let end = readme.range(of: "```\n<!-- \(name):end -->", range: begin.upperBound..<readme.endIndex) else {
        throw CocoaError(.fileReadCorruptFile, userInfo: [NSLocalizedDescriptionKey: "README.md has no \(name) block"])
    }
    return String(readme[begin.upperBound..<end.lowerBound])
}

/// Runs README lines that start a server as `SERVE` with bash (`set -euo pipefail`, the built
/// tokentool first on PATH), in `dir`; a trap stops the server even when a line fails before
/// `kill $SERVE`.
func runServingBlock(_ block: String, in dir: URL) throws -> (status: Int32, out: String, err: String) {
    let script = "set -euo pipefail\ntrap 'if [ -n \"${SERVE:-}\" ]; then kill $SERVE 2>/dev/null || true; fi' EXIT\n" + block
    let tools = tokentoolExecutable.deletingLastPathComponent().path
    guard let bash = which("bash") else { throw CocoaError(.fileNoSuchFile, userInfo: [NSLocalizedDescriptionKey: "no bash"]) }
    return try run(bash, ["-c", "export PATH=\"\(tools):$PATH\"\n" + script], cwd: dir)
}
