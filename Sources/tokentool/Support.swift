public import ArgumentParser
import CStandardStreams
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
    /// Reads a file, or standard input for "-". A file that cannot be read is a usage error that
    /// says why (no such file, a directory, permission denied, larger than `limit`).
    static func read(_ path: String, limit: Int = largestInput) throws -> [UInt8] {
        if path == "-" { return try readAll(STDIN_FILENO, name: "standard input", limit: limit) }
        do throws(BoundedFile.Failure) { return try BoundedFile.read(path, limit: limit) } catch { throw CLIExit.usage(error.description) }
    }

    /// The most a file or standard input given to a command may hold by default. Keys, tokens,
    /// claims, CSRs and passphrases are kilobytes; without a limit, `--key /dev/zero` (or a disk
    /// image named by mistake) read until memory ran out. (A CRL is read with ``largestCRL``.)
    static let largestInput = BoundedFile.defaultLimit
    /// The most a CRL may hold: a PEM CRL passes 16 MiB at about 250,000 revoked certificates.
    static let largestCRL = 1 << 30

    /// Everything `descriptor` gives until its end, refused past `limit` bytes.
    static func readAll(_ descriptor: Int32, name: String, limit: Int = largestInput) throws -> [UInt8] {
        do throws(BoundedFile.Failure) { return try BoundedFile.readAll(descriptor, name: name, limit: limit) } catch {
            throw CLIExit.usage(error.description)
        }
    }

    /// Whether `text` has the shape of a compact JWS: three base64url segments separated by dots
    /// (the header not empty). Used to tell a token from a file name that does not exist.
    static func looksLikeToken(_ text: Substring) -> Bool {
        let segments = text.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count == 3, !segments[0].isEmpty else { return false }
        return segments.allSatisfy { segment in
            segment.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                    UInt8(ascii: "-"), UInt8(ascii: "_"):
                    true
                default: false
                }
            }
        }
    }

    /// `text` without surrounding whitespace and without an `Authorization: Bearer ` or `Bearer `
    /// prefix (any case), as pasted from an HTTP header.
    static func stripped(_ text: String) -> Substring {
        var token = Substring(text.trimmingCharacters(in: .whitespacesAndNewlines))
        for prefix in ["authorization:", "bearer"] {
            guard token.count > prefix.count, token.prefix(prefix.count).lowercased() == prefix,
                let next = token.dropFirst(prefix.count).first, next == " " || next == "\t"
            else { continue }
            token = token.dropFirst(prefix.count).drop { $0 == " " || $0 == "\t" }
        }
        return token
    }

    /// The token from an argument, a file path, or standard input ("-" or nothing), without
    /// surrounding whitespace or a `Bearer ` prefix. An argument that is neither a file nor shaped
    /// like a token, an empty file and empty standard input are usage errors.
    static func token(_ argument: String?) throws -> String {
        if let argument, argument != "-" {
            // A path to an existing file is read; something shaped like a token is the token.
            if FileManager.default.fileExists(atPath: argument) {
                let token = stripped(String(decoding: try read(argument), as: UTF8.self))
                if token.isEmpty { throw CLIExit.usage("\(argument) is empty: it holds no token") }
                return String(token)
            }
            let token = stripped(argument)
            guard looksLikeToken(token) else {
                throw CLIExit.usage(
                    "no such file: \(argument) (and it is not a token either: a JWT is three base64url segments separated by dots)")
            }
            return String(token)
        }
        if isatty(STDIN_FILENO) != 0 {
            printError("tokentool: reading the token from standard input (paste it, then press Return and Ctrl-D)")
        }
        let token = stripped(String(decoding: try readAll(STDIN_FILENO, name: "standard input"), as: UTF8.self))
        if token.isEmpty { throw CLIExit.usage("no token on standard input") }
        return String(token)
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
        let bytes = try read(path)
        let file: KeyFileContents
        do throws(TokenError) { file = try KeyFileContents(bytes) } catch {
            throw CLIExit.usage("\(path): \(error)")
        }
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
        try writeAllNew([SecureFile.NewFile(path: path, contents: contents, mode: mode)])
    }

    /// ``writeNew(_:contents:mode:)`` for several files, all or nothing (``SecureFile/writeAllNew(_:)``).
    static func writeAllNew(_ files: [SecureFile.NewFile]) throws {
        do throws(SecureFileError) { try SecureFile.writeAllNew(files) } catch {
            throw CLIExit.usage(error.code == .exists ? "\(error.path) exists; tokentool never overwrites key files" : error.message)
        }
    }

    static func json(_ value: JSONValue) {
        print(value.prettyText)
    }

    /// Bytes to standard output, through the buffer `print` writes to (so their order holds).
    /// A failure shows in ``finish()``; FileHandle's write trapped on one (a full disk).
    static func raw(_ bytes: [UInt8]) {
        bytes.withUnsafeBufferPointer { buffer in tt_stdout_write(buffer.baseAddress, buffer.count) }
    }

    /// Flushes standard output and throws a usage error (exit 2) when anything written to it was
    /// lost — a full disk, a file system error — so that a command does not report success for
    /// output nobody got.
    static func finish() throws {
        let failure = tt_stdout_finish()
        if failure != 0 { throw CLIExit.usage("cannot write standard output: \(String(cString: strerror(failure)))") }
    }
}

extension RegisteredClaims {
    /// Claims with human-readable times, for display.
    var summary: [String] {
        var lines: [String] = []
        func time(_ name: String, _ value: NumericDate?) {
            if let value { lines.append("\(name): \(ISO8601Text.string(Date(timeIntervalSince1970: value))) (\(value == value.rounded() ? String(Int(value)) : String(value)))") }
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
