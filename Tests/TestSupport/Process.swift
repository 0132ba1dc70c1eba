public import Foundation

/// Helpers shared by the test targets: running processes as a user would, finding programs, and
/// scratch directories.

/// The `tokentool` executable built next to the test bundle.
public var tokentoolExecutable: URL {
    var dir = Bundle.main.bundleURL
    if dir.pathExtension == "xctest" { dir.deleteLastPathComponent() }
    let candidate = dir.appendingPathComponent("tokentool")
    if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    return root.appendingPathComponent(".build/debug/tokentool")
}

/// Runs `executable` with `arguments`, feeding `stdin`, and returns its status and output.
@discardableResult
public func run(_ executable: URL, _ arguments: [String], stdin: Data? = nil, cwd: URL? = nil) throws -> (status: Int32, out: String, err: String) {
    let process = Process()
    process.executableURL = executable
    process.arguments = arguments
    if let cwd { process.currentDirectoryURL = cwd }
    let outPipe = Pipe(), errPipe = Pipe(), inPipe = Pipe()
    process.standardOutput = outPipe
    process.standardError = errPipe
    process.standardInput = inPipe
    try process.run()
    if let stdin { inPipe.fileHandleForWriting.write(stdin) }
    try inPipe.fileHandleForWriting.close()
    // Read both pipes before waiting so a chatty child cannot block on a full pipe.
    let group = DispatchGroup()
    nonisolated(unsafe) var outData = Data(), errData = Data()
    group.enter()
    DispatchQueue.global().async { outData = outPipe.fileHandleForReading.readDataToEndOfFile(); group.leave() }
    errData = errPipe.fileHandleForReading.readDataToEndOfFile()
    group.wait()
    process.waitForExit()
    return (process.terminationStatus, String(decoding: outData, as: UTF8.self), String(decoding: errData, as: UTF8.self))
}

public func which(_ name: String) -> URL? {
    for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
        let url = URL(fileURLWithPath: String(dir)).appendingPathComponent(name)
        if FileManager.default.isExecutableFile(atPath: url.path) { return url }
    }
    return nil
}

public func temporaryDirectory() throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("tokentool-tests-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

/// ``run(_:_:stdin:cwd:)`` off the cooperative thread pool: for async tests whose process talks
/// to a server running in the same test process (a blocked pool thread could starve it).
public func runDetached(_ executable: URL, _ arguments: [String], stdin: Data? = nil, cwd: URL? = nil) async throws -> (status: Int32, out: String, err: String) {
    try await offThePool { try run(executable, arguments, stdin: stdin, cwd: cwd) }
}

/// Runs blocking work (processes, sockets) on a Dispatch thread, not on the cooperative pool.
public func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
        DispatchQueue.global().async { continuation.resume(with: Result { try body() }) }
    }
}

extension Process {
    /// Waits until the process has exited, by polling `isRunning`, not with `waitUntilExit()`:
    /// on Linux that spins a run loop which can miss the exit and wait forever (seen here: a
    /// PyJWT interoperability test hung for 15 minutes with no child left, under load; see
    /// swift-corelibs-foundation's waitUntilExit hang reports). After `timeout` the process is
    /// killed, so a stuck child fails its test instead of hanging the suite; returns false then.
    @discardableResult
    public func waitForExit(timeout: TimeInterval = 300) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while isRunning {
            if Date() > deadline {
                kill(processIdentifier, SIGKILL)
                let grace = Date().addingTimeInterval(10)
                while isRunning && Date() < grace { usleep(2_000) }
                return false
            }
            usleep(2_000)
        }
        return true
    }
}

/// A thread's scheduling policy and nice value, the 41st and 19th fields of its /proc stat line:
/// the thread `tid` of this process, or the calling thread when nil (`/proc/thread-self`).
public func threadScheduling(ofThread tid: Int32? = nil) throws -> (policy: Int, nice: Int) {
    let path = tid.map { "/proc/self/task/\($0)/stat" } ?? "/proc/thread-self/stat"
    let stat = try String(contentsOfFile: path, encoding: .utf8)
    // Fields from the 3rd (state) on, after the parenthesised name (which may hold spaces).
    guard let afterName = stat.range(of: ") ", options: .backwards) else { throw TestFailure("no name in \(path): \(stat)") }
    let fields = stat[afterName.upperBound...].split(separator: " ")
    guard fields.count > 38, let policy = Int(fields[38]), let nice = Int(fields[16]) else { throw TestFailure("unreadable \(path): \(stat)") }
    return (policy, nice)
}

/// Polls `condition` every `every` until it holds or `within` has passed; true when it held. The
/// limits are for the concurrency pool, not the code under test: on a 2-core machine other tests
/// can keep the pool's threads for many seconds.
public func eventually(within: Duration = .seconds(120), every: Duration = .milliseconds(1), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + within
    while !condition() {
        guard ContinuousClock.now < deadline else { return false }
        try? await Task.sleep(for: every)
    }
    return true
}
