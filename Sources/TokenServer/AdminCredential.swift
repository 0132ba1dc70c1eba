import Foundation

/// The administrator's bearer secret: read from a file that only its owner may read, compared in
/// constant time, never logged.
enum AdminCredential {
    /// The secret in `path` (surrounding whitespace dropped); at least 16 bytes.
    static func read(_ path: String) throws(ConfigurationError) -> [UInt8] {
        try ConfigurationError.checkPrivate(path, key: "admin.tokenFile")
        let data = try ConfigurationError.read(path, key: "admin.tokenFile")
        let secret = Array(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines).utf8)
        guard secret.count >= 16 else { throw ConfigurationError(key: "admin.tokenFile", "the secret must have at least 16 bytes") }
        return secret
    }

    /// Whether an `Authorization` header carries the secret as a bearer credential. The
    /// comparison takes the same time wherever the first difference is (it only reveals whether
    /// the lengths differ).
    static func matches(_ authorization: String, _ secret: [UInt8]) -> Bool {
        let parts = authorization.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return false }
        let given = Array(parts[1].trimmingCharacters(in: .whitespaces).utf8)
        guard given.count == secret.count else { return false }
        var difference: UInt8 = 0
        for (a, b) in zip(given, secret) { difference |= a ^ b }
        return difference == 0
    }
}
