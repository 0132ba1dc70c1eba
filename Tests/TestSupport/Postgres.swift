import Foundation

/// A throw-away PostgreSQL server on loopback (scripts/pgtest.sh: its own cluster in a temporary
/// directory, a port the OS handed out), for `body`; stopped and removed afterwards, whatever
/// happens. `body` receives the server's URL (`postgres://tokentool@127.0.0.1:PORT/tokentool`).
public func withTestPostgres<T>(_ body: (String) async throws -> T) async throws -> T {
    try await withTestPostgresCluster { url, _ in try await body(url) }
}

/// ``withTestPostgres(_:)``, with the server's processes in reach: `body` also gets a
/// ``TestPostgresCluster`` that can stop and resume them.
public func withTestPostgresCluster<T>(_ body: (String, TestPostgresCluster) async throws -> T) async throws -> T {
    let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("scripts/pgtest.sh")
    let dir = try temporaryDirectory()
    // The cluster's directory must be reachable by the postgres user when the tests run as root.
    try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: dir.path)
    let pgDir = dir.appendingPathComponent("pg").path
    let started = try await runDetached(script, ["start", pgDir])
    guard started.status == 0 else {
        _ = try? run(script, ["stop", pgDir])
        throw PostgresUnavailable(message: "scripts/pgtest.sh start failed: \(started.err)")
    }
    let url = started.out.trimmingCharacters(in: .whitespacesAndNewlines)
    do {
        let result = try await body(url, TestPostgresCluster(directory: pgDir))
        _ = try await runDetached(script, ["stop", pgDir])
        try? FileManager.default.removeItem(at: dir)
        return result
    } catch {
        _ = try? await runDetached(script, ["stop", pgDir])
        try? FileManager.default.removeItem(at: dir)
        throw error
    }
}

/// The test PostgreSQL server could not be started.
public struct PostgresUnavailable: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}

/// The processes of a ``withTestPostgresCluster(_:)`` server.
public struct TestPostgresCluster: Sendable {
    /// scripts/pgtest.sh's directory for the cluster (its data directory is `data` in it).
    public let directory: String

    /// Sends `signal` (`STOP`, `CONT`) to the server: the postmaster and every backend it started.
    /// A stopped server keeps its connections open and answers nothing: a hung database.
    public func signal(_ signal: String) throws {
        let pidFile = URL(fileURLWithPath: directory).appendingPathComponent("data/postmaster.pid")
        guard let first = try String(contentsOf: pidFile, encoding: .utf8).split(separator: "\n").first, let pid = Int32(first) else {
            throw TestFailure("no postmaster PID in \(pidFile.path)")
        }
        let children = try run(URL(fileURLWithPath: "/usr/bin/pgrep"), ["-P", String(pid)]).out.split(separator: "\n").compactMap { Int32($0) }
        let all = signal == "CONT" ? [pid] + children : children + [pid]
        let status = try run(URL(fileURLWithPath: "/bin/kill"), ["-\(signal)"] + all.map(String.init)).status
        guard status == 0 else { throw TestFailure("kill -\(signal) \(all) failed (\(status))") }
    }

    /// Runs `body` with the server shut down (connections refused: a database out of reach), and
    /// starts it again on the same port and data afterwards, also when `body` throws.
    public func whileDown<T>(_ body: () async throws -> T) async throws -> T {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("scripts/pgtest.sh")
        let down = try await runDetached(script, ["down", directory])
        guard down.status == 0 else { throw TestFailure("pgtest.sh down failed: \(down.err)") }
        let result: T
        do { result = try await body() } catch {
            _ = try? await runDetached(script, ["up", directory])
            throw error
        }
        let up = try await runDetached(script, ["up", directory])
        guard up.status == 0 else { throw TestFailure("pgtest.sh up failed: \(up.err)") }
        return result
    }

    /// Runs `body` with the server stopped (`STOP`), and resumes it (`CONT`) afterwards, also when
    /// `body` throws: a hung database for the length of `body`.
    public func whileStopped<T>(_ body: () async throws -> T) async throws -> T {
        try signal("STOP")
        let result: T
        do { result = try await body() } catch {
            try? signal("CONT")
            throw error
        }
        try signal("CONT")
        return result
    }
}
