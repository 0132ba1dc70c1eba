public import Foundation

public enum Fixtures {
    /// The repository root (tests run from anywhere).
    public static let root: URL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    public static let vectors = root.appendingPathComponent("TestVectors")

    public static func data(_ path: String) throws -> Data {
        try Data(contentsOf: vectors.appendingPathComponent(path))
    }

    public static func text(_ path: String) throws -> String {
        String(decoding: try data(path), as: UTF8.self)
    }

    public static func json(_ path: String) throws -> [String: Any] {
        guard let object = try JSONSerialization.jsonObject(with: try data(path)) as? [String: Any] else {
            throw FixtureError("\(path) is not a JSON object")
        }
        return object
    }

    /// A JSON object (from JSONSerialization) back to text, for APIs that take JSON text.
    public static func jsonText(_ object: Any) throws -> String {
        String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self)
    }

    /// The `tokentool` executable built next to the test bundle.
    public static var tokentool: URL { tokentoolExecutable }
}

public struct FixtureError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
