public import ArgumentParser
import Foundation
import TokenKit

#if canImport(Glibc)
import Glibc
import CoreFoundation
#endif

extension JWTAlgorithm: ExpressibleByArgument {}
extension JWTVerifier.Engine: ExpressibleByArgument {}

enum Input {
    /// Reads a file, or standard input for "-".
    static func read(_ path: String) throws -> [UInt8] {
        if path == "-" { return Array(FileHandle.standardInput.readDataToEndOfFile()) }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw CLIExit.usage("cannot read \(path)")
        }
        return Array(data)
    }

    /// The token from an argument, a file path, or standard input ("-" or nothing).
    static func token(_ argument: String?) throws -> String {
        let raw: String
        if let argument, argument != "-" {
            // A path to an existing file is read; anything else is the token itself.
            if FileManager.default.fileExists(atPath: argument) {
                raw = String(decoding: try read(argument), as: UTF8.self)
            } else {
                raw = argument
            }
        } else {
            raw = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
        }
        return raw.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Refuses a file holding secret material that group or others can read, unless allowed.
    static func checkPrivate(_ path: String, allowInsecure: Bool) throws {
        guard path != "-", !allowInsecure else { return }
        var info = stat()
        guard stat(path, &info) == 0 else { return }
        let mode = info.st_mode & 0o777
        if mode & 0o077 != 0 {
            throw CLIExit.usage(
                "\(path) holds secret key material but is readable by group or others (mode \(String(mode, radix: 8))); run chmod 600 \(path), or pass --allow-insecure-key-file")
        }
    }

    /// Keys from a PEM, DER, JWK or JWKS file. Files with private material must be mode 0600
    /// (or stricter) unless `allowInsecure`.
    static func keys(path: String, algorithms: Set<JWTAlgorithm>?, kid: String?, allowInsecure: Bool = false) throws -> [JWTKey] {
        let keys = try parseKeys(path: path, algorithms: algorithms, kid: kid)
        if keys.contains(where: \.isPrivate) { try checkPrivate(path, allowInsecure: allowInsecure) }
        return keys
    }

    private static func parseKeys(path: String, algorithms: Set<JWTAlgorithm>?, kid: String?) throws -> [JWTKey] {
        let bytes = try read(path)
        let text = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if text.hasPrefix("{") {
            if case .object(let members)? = try? JSONValue.parse(text), members["keys"] != nil {
                let set = try JWKSet(json: text)
                for line in set.skipped { printError("tokentool: \(path): skipped \(line)") }
                return try set.keys.map { key in
                    var key = key
                    if let algorithms { key = try key.with(algorithms: algorithms) }
                    return key
                }
            }
            var key = try JWTKey(jwk: text)
            if let algorithms { key = try key.with(algorithms: algorithms) }
            if let kid { key = key.with(kid: kid) }
            return [key]
        }
        return [try JWTKey(pemOrDER: bytes, algorithms: algorithms, kid: kid)]
    }

    static func secret(path: String, encoding: SecretEncoding, allowInsecure: Bool = false) throws -> [UInt8] {
        try checkPrivate(path, allowInsecure: allowInsecure)
        let bytes = try read(path)
        switch encoding {
        case .raw: return bytes
        case .base64url:
            let text = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            guard let secret = Base64URL.decode(text) else { throw CLIExit.usage("\(path) is not base64url") }
            return secret
        }
    }
}

enum SecretEncoding: String, ExpressibleByArgument, CaseIterable {
    case raw, base64url
}

enum Output {
    /// Writes a file that must not exist yet, atomically (temporary file, then link), with `mode`.
    static func writeNew(_ path: String, contents: [UInt8], mode: mode_t) throws {
        let directory = (path as NSString).deletingLastPathComponent
        let temporary = (directory.isEmpty ? "." : directory) + "/.tokentool-\(UUID().uuidString).tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL, mode)
        guard fd >= 0 else { throw CLIExit.usage("cannot create a file in \(directory.isEmpty ? "." : directory): \(String(cString: strerror(errno)))") }
        defer { unlink(temporary) }
        var written = 0
        let ok = contents.withUnsafeBytes { buffer -> Bool in
            while written < buffer.count {
                let n = Glibc.write(fd, buffer.baseAddress.map { $0 + written }, buffer.count - written)
                if n <= 0 { return false }
                written += n
            }
            return fsync(fd) == 0
        }
        close(fd)
        guard ok else { throw CLIExit.usage("cannot write \(path)") }
        guard link(temporary, path) == 0 else {
            if errno == EEXIST { throw CLIExit.usage("\(path) exists; tokentool never overwrites key files") }
            throw CLIExit.usage("cannot create \(path): \(String(cString: strerror(errno)))")
        }
    }

    static func json(_ value: JSONValue) {
        print(value.prettyText)
    }
}

extension RegisteredClaims {
    /// Claims with human-readable times, for display.
    var summary: [String] {
        var lines: [String] = []
        let formatter = ISO8601DateFormatter()
        func time(_ name: String, _ value: NumericDate?) {
            if let value { lines.append("\(name): \(formatter.string(from: Date(timeIntervalSince1970: value))) (\(value == value.rounded() ? String(Int(value)) : String(value)))") }
        }
        if let issuer { lines.append("iss: \(issuer)") }
        if let subject { lines.append("sub: \(subject)") }
        if let audience { lines.append("aud: \(audience.joined(separator: ", "))") }
        time("iat", issuedAt)
        time("nbf", notBefore)
        time("exp", expiration)
        if let id { lines.append("jti: \(id)") }
        return lines
    }
}
