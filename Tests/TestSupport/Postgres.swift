import Foundation

/// A throw-away PostgreSQL server on loopback (scripts/pgtest.sh: its own cluster in a temporary
/// directory, a port the OS handed out), for `body`; stopped and removed afterwards, whatever
/// happens. `body` receives the server's URL (`postgres://tokentool@127.0.0.1:PORT/tokentool`).
public func withTestPostgres<T>(_ body: (String) async throws -> T) async throws -> T {
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
        let result = try await body(url)
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
