public import Foundation

/// The real `openssl` binary, run in a scratch directory.
public struct OpenSSL {
    public let dir: URL

    public init() throws { dir = try temporaryDirectory() }

    public func path(_ name: String) -> String { dir.appendingPathComponent(name).path }

    /// Runs openssl; returns stdout+stderr and the exit status.
    @discardableResult
    public func run(_ arguments: [String], stdin: Data? = nil) throws -> (status: Int32, output: String) {
        guard let openssl = which("openssl") else { throw SupportError("openssl is not installed") }
        let result = try TestSupport.run(openssl, arguments, stdin: stdin, cwd: dir)
        return (result.status, result.out + result.err)
    }

    /// Runs openssl and throws unless it succeeds.
    @discardableResult
    public func must(_ arguments: [String]) throws -> String {
        let result = try run(arguments)
        guard result.status == 0 else { throw SupportError("openssl \(arguments.joined(separator: " ")) failed: \(result.output)") }
        return result.output
    }

    public func write(_ name: String, _ text: String) throws { try text.write(toFile: path(name), atomically: true, encoding: .utf8) }
    public func write(_ name: String, _ bytes: [UInt8]) throws { try Data(bytes).write(to: dir.appendingPathComponent(name)) }
    public func read(_ name: String) throws -> [UInt8] { Array(try Data(contentsOf: dir.appendingPathComponent(name))) }

    /// A new device key and a CSR for it made by `openssl req`, asking for names the CA must ignore.
    public func csr(_ keyType: String, name: String) throws -> [UInt8] {
        var keyArguments: [String]
        switch keyType {
        case "p256": keyArguments = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
        case "p384": keyArguments = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384"]
        case "rsa2048": keyArguments = ["-newkey", "rsa:2048"]
        case "rsa1024": keyArguments = ["-newkey", "rsa:1024"]
        case "ed25519": keyArguments = ["-newkey", "ed25519"]
        default: throw SupportError("unknown key type \(keyType)")
        }
        try must(["req", "-new"] + keyArguments + [
            "-nodes", "-keyout", "\(name).key", "-out", "\(name).csr", "-subj", "/CN=admin/O=Evil Corp",
            "-addext", "subjectAltName=DNS:evil.example,URI:spiffe://evil/admin", "-addext", "basicConstraints=critical,CA:TRUE",
        ])
        return try read("\(name).csr")
    }
}

public struct SupportError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
