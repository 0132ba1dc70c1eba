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
    let outPipe = Pipe().closingOnExec(), errPipe = Pipe().closingOnExec(), inPipe = Pipe().closingOnExec()
    process.standardOutput = outPipe
    process.standardError = errPipe
    process.standardInput = inPipe
    try process.run()
    if let stdin { inPipe.fileHandleForWriting.write(stdin) }
    try inPipe.fileHandleForWriting.close()
    // Both pipes are read while the child runs, so a chatty child cannot block on a full pipe.
    let group = DispatchGroup()
    nonisolated(unsafe) var outData = Data(), errData = Data()
    group.enter()
    DispatchQueue.global().async { outData = outPipe.fileHandleForReading.readDataToEndOfFile(); group.leave() }
    group.enter()
    DispatchQueue.global().async { errData = errPipe.fileHandleForReading.readDataToEndOfFile(); group.leave() }
    let command = "\(executable.lastPathComponent) \(arguments.joined(separator: " "))"
    guard let exit = process.waitForExit() else { throw TestFailure("\(command) still ran after 300 s (killed)") }
    // Its output ends when it does, unless a process it started holds the pipes: a test fails
    // then, instead of waiting as long as that process lives.
    guard group.wait(timeout: .now() + 60) == .success else {
        throw TestFailure("\(command) exited, but its output was still open 60 s later (a process it started holds it)")
    }
    return (exit.status, String(decoding: outData, as: UTF8.self), String(decoding: errData, as: UTF8.self))
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

/// How a child process ended: ``Process/waitForExit(timeout:)``'s answer.
public struct ProcessExit: Sendable, Equatable {
    /// `.exit` (with the status it gave) or `.uncaughtSignal` (with the signal's number).
    public let reason: Process.TerminationReason
    public let status: Int32

    public init(reason: Process.TerminationReason, status: Int32) {
        self.reason = reason
        self.status = status
    }
}

extension Process {
    /// Waits until the process has exited and says how; nil when it was still running after
    /// `timeout` (it is then killed).
    ///
    /// The exit is seen by the kernel's word (`waitid` with `WNOWAIT`, which leaves the child for
    /// Foundation to reap), not only by `isRunning`: Foundation learns of an exit when a socket
    /// it gave the child closes, on one manager thread that waits for each child in turn. A copy
    /// of that socket in another child (a process spawned by another thread in the same instant
    /// inherits it), or a child that closes its descriptors and runs on (scripts/pgtest.sh did),
    /// kept `isRunning` true long after the exit: CI once killed such a child after the old 300-s
    /// limit, read `terminationStatus` and trapped ("task still running"), taking the whole test
    /// process down. `waitUntilExit()` is not used either: on Linux it spins a run loop that can
    /// miss the exit and wait forever.
    @discardableResult
    public func waitForExit(timeout: TimeInterval = 300) -> ProcessExit? {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let exit = ended { return exit }
            if Date() > deadline { break }
            usleep(2_000)
        }
        kill(processIdentifier, SIGKILL)
        let grace = Date().addingTimeInterval(10)
        while ended == nil && Date() < grace { usleep(2_000) }
        return nil
    }

    /// How the process ended, or nil while it runs. Never traps, unlike `terminationStatus`.
    public var ended: ProcessExit? {
        // Foundation's own record first: `isRunning` turns false only after it has reaped the child
        // and stored how it ended.
        if !isRunning { return ProcessExit(reason: terminationReason, status: terminationStatus) }
        var info = siginfo_t()
        // ECHILD: Foundation reaped it a moment ago and is about to clear `isRunning`.
        guard waitid(P_PID, id_t(processIdentifier), &info, WEXITED | WNOHANG | WNOWAIT) == 0,
            info._sifields._sigchld.si_pid == processIdentifier
        else { return nil }
        let status = info._sifields._sigchld.si_status
        switch Int(info.si_code) {
        case CLD_EXITED: return ProcessExit(reason: .exit, status: status)
        case CLD_KILLED, CLD_DUMPED: return ProcessExit(reason: .uncaughtSignal, status: status)
        default: return nil
        }
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

extension FileHandle {
    /// The next chunk this pipe's writer sends before `deadline` (empty at its end), or nil when
    /// nothing comes by then. `availableData` alone waits for as long as the writer is silent:
    /// a child that hangs without a word would hang its test, and CI's whole run.
    public func availableData(before deadline: Date) -> Data? {
        var waiting = pollfd(fd: fileDescriptor, events: Int16(POLLIN), revents: 0)
        while true {
            let milliseconds = Int32(max(0, min(deadline.timeIntervalSinceNow * 1000, 3_600_000)))
            let ready = poll(&waiting, 1, milliseconds)
            if ready > 0 { return availableData }  // data, or the end (POLLHUP): availableData is empty then
            if ready == 0 || errno != EINTR { return nil }
        }
    }

    /// The text this pipe's writer sends until `done` holds for all of it so far, the writer
    /// ends, or `deadline` passes, whichever comes first.
    public func readText(before deadline: Date, until done: (String) -> Bool) -> String {
        var text = ""
        while !done(text) {
            guard let chunk = availableData(before: deadline), !chunk.isEmpty else { break }
            text += String(decoding: chunk, as: UTF8.self)
        }
        return text
    }
}

extension Pipe {
    /// This pipe, with both ends closed on `exec`: a process another test starts in the same
    /// instant does not inherit them. (Foundation's `Process.run()` closes what it finds open in
    /// the child, but a pipe made between its look and its spawn would go along: a child of
    /// another test holding a write end, and the read to the end of output waits for that child.)
    /// The child meant to have an end still gets it: `dup2` onto its standard descriptors clears
    /// the flag.
    public func closingOnExec() -> Pipe {
        _ = fcntl(fileHandleForReading.fileDescriptor, F_SETFD, FD_CLOEXEC)
        _ = fcntl(fileHandleForWriting.fileDescriptor, F_SETFD, FD_CLOEXEC)
        return self
    }
}
