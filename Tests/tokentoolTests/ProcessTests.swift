import Foundation
import PeerCA
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

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
        // Log lines go to standard error (swift-log's default, kept by ServerLogHandler); standard
        // output has only what serve says to its user, which scripts read for the port.
        #expect(result.err.contains("HTTP server listening") && result.err.contains("[TokenServer]"), "\(result.err)")
        #expect(result.err.contains("created a CA"), "\(result.err)")
        #expect(!result.out.contains("HTTP server listening") && !result.out.contains("created a CA"), "\(result.out)")
        #expect(FileManager.default.fileExists(atPath: dir.appendingPathComponent("tokentool-state/ca/root.pem").path))
        // A second start reuses the CA.
        let root = try Data(contentsOf: dir.appendingPathComponent("tokentool-state/ca/root.pem"))
        #expect(try run(tokentoolExecutable, ["serve", "--self-check"], cwd: dir).status == 0)
        #expect(try Data(contentsOf: dir.appendingPathComponent("tokentool-state/ca/root.pem")) == root)
    }

    /// An operator revokes what `tokentool serve` issued: the CA commands take the server's store.
    @Test func caCommandsWorkOnTheServersStore() throws {
        let dir = try temporaryDirectory()
        #expect(try run(tokentoolExecutable, ["serve", "--self-check"], cwd: dir).status == 0)
        let store = ["--dir", "tokentool-state/ca", "--store", "sqlite:tokentool-state/ledger.sqlite"]
        let list = try run(tokentoolExecutable, ["ca", "list", "--json"] + store, cwd: dir)
        #expect(list.status == 0, "\(list.err)")
        let serial = list.out.firstMatch(of: /"serial"\s*:\s*"([0-9a-f]+)"/).map { String($0.1) } ?? ""
        #expect(list.out.contains("spiffe://dev/tokentool-dev/dev-user"), "\(list.out)")
        let revoke = try run(tokentoolExecutable, ["ca", "revoke", "--reason", "keyCompromise"] + store + [serial], cwd: dir)
        #expect(revoke.status == 0, "\(revoke.err)")
        #expect(revoke.out.contains("keyCompromise"))
        let crl = try run(tokentoolExecutable, ["ca", "crl"] + store, cwd: dir)
        try crl.out.write(to: dir.appendingPathComponent("crl.pem"), atomically: true, encoding: .utf8)
        let text = try run(which("openssl") ?? URL(fileURLWithPath: "/usr/bin/openssl"), ["crl", "-in", "crl.pem", "-noout", "-text"], cwd: dir)
        #expect(text.out.uppercased().contains(serial.uppercased()), "\(text.out)\(text.err)")
        // Without --store, the ca.json that serve wrote leads the ca commands to the server's ledger.
        #expect(FileManager.default.fileExists(atPath: dir.appendingPathComponent("tokentool-state/ca/ca.json").path))
        let listed = try run(tokentoolExecutable, ["ca", "list", "--dir", "tokentool-state/ca"], cwd: dir)
        #expect(listed.status == 0, "\(listed.err)")
        #expect(listed.out.contains("\(serial)  revoked(keyCompromise)"), "\(listed.out)")
        // And ca issue works on the CA serve made: a dev token becomes a certificate in the server's ledger.
        let token = try run(tokentoolExecutable, [
            "sign", "--secret-file", "tokentool-state/dev-hs256.secret", "--iss", "tokentool-dev", "--sub", "cli-user", "--expires-in", "600",
        ], cwd: dir)
        #expect(token.status == 0, "\(token.err)")
        try token.out.write(to: dir.appendingPathComponent("token.jwt"), atomically: true, encoding: .utf8)
        let csr = try run(tokentoolExecutable, ["csr", "--out", "device.key"], cwd: dir)
        try csr.out.write(to: dir.appendingPathComponent("device.csr"), atomically: true, encoding: .utf8)
        let issued = try run(tokentoolExecutable, [
            "ca", "issue", "--dir", "tokentool-state/ca", "--csr", "device.csr", "--secret-file", "tokentool-state/dev-hs256.secret",
            "--iss", "tokentool-dev", "token.jwt",
        ], cwd: dir)
        #expect(issued.status == 0, "\(issued.err)")
        #expect(issued.err.contains("spiffe://dev/tokentool-dev/cli-user"), "\(issued.err)")
        let withIssued = try run(tokentoolExecutable, ["ca", "list", "--dir", "tokentool-state/ca", "--store", "sqlite:tokentool-state/ledger.sqlite"], cwd: dir)
        #expect(withIssued.out.contains("spiffe://dev/tokentool-dev/cli-user"), "\(withIssued.out)")
        let bad = try run(tokentoolExecutable, ["ca", "list", "--dir", "tokentool-state/ca", "--store", "mysql://x"], cwd: dir)
        #expect(bad.status == 2)
        #expect(bad.err.contains("--store"), "\(bad.err)")
    }

    @Test func tlsOptionsGoTogether() throws {
        let dir = try temporaryDirectory()
        let result = try run(tokentoolExecutable, ["serve", "--tls-certificate", "server.pem"], cwd: dir)
        #expect(result.status == 2)
        #expect(result.err.contains("--tls-certificate and --tls-key go together"), "\(result.err)")
    }

    /// TLS files that cannot be read are a configuration error like the others: the key named,
    /// exit 2 (it was ArgumentParser's generic "Error:" and exit 1).
    @Test func unreadableTLSFilesNameTheKey() throws {
        let dir = try temporaryDirectory()
        let result = try run(tokentoolExecutable, ["serve", "--port", "0", "--tls-certificate", "none.pem", "--tls-key", "none.key"], cwd: dir)
        #expect(result.status == 2, "\(result.err)")
        #expect(result.err.contains("tokentool: defaults: configuration: tls."), "\(result.err)")
    }

    @Test func badConfigurationNamesTheKey() throws {
        let dir = try temporaryDirectory()
        try #"{"providers": {"auth0": {"type": "oidc"}}}"#.write(to: dir.appendingPathComponent("bad.json"), atomically: true, encoding: .utf8)
        let result = try run(tokentoolExecutable, ["serve", "--config", "bad.json"], cwd: dir)
        #expect(result.status == 2)
        #expect(result.err.contains("providers.auth0.issuer"), "\(result.err)")
    }

    /// The port is taken: serve says which address and what to do, and exits 2 at once (it used to
    /// print nothing and hang, deaf to SIGTERM).
    /// Under a limit of 64 file descriptors, 80 connections: the connection cap (the limit less
    /// 128, at least 16) stops accepting before the descriptors run out, says so, and accepting
    /// resumes once connections close. Out of descriptors, SwiftNIO's listening socket (under
    /// Hummingbird's server) would wake for every failed accept, most of a core, so
    /// `--max-connections` past the limit is lowered to it, and said. serve runs under strace, which
    /// counts its accept calls: a server retrying failed accepts makes thousands while the
    /// connections wait; one that paused makes none that fail.
    @Test(.timeLimit(.minutes(3)), arguments: [
        (["--max-connections", "1000"], "limits.maxConnections is past the open-file limit less 128; lowered"),
        ([], "connection limit reached; accepting again when one closes"),
    ])
    func runningOutOfDescriptorsPausesAccepting(options: [String], says: String) async throws {
        // Blocking waits, on a Dispatch thread: on one of the cooperative pool's two threads (both,
        // with the two cases at once) they starved the tests running beside it.
        let seen = try await offThePool { try Self.exhaustDescriptors(options: options) }
        #expect(seen.accepted >= 16, "accepted up to the cap: \(seen.accepted) accepted\n\(seen.trace)")
        #expect(seen.failedAccepts == 0, "\(seen.failedAccepts) accepts failed for want of a descriptor\n\(seen.trace.suffix(2000))")
        #expect(seen.errors.contains(says), "\(seen.errors)")
        #expect(seen.errors.contains("connection limit reached"), "\(seen.errors)")
        #expect(seen.health.hasPrefix("HTTP/1.1 200 "), "accepting again: \(seen.health)")
    }

    /// Serve under strace and a limit of 64 descriptors, 80 connections held open for 3 s: its
    /// accept calls that succeeded and that failed with EMFILE or ENFILE (and the trace), what it
    /// wrote to stderr, and the answer to `GET /healthz` once the connections have closed.
    static func exhaustDescriptors(options: [String]) throws -> (accepted: Int, failedAccepts: Int, trace: String, errors: String, health: String) {
        let dir = try temporaryDirectory()
        let trace = dir.appendingPathComponent("accepts.trace")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/strace")
        process.arguments = [
            "-f", "-qq", "-e", "trace=accept,accept4", "-o", trace.path,
            "/usr/bin/prlimit", "--nofile=64", tokentoolExecutable.path, "serve", "--port", "0",
        ] + options
        process.currentDirectoryURL = dir
        let out = Pipe().closingOnExec()
        process.standardOutput = out
        let errors = dir.appendingPathComponent("err.log")
        _ = FileManager.default.createFile(atPath: errors.path, contents: nil)
        process.standardError = try FileHandle(forWritingTo: errors)
        try process.run()
        defer {
            // strace passes the signal to serve and exits when it does.
            kill(process.processIdentifier, SIGTERM)
            if process.waitForExit(timeout: 30) == nil { kill(process.processIdentifier, SIGKILL) }
        }
        let text = out.fileHandleForReading.readText(before: Date().addingTimeInterval(120)) { $0.contains("curl -s") }
        // Thrown, not `#require`d: this runs off the test's task.
        guard let port = text.firstMatch(of: /listening on http:\/\/127\.0\.0\.1:(\d+)/).flatMap({ UInt16($0.1) }) else {
            let said = (try? String(contentsOf: errors, encoding: .utf8)) ?? ""
            throw CocoaError(.fileReadCorruptFile, userInfo: [NSLocalizedDescriptionKey: "serve did not say where it listens: \(text)\n\(said)"])
        }
        var sockets: [LoopbackSocket] = []
        for _ in 0..<80 { sockets.append(try LoopbackSocket(port: port)) }  // the kernel completes them; the server cannot take them all
        // Until the server has said it stopped accepting, then 3 s more for a retrying loop to show.
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, !((try? String(contentsOf: errors, encoding: .utf8)) ?? "").contains("connection limit reached") { usleep(50_000) }
        Thread.sleep(forTimeInterval: 3)
        let said = try String(contentsOf: errors, encoding: .utf8)
        sockets.removeAll()
        // Polled: the server takes the waiting connections (now closed) off its queue first.
        var health = ""
        let healthDeadline = Date().addingTimeInterval(60)
        while Date() < healthDeadline {
            if let socket = try? LoopbackSocket(port: port), (try? socket.send(Array("GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".utf8))) != nil {
                health = String(decoding: socket.receiveAll(seconds: 10), as: UTF8.self)
                if health.hasPrefix("HTTP/1.1 200 ") { break }
            }
            usleep(200_000)
        }
        // The trace is read once strace has ended (it may hold lines back until then).
        kill(process.processIdentifier, SIGTERM)
        if process.waitForExit(timeout: 30) == nil { kill(process.processIdentifier, SIGKILL) }
        let traced = (try? String(contentsOf: trace, encoding: .utf8)) ?? ""
        // A call strace saw end: a whole line, or the "<... accept4 resumed>" half of one.
        let ended = traced.split(separator: "\n").filter { $0.contains("accept") && $0.range(of: #"= (-1 [A-Z]+.*|\d+)$"#, options: .regularExpression) != nil }
        let failed = ended.filter { $0.contains("EMFILE") || $0.contains("ENFILE") }.count
        let accepted = ended.filter { $0.range(of: #"= \d+$"#, options: .regularExpression) != nil }.count
        return (accepted, failed, traced, said, health)
    }

    @Test func aTakenPortIsReportedAndServeExits() throws {
        let taken = try LoopbackListener()
        let dir = try temporaryDirectory()
        let result = try ServeProcess.runToEnd(["serve", "--port", String(taken.port)], in: dir, within: 30)
        #expect(result.exited, "serve did not exit within 30 s: \(result.out)\(result.err)")
        #expect(result.status == 2, "\(result.out)\(result.err)")
        #expect(result.err.contains("127.0.0.1:\(taken.port) is already in use"), "\(result.err)")
        #expect(result.err.contains("--port"), "\(result.err)")
        #expect(!result.out.contains("listening on"), "\(result.out)")
    }

    /// SIGTERM and SIGINT stop serve at every stage of start-up: at once, while it makes its
    /// development CA, and once it listens.
    @Test(arguments: [SIGTERM, SIGINT], [0.0, 0.05, 0.3])
    func aSignalDuringStartUpStopsServe(signal: Int32, after delay: Double) throws {
        let dir = try temporaryDirectory()
        let process = Process()
        process.executableURL = tokentoolExecutable
        process.arguments = ["serve", "--port", "0"]
        process.currentDirectoryURL = dir
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        Thread.sleep(forTimeInterval: delay)
        kill(process.processIdentifier, signal)
        let exit = process.waitForExit(timeout: 20)  // killed if not
        #expect(exit != nil, "serve ignored signal \(signal) sent \(delay) s after start")
        // Before serve installs its handlers the signal's default action ends it; afterwards it
        // shuts down gracefully and exits 0. Any other end (a trap, an error exit, another signal)
        // is a failure.
        let expected = [ProcessExit(reason: .exit, status: 0), ProcessExit(reason: .uncaughtSignal, status: signal)]
        if let exit { #expect(expected.contains(exit), "signal \(signal) after \(delay) s ended serve with \(exit)") }
    }

    @Test func sigtermShutsDownGracefully() async throws {
        try await offThePool {
            let serve = try ServeProcess.start(until: "listening on")
            #expect(serve.output.contains("listening on"))
            serve.process.terminate()  // SIGTERM
            let exit = serve.process.waitForExit()
            #expect(exit == ProcessExit(reason: .exit, status: 0), "\(serve.output)")
        }
    }

    /// A certificate request whose body is still arriving when SIGTERM comes: the server stops
    /// accepting connections at once, finishes that request (the certificate is answered and in the
    /// ledger), then exits 0.
    @Test func sigtermLetsAnInFlightRequestFinish() async throws {
        try await offThePool { try inFlight() }
    }

    func inFlight() throws {
        let serve = try ServeProcess.start(until: "curl -s")
        let (process, dir, text) = (serve.process, serve.directory, serve.output)
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        guard let port = text.firstMatch(of: /listening on http:\/\/127\.0\.0\.1:(\d+)/).flatMap({ UInt16($0.1) }),
            let token = text.firstMatch(of: /"token":"([A-Za-z0-9_.-]+)"/)?.1
        else {
            Issue.record("no port or token in: \(text)")
            return
        }
        let csr = try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate())
        let escaped = csr.replacingOccurrences(of: "\n", with: "\\n")
        let body = Array(#"{"provider":"dev","token":"\#(token)","csr":"\#(escaped)"}"#.utf8)
        let head = "POST /v1/certificates HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: \(body.count)\r\n\r\n"

        let connection = try LoopbackSocket(port: port)
        try connection.send(Array(head.utf8) + body[..<100])
        Thread.sleep(forTimeInterval: 0.5)  // the server has the head: the request is in flight
        process.terminate()  // SIGTERM
        // New connections are refused while the in-flight request holds the process open.
        var refused = false
        for _ in 0..<50 where !refused {
            Thread.sleep(forTimeInterval: 0.1)
            refused = (try? LoopbackSocket(port: port)) == nil
        }
        #expect(refused, "the server still accepts connections after SIGTERM")
        #expect(process.ended == nil, "the server exited with a request in flight")
        try connection.send(Array(body[100...]))
        let response = String(decoding: connection.receiveAll(), as: UTF8.self)
        #expect(response.hasPrefix("HTTP/1.1 200"), "\(response.prefix(300))")
        let serial = response.firstMatch(of: /"serial":"([0-9a-f]+)"/).map { String($0.1) }
        #expect(serial != nil)
        #expect(process.waitForExit() == ProcessExit(reason: .exit, status: 0))
        // The answered certificate is in the ledger.
        let ledger = try SQLiteLedger(path: dir.appendingPathComponent("tokentool-state/ledger.sqlite").path)
        let entry = try blockingEntry(ledger, serial: serial ?? "")
        #expect(entry?.serial == serial)
    }

    func blockingEntry(_ ledger: SQLiteLedger, serial: String) throws -> LedgerEntry? {
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var result: Result<LedgerEntry?, PeerCAError> = .success(nil)
        Task {
            do throws(PeerCAError) { result = .success(try await ledger.entry(serial: serial)) } catch { result = .failure(error) }
            done.signal()
        }
        done.wait()
        return try result.get()
    }
}

/// `tokentool serve --port 0` on the embedded defaults in a new temporary directory, its standard
/// output read until it contains `marker` (30 s at most).
struct ServeProcess {
    let process: Process
    let directory: URL
    let output: String

    static func start(until marker: String, arguments: [String] = ["serve", "--port", "0"], in directory: URL? = nil) throws -> ServeProcess {
        let dir = try directory ?? temporaryDirectory()
        let process = Process()
        process.executableURL = tokentoolExecutable
        process.arguments = arguments
        process.currentDirectoryURL = dir
        let out = Pipe().closingOnExec()
        process.standardOutput = out
        process.standardError = Pipe().closingOnExec()
        try process.run()
        let text = out.fileHandleForReading.readText(before: Date().addingTimeInterval(30)) { $0.contains(marker) }
        return ServeProcess(process: process, directory: dir, output: text)
    }
}

extension ServeProcess {
    /// Runs tokentool to its end, or kills it after `seconds`: `exited` says which.
    static func runToEnd(_ arguments: [String], in dir: URL, within seconds: Double) throws -> (exited: Bool, status: Int32, out: String, err: String) {
        let process = Process()
        process.executableURL = tokentoolExecutable
        process.arguments = arguments
        process.currentDirectoryURL = dir
        let out = try temporaryDirectory().appendingPathComponent("out"), err = out.deletingLastPathComponent().appendingPathComponent("err")
        _ = FileManager.default.createFile(atPath: out.path, contents: nil)
        _ = FileManager.default.createFile(atPath: err.path, contents: nil)
        process.standardOutput = try FileHandle(forWritingTo: out)
        process.standardError = try FileHandle(forWritingTo: err)
        try process.run()
        let exit = process.waitForExit(timeout: seconds)  // killed if not
        return (exit != nil, exit?.status ?? -1, try String(contentsOf: out, encoding: .utf8), try String(contentsOf: err, encoding: .utf8))
    }
}

/// The tests' own wait for a child (``Process/waitForExit(timeout:)``) sees the exit when
/// Foundation does not. (Expectations are checked on the test's task: one recorded on a Dispatch
/// thread belongs to no test.)
@Suite("Waiting for a test's child process")
struct ChildExitTests {
    /// A child whose background grandchild keeps Foundation's exit socket open: Foundation says it
    /// runs until the grandchild ends (30 s); the wait says at once that it exited with 7.
    @Test func anExitIsSeenWhileAGrandchildKeepsFoundationsSocket() async throws {
        let (exit, seconds, foundationSawIt, line) = try await offThePool {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", "sleep 30 & echo $!; exit 7"]
            let out = Pipe().closingOnExec()
            process.standardOutput = out
            try process.run()
            // One line: the grandchild's process ID (the pipe stays open while it runs).
            let line = out.fileHandleForReading.readText(before: Date().addingTimeInterval(20)) { $0.contains("\n") }
            let grandchild = Int32(line.trimmingCharacters(in: .whitespacesAndNewlines))
            defer { if let grandchild { kill(grandchild, SIGKILL) } }
            let started = Date()
            let exit = process.waitForExit(timeout: 20)
            return (exit, Date().timeIntervalSince(started), !process.isRunning, line)
        }
        #expect(exit == ProcessExit(reason: .exit, status: 7), "\(line)")
        #expect(seconds < 20)
        // What the wait works around: Foundation still takes the child for running.
        #expect(!foundationSawIt)
    }

    /// A silent child's pipe gives nothing by the deadline (nil), instead of a read that waits for
    /// as long as the child lives; its end, once killed, is an empty chunk.
    @Test func aSilentChildsOutputIsGivenUpOnAtTheDeadline() async throws {
        let (silence, seconds, end) = try await offThePool {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/sleep")
            process.arguments = ["30"]
            let out = Pipe().closingOnExec()
            process.standardOutput = out
            try process.run()
            let started = Date()
            let silence = out.fileHandleForReading.availableData(before: started.addingTimeInterval(0.3))
            let seconds = Date().timeIntervalSince(started)
            kill(process.processIdentifier, SIGKILL)
            process.waitForExit(timeout: 20)
            return (silence, seconds, out.fileHandleForReading.availableData(before: Date().addingTimeInterval(20)))
        }
        #expect(silence == nil)
        #expect(seconds >= 0.25 && seconds < 10, "\(seconds)")
        #expect(end == Data())
    }

    /// A child killed by a signal is told apart from one that exited. (SIGKILL: the test runner's
    /// blocked signals are inherited, and may include SIGTERM.)
    @Test func aSignalIsReportedAsOne() async throws {
        let exit = try await offThePool {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/sleep")
            process.arguments = ["30"]
            try process.run()
            kill(process.processIdentifier, SIGKILL)
            return process.waitForExit(timeout: 20)
        }
        #expect(exit == ProcessExit(reason: .uncaughtSignal, status: SIGKILL))
    }
}
