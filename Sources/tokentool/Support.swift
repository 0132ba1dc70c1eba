public import ArgumentParser
import Foundation
import PeerCA
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
        guard path != "-", !allowInsecure, let mode = SecureFile.permissions(path) else { return }
        if mode & 0o077 != 0 {
            throw CLIExit.usage(
                "\(path) holds secret key material but is readable by group or others (mode \(String(mode, radix: 8))); run chmod 600 \(path), or pass --allow-insecure-key-file")
        }
    }

    /// Keys from a PEM, DER, JWK or JWKS file. Files with private material must be mode 0600
    /// (or stricter) unless `allowInsecure`.
    static func keys(path: String, algorithms: Set<JWTAlgorithm>?, kid: String?, allowInsecure: Bool = false) throws -> [JWTKey] {
        let file = try KeyFileContents(try read(path))
        for line in file.skipped { printError("tokentool: \(path): skipped \(line)") }
        let keys = try file.keys.map { key in
            var key = key
            if let algorithms { key = try key.with(algorithms: algorithms) }
            // A kid names one key; a JWK Set's keys keep their own.
            if let kid, !file.isSet { key = key.with(kid: kid) }
            return key
        }
        if keys.contains(where: \.isPrivate) { try checkPrivate(path, allowInsecure: allowInsecure) }
        return keys
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
        do { try SecureFile.writeNew(path, contents, mode: mode) } catch {
            throw CLIExit.usage(error.code == .fileExists ? "\(path) exists; tokentool never overwrites key files" : error.message)
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
