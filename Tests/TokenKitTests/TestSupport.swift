import Foundation
@_exported import TestSupport
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
    static var tokentool: URL { tokentoolExecutable }
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

/// A fixed time for claims tests: 2026-01-01T00:00:00Z.
let referenceTime: NumericDate = 1_767_225_600
