public import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A test PKI made with the real `openssl` binary: a CA and a server certificate for
/// `localhost`, `*.hubat.net`, `*.hubofallthings.net` and `idp.test`, and a second,
/// unrelated CA whose certificate nobody trusts.
///
/// The server certificate has no IP address SAN on purpose: swift-nio-ssl accepts a certificate
/// whose IP SAN matches the connected address even when another host name was asked for, which
/// would hide a missing host-name check in these tests.
public struct TestPKI: Sendable {
    public let dir: URL
    public let caFile: String
    public let certFile: String
    public let keyFile: String
    public let otherCAFile: String

    public static let shared: Result<TestPKI, any Error> = Result { try TestPKI.make() }

    public static func make() throws -> TestPKI {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("pdakeys-pki-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        func path(_ name: String) -> String { dir.appendingPathComponent(name).path }
        let ext = """
            basicConstraints=critical,CA:FALSE
            keyUsage=critical,digitalSignature
            extendedKeyUsage=serverAuth
            subjectAltName=DNS:localhost,DNS:*.hubat.net,DNS:*.hubofallthings.net,DNS:idp.test
            """
        try ext.write(toFile: path("server.ext"), atomically: true, encoding: .utf8)
        for ca in ["ca", "other-ca"] {
            try openssl([
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", path("\(ca).key"),
                "-out", path("\(ca).pem"), "-days", "2", "-subj", "/CN=PDAKeys test \(ca)",
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            ])
        }
        try openssl([
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", path("server.key"),
            "-out", path("server.csr"), "-subj", "/CN=localhost",
        ])
        try openssl([
            "x509", "-req", "-in", path("server.csr"), "-CA", path("ca.pem"), "-CAkey", path("ca.key"), "-CAcreateserial",
            "-out", path("server.pem"), "-days", "2", "-extfile", path("server.ext"),
        ])
        return TestPKI(dir: dir, caFile: path("ca.pem"), certFile: path("server.pem"), keyFile: path("server.key"), otherCAFile: path("other-ca.pem"))
    }

    public static func openssl(_ arguments: [String]) throws {
        guard let openssl = which("openssl") else { throw TestFailure("openssl is not installed") }
        let result = try run(openssl, arguments)
        guard result.status == 0 else {
            throw TestFailure("openssl \(arguments.prefix(2).joined(separator: " ")) failed: \(result.err)")
        }
    }
}

public struct TestFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// One route of the test server (see keyserver.py).
public struct Route: Encodable, Sendable {
    public var status = 200
    public var headers: [String: String] = [:]
    public var body = ""
    public var `repeat` = 1
    public var chunked = false
    public var delay = 0.0
    public var trickle = 0.0

    public init(status: Int = 200, headers: [String: String] = [:], body: String = "", `repeat`: Int = 1, chunked: Bool = false, delay: Double = 0.0, trickle: Double = 0.0) {
        self.status = status
        self.headers = headers
        self.body = body
        self.repeat = `repeat`
        self.chunked = chunked
        self.delay = delay
        self.trickle = trickle
    }
}

/// The Python key server (keyserver.py) running on loopback, with TLS from ``TestPKI`` unless
/// `plain`. Stopped by ``stop()`` (and when the test process exits, via its standard input).
public final class KeyServer: Sendable {
    public let port: Int
    public let dir: URL
    private let process: Process
    private let stdin: Pipe

    public static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("keyserver.py").path

    public init(plain: Bool = false, routes: [String: Route] = [:]) throws {
        let pki = try TestPKI.shared.get()
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("keyserver-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        var arguments = [
            "--routes", dir.appendingPathComponent("routes.json").path, "--log", dir.appendingPathComponent("requests.log").path,
            "--connections", dir.appendingPathComponent("connections.log").path,
        ]
        if !plain { arguments += ["--cert", pki.certFile, "--key", pki.keyFile] }
        _ = FileManager.default.createFile(atPath: dir.appendingPathComponent("requests.log").path, contents: nil)
        try KeyServer.write(routes, to: dir)
        (process, stdin, port) = try startScriptServer(KeyServer.script, arguments)
    }

    public func setRoutes(_ routes: [String: Route]) throws { try KeyServer.write(routes, to: dir) }

    private static func write(_ routes: [String: Route], to dir: URL) throws {
        let data = try JSONEncoder().encode(routes)
        let temporary = dir.appendingPathComponent("routes.tmp")
        try data.write(to: temporary)
        // rename(2) replaces the file atomically: the server never reads half a routes file.
        guard rename(temporary.path, dir.appendingPathComponent("routes.json").path) == 0 else {
            throw TestFailure("cannot rename the routes file")
        }
    }

    /// The requests the server received so far, one line each: `GET <host><path> accept=<Accept>`.
    public var requests: [String] {
        let text = (try? String(contentsOf: dir.appendingPathComponent("requests.log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map(String.init)
    }

    /// The TCP connections the server accepted so far (counted before their TLS handshake, so a
    /// client that refuses the certificate counts too).
    public var connections: Int { acceptedConnections(in: dir) }

    public func count(_ path: String) -> Int { requests.filter { $0.hasPrefix("GET ") && $0.contains(path) }.count }

    public func stop() {
        // The server exits when its standard input closes (a SIGTERM may be blocked: the test
        // runner's signal mask is inherited by the child).
        try? stdin.fileHandleForWriting.close()
        process.waitForExit()
        try? FileManager.default.removeItem(at: dir)
    }

    public var baseURL: String { "https://localhost:\(port)" }
}

/// The port a test server script announces on its first line (`PORT n`): it listens on a port the
/// OS picked and says which.
public func announcedPort(_ output: FileHandle, server: String) throws -> Int {
    var line = Data()
    let deadline = Date().addingTimeInterval(60)
    while !line.contains(UInt8(ascii: "\n")) {
        guard let chunk = output.availableData(before: deadline) else { throw TestFailure("\(server) did not say its port within 60 s") }
        if chunk.isEmpty { throw TestFailure("\(server) exited before listening") }
        line.append(chunk)
    }
    let text = String(decoding: line, as: UTF8.self)
    guard text.hasPrefix("PORT "), let port = Int(text.dropFirst(5).prefix { $0.isNumber }) else {
        throw TestFailure("\(server) said \(text)")
    }
    return port
}

/// Starts a Python test server script (`python3 SCRIPT ARGUMENTS`) that listens on a port the OS
/// picks and announces it; returns the process, its standard input (the server stops when it
/// closes) and the port.
public func startScriptServer(_ script: String, _ arguments: [String]) throws -> (process: Process, stdin: Pipe, port: Int) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["python3", script] + arguments
    let out = Pipe().closingOnExec()
    let stdin = Pipe().closingOnExec()
    process.standardOutput = out
    process.standardInput = stdin
    try process.run()
    return (process, stdin, try announcedPort(out.fileHandleForReading, server: (script as NSString).lastPathComponent))
}

/// The lines of `connections.log` in `dir`, where the test servers (`--connections`) write one for
/// every connection they accept.
public func acceptedConnections(in dir: URL) -> Int {
    let text = (try? String(contentsOf: dir.appendingPathComponent("connections.log"), encoding: .utf8)) ?? ""
    return text.split(separator: "\n").count
}
