import Foundation
import TestSupport
import Testing

/// `tokentool serve` as a process: the self-check, configuration errors, and SIGTERM.
@Suite("tokentool serve as a process", .serialized)
struct ServeProcessTests {
    @Test func selfCheckOnEmbeddedDefaults() throws {
        let dir = try temporaryDirectory()
        let result = try run(tokentoolExecutable, ["serve", "--self-check"], cwd: dir)
        #expect(result.status == 0, "\(result.out)\(result.err)")
        #expect(result.out.contains("listening on http://127.0.0.1:"))
        #expect(result.out.contains("curl -s -X POST"))
        #expect(result.out.contains("self-check passed"))
        #expect(FileManager.default.fileExists(atPath: dir.appendingPathComponent("tokentool-state/ca/root.pem").path))
        // A second start reuses the CA.
        let root = try Data(contentsOf: dir.appendingPathComponent("tokentool-state/ca/root.pem"))
        #expect(try run(tokentoolExecutable, ["serve", "--self-check"], cwd: dir).status == 0)
        #expect(try Data(contentsOf: dir.appendingPathComponent("tokentool-state/ca/root.pem")) == root)
    }

    @Test func badConfigurationNamesTheKey() throws {
        let dir = try temporaryDirectory()
        try #"{"providers": {"auth0": {"type": "oidc"}}}"#.write(to: dir.appendingPathComponent("bad.json"), atomically: true, encoding: .utf8)
        let result = try run(tokentoolExecutable, ["serve", "--config", "bad.json"], cwd: dir)
        #expect(result.status == 2)
        #expect(result.err.contains("providers.auth0.issuer"), "\(result.err)")
    }

    @Test func sigtermShutsDownGracefully() async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            DispatchQueue.global().async { continuation.resume(with: Result { try sigterm() }) }
        }
    }

    func sigterm() throws {
        let dir = try temporaryDirectory()
        let process = Process()
        process.executableURL = tokentoolExecutable
        process.arguments = ["serve", "--port", "0"]
        process.currentDirectoryURL = dir
        let out = Pipe()
        process.standardOutput = out
        process.standardError = Pipe()
        try process.run()
        // Wait for "listening on".
        var text = ""
        let deadline = Date().addingTimeInterval(30)
        while !text.contains("listening on"), Date() < deadline {
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            text += String(decoding: chunk, as: UTF8.self)
        }
        #expect(text.contains("listening on"))
        process.terminate()  // SIGTERM
        process.waitUntilExit()
        #expect(process.terminationReason == .exit, "\(text)")
        #expect(process.terminationStatus == 0)
    }
}
