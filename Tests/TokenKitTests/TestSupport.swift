import Foundation
import Testing
@testable import TokenKit

enum Fixtures {
    /// The repository root (tests run from anywhere).
    static let root: URL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let vectors = root.appendingPathComponent("TestVectors")

    static func data(_ path: String) throws -> Data {
        try Data(contentsOf: vectors.appendingPathComponent(path))
    }

    static func text(_ path: String) throws -> String {
        String(decoding: try data(path), as: UTF8.self)
    }

    static func json(_ path: String) throws -> [String: Any] {
        guard let object = try JSONSerialization.jsonObject(with: try data(path)) as? [String: Any] else {
            throw FixtureError("\(path) is not a JSON object")
        }
        return object
    }

    /// A JSON object (from JSONSerialization) back to text, for APIs that take JSON text.
    static func jsonText(_ object: Any) throws -> String {
        String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self)
    }

    /// The `tokentool` executable built next to the test bundle.
    static var tokentool: URL {
        var dir = Bundle.main.bundleURL
        if dir.pathExtension == "xctest" { dir.deleteLastPathComponent() }
        let candidate = dir.appendingPathComponent("tokentool")
        if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        return root.appendingPathComponent(".build/debug/tokentool")
    }
}

struct FixtureError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

func hex(_ text: String) -> [UInt8] {
    var out: [UInt8] = []
    var chars = Array(text.utf8)
    if chars.count % 2 == 1 { chars.insert(UInt8(ascii: "0"), at: 0) }
    var i = 0
    while i + 1 < chars.count {
        out.append(UInt8(String(decoding: chars[i...i + 1], as: UTF8.self), radix: 16) ?? 0)
        i += 2
    }
    return out
}

/// Runs a process to completion and returns (status, stdout, stderr).
@discardableResult
func run(_ executable: URL, _ arguments: [String], stdin: Data? = nil, cwd: URL? = nil) throws -> (status: Int32, out: String, err: String) {
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
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: outData, as: UTF8.self), String(decoding: errData, as: UTF8.self))
}

func which(_ name: String) -> URL? {
    for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
        let url = URL(fileURLWithPath: String(dir)).appendingPathComponent(name)
        if FileManager.default.isExecutableFile(atPath: url.path) { return url }
    }
    return nil
}

func temporaryDirectory() throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("tokentool-tests-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

/// A fixed time for claims tests: 2026-01-01T00:00:00Z.
let referenceTime: NumericDate = 1_767_225_600
