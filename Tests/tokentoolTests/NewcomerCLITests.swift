import Foundation
import TestSupport
import Testing
import TokenKit

#if canImport(Glibc)
    import Glibc
#endif

/// What a newcomer runs into in the first hour: how tokens and key files are read, what a refusal
/// says about fixing it, and help that can be copied from.
@Suite("tokentool for newcomers", .serialized)
struct NewcomerCLITests {
    func tokentool(_ args: [String], stdin: Data? = nil, cwd: URL? = nil) throws -> (status: Int32, out: String, err: String) {
        try run(tokentoolExecutable, args, stdin: stdin, cwd: cwd)
    }

    /// A directory with an EC key pair (`k.pem`, `k.pub`) and a valid token signed with it.
    func keysAndToken() throws -> (dir: URL, token: String) {
        let dir = try temporaryDirectory()
        let key = try JWTKey.generate(.ec(.p256))
        try Data(try key.privatePEM().utf8).write(to: dir.appendingPathComponent("k.pem"))
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: dir.appendingPathComponent("k.pem").path)
        try Data(try key.publicPEM().utf8).write(to: dir.appendingPathComponent("k.pub"))
        let now = Int(Date().timeIntervalSince1970)
        return (dir, try sign(["sub": .string("user-1"), "exp": .integer(now + 600)], with: key))
    }

    // MARK: Token input

    @Test func anArgumentThatIsNeitherAFileNorATokenIsAMissingFile() throws {
        let (dir, _) = try keysAndToken()
        let verify = try tokentool(["verify", "--key", "k.pub", "nope.jwt"], cwd: dir)
        #expect(verify.status == 2, "\(verify.err)")
        #expect(verify.err.contains("no such file: nope.jwt"), "\(verify.err)")
        #expect(!verify.err.contains("malformed"), "\(verify.err)")
        let decode = try tokentool(["decode", "nope.jwt"], cwd: dir)
        #expect(decode.status == 2)
        #expect(decode.err.contains("no such file: nope.jwt"), "\(decode.err)")
        // Three base64url segments are a token, even a bad one: refused as invalid (exit 1).
        let shaped = try tokentool(["verify", "--key", "k.pub", "not.a.token"], cwd: dir)
        #expect(shaped.status == 1, "\(shaped.err)")
        #expect(shaped.err.contains("INVALID"), "\(shaped.err)")
    }

    @Test func emptyStandardInputSaysSo() throws {
        let (dir, _) = try keysAndToken()
        for args in [["verify", "--key", "k.pub"], ["verify", "--key", "k.pub", "-"], ["decode"]] {
            for input in ["", "\n  \n"] {
                let result = try tokentool(args, stdin: Data(input.utf8), cwd: dir)
                #expect(result.status == 2, "\(args): \(result.err)")
                #expect(result.err.contains("no token on standard input"), "\(args): \(result.err)")
                #expect(!result.err.contains("malformed"), "\(args): \(result.err)")
            }
        }
    }

    @Test func aBearerPrefixIsDropped() throws {
        let (dir, token) = try keysAndToken()
        for pasted in ["Bearer \(token)", "bearer \(token)", "BEARER  \(token)", "Authorization: Bearer \(token)"] {
            let argument = try tokentool(["verify", "--key", "k.pub", pasted], cwd: dir)
            #expect(argument.status == 0, "\(pasted): \(argument.err)")
            let stdin = try tokentool(["verify", "--key", "k.pub"], stdin: Data((pasted + "\n").utf8), cwd: dir)
            #expect(stdin.status == 0, "\(pasted): \(stdin.err)")
        }
        try Data("Bearer \(token)\n".utf8).write(to: dir.appendingPathComponent("header.txt"))
        let file = try tokentool(["verify", "--key", "k.pub", "header.txt"], cwd: dir)
        #expect(file.status == 0, "\(file.err)")
    }

    /// With a terminal on standard input and no token argument, tokentool says it is waiting for
    /// the token there (it used to sit silently).
    @Test func aTerminalOnStandardInputIsToldWhatIsExpected() throws {
        let (dir, _) = try keysAndToken()
        let master = open("/dev/ptmx", O_RDWR | O_NOCTTY)
        try #require(master >= 0)
        defer { close(master) }
        let name = try #require(Self.unlockedTerminalName(master))
        let terminal = open(name, O_RDWR | O_NOCTTY)
        try #require(terminal >= 0)
        let process = Process()
        process.executableURL = tokentoolExecutable
        process.arguments = ["verify", "--key", "k.pub"]
        process.currentDirectoryURL = dir
        process.standardInput = FileHandle(fileDescriptor: terminal, closeOnDealloc: true)
        let err = Pipe().closingOnExec()
        process.standardError = err
        process.standardOutput = Pipe().closingOnExec()
        try process.run()
        // Ctrl-D at the start of a line: end of input, so an empty token.
        var eof: UInt8 = 4
        _ = write(master, &eof, 1)
        let text = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let exit = process.waitForExit()
        #expect(text.contains("reading the token from standard input"), "\(text)")
        #expect(text.contains("no token on standard input"), "\(text)")
        #expect(exit?.status == 2)
        // A pipe is not told.
        let piped = try tokentool(["verify", "--key", "k.pub"], stdin: Data(), cwd: dir)
        #expect(!piped.err.contains("reading the token"), "\(piped.err)")
    }

    /// grantpt/unlockpt/ptsname (which the Glibc module does not import): the terminal's path.
    static func unlockedTerminalName(_ master: Int32) -> String? {
        typealias IntFunction = @convention(c) (Int32) -> Int32
        typealias NameFunction = @convention(c) (Int32) -> UnsafeMutablePointer<CChar>?
        let handle = dlopen(nil, RTLD_NOW)
        guard let grant = dlsym(handle, "grantpt"), let unlock = dlsym(handle, "unlockpt"), let name = dlsym(handle, "ptsname"),
            unsafeBitCast(grant, to: IntFunction.self)(master) == 0, unsafeBitCast(unlock, to: IntFunction.self)(master) == 0,
            let path = unsafeBitCast(name, to: NameFunction.self)(master)
        else { return nil }
        return String(cString: path)
    }

    @Test func keygenHMACWritesARawSecretByDefault() throws {
        let dir = try temporaryDirectory()
        let generated = try tokentool(["keygen", "hmac", "--out", "s.key"], cwd: dir)
        #expect(generated.status == 0, "\(generated.err)")
        #expect(try Data(contentsOf: dir.appendingPathComponent("s.key")).count == 32)
        let hs512 = try tokentool(["keygen", "hmac", "--alg", "HS512", "--out", "s512.key"], cwd: dir)
        #expect(hs512.status == 0, "\(hs512.err)")
        #expect(try Data(contentsOf: dir.appendingPathComponent("s512.key")).count == 64)
        let signed = try tokentool(["sign", "--secret-file", "s.key", "--sub", "x"], cwd: dir)
        #expect(signed.status == 0, "\(signed.err)")
        let verified = try tokentool(["verify", "--secret-file", "s.key", signed.out], cwd: dir)
        #expect(verified.status == 0, "\(verified.err)")
        // Asymmetric keys stay PEM; PEM asked for an HMAC secret is still refused.
        #expect(try tokentool(["keygen", "ec", "--out", "k.pem"], cwd: dir).status == 0)
        #expect(try String(contentsOf: dir.appendingPathComponent("k.pem"), encoding: .utf8).hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let pem = try tokentool(["keygen", "hmac", "--format", "pem", "--out", "p.key"], cwd: dir)
        #expect(pem.status == 2)
        #expect(pem.err.contains("no PEM form"))
    }

    @Test func signTakesANegativeExpiresIn() throws {
        let (dir, _) = try keysAndToken()
        for option in [["--expires-in", "-3600"], ["--expires-in=-3600"]] {
            let signed = try tokentool(["sign", "--key", "k.pem"] + option + ["--sub", "x"], cwd: dir)
            #expect(signed.status == 0, "\(option): \(signed.err)")
            let verified = try tokentool(["verify", "--key", "k.pub", signed.out], cwd: dir)
            #expect(verified.status == 1, "\(option): \(verified.err)")
            #expect(verified.err.contains("INVALID expired"), "\(option): \(verified.err)")
        }
        #expect(try tokentool(["sign", "--key", "k.pem", "--expires-in", "600", "--sub", "x"], cwd: dir).status == 0)
    }

    /// `serve --state` naming a place no directory can be made says so, as a usage error (exit 2):
    /// it printed Foundation's `Error Domain=NSCocoaErrorDomain Code=512 "(null)"` and exited 1,
    /// the status of an invalid token.
    @Test func aStateDirectoryThatCannotBeMadeSaysWhy() throws {
        let dir = try temporaryDirectory()
        #expect(FileManager.default.createFile(atPath: dir.appendingPathComponent("file").path, contents: Data("x".utf8)))
        let refused = try tokentool(["serve", "--port", "0", "--state", "file/state"], cwd: dir)
        #expect(refused.status == 2, "\(refused.status) \(refused.err)")
        #expect(refused.err.contains("state file/state cannot be created: Not a directory"), "\(refused.err)")
    }

    @Test func unreadableKeyFilesSayWhy() throws {
        let (dir, token) = try keysAndToken()
        let missing = try tokentool(["verify", "--key", "nope.pub", token], cwd: dir)
        #expect(missing.status == 2)
        #expect(missing.err.contains("cannot read nope.pub: no such file"), "\(missing.err)")
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("keys"), withIntermediateDirectories: true)
        let directory = try tokentool(["verify", "--key", "keys", token], cwd: dir)
        #expect(directory.status == 2)
        #expect(directory.err.contains("cannot read keys: it is a directory"), "\(directory.err)")
        let secret = try tokentool(["verify", "--secret-file", "nope.key", token], cwd: dir)
        #expect(secret.status == 2)
        #expect(secret.err.contains("cannot read nope.key: no such file"), "\(secret.err)")
        if geteuid() != 0 {  // root reads anything
            try Data("x".utf8).write(to: dir.appendingPathComponent("locked.pub"))
            try FileManager.default.setAttributes([.posixPermissions: 0o000], ofItemAtPath: dir.appendingPathComponent("locked.pub").path)
            let locked = try tokentool(["verify", "--key", "locked.pub", token], cwd: dir)
            #expect(locked.err.contains("cannot read locked.pub: permission denied"), "\(locked.err)")
        }
        // A truncated JWK Set: the error names the file.
        let jwks = try TestKeys.jwks([(TestKeys.ec, "k1")])
        try Data(jwks.utf8.prefix(jwks.utf8.count / 2)).write(to: dir.appendingPathComponent("jwks.json"))
        let truncated = try tokentool(["verify", "--key", "jwks.json", token], cwd: dir)
        #expect(truncated.status == 2)
        #expect(truncated.err.contains("jwks.json: invalid_json"), "\(truncated.err)")
    }

    // MARK: Refusals that say how to fix them

    @Test func algorithmNotAllowedNamesWhatTheKeyAcceptsAndTheOption() throws {
        let dir = try temporaryDirectory()
        try Data(TestKeys.publicPEM(TestKeys.rsa).utf8).write(to: dir.appendingPathComponent("rsa.pub"))
        try Data(TestKeys.publicPEM(TestKeys.ec).utf8).write(to: dir.appendingPathComponent("ec.pub"))
        let now = Int(Date().timeIntervalSince1970)
        let rs256 = try sign(["sub": .string("x"), "exp": .integer(now + 600)], with: TestKeys.rsa)
        // An RSA key pinned to PS256: --alg RS256 would accept the token.
        let pinned = try tokentool(["verify", "--key", "rsa.pub", "--alg", "PS256", rs256], cwd: dir)
        #expect(pinned.status == 1)
        #expect(pinned.err.contains("INVALID algorithm_not_allowed"), "\(pinned.err)")
        #expect(pinned.err.contains("accepts PS256"), "\(pinned.err)")
        #expect(pinned.err.contains("--alg RS256"), "\(pinned.err)")
        // An EC key for an RS256 token: no --alg makes it fit; say what key the token needs.
        let wrongType = try tokentool(["verify", "--key", "ec.pub", rs256], cwd: dir)
        #expect(wrongType.status == 1)
        #expect(wrongType.err.contains("accepts ES256"), "\(wrongType.err)")
        #expect(wrongType.err.contains("needs an RSA key"), "\(wrongType.err)")
        #expect(wrongType.err.contains("EC P-256"), "\(wrongType.err)")
        #expect(!wrongType.err.contains("pass --alg"), "\(wrongType.err)")
        // The same in --json.
        let json = try tokentool(["verify", "--key", "rsa.pub", "--alg", "PS256", "--json", rs256], cwd: dir)
        #expect(json.out.contains("--alg RS256"), "\(json.out)")
    }

    // MARK: Help

    /// `--help` piped (not a terminal, so ArgumentParser wraps at 80 columns): every example line
    /// stays whole, so it can be copied. Every command and subcommand.
    @Test func helpExamplesAreNeverCutMidCommand() throws {
        var commands: [[String]] = [[]]
        var seen = 0
        while seen < commands.count {
            let command = commands[seen]
            seen += 1
            let help = try helpText(command)
            #expect(help.status == 0, "\(command)")
            for problem in Self.cutExamples(help.out) {
                Issue.record("tokentool \(command.joined(separator: " ")) --help: \(problem)")
            }
            commands += Self.subcommands(help.out).filter { $0 != "help" }.map { command + [$0] }
        }
        #expect(commands.count > 15, "\(commands)")
    }

    /// `tokentool ARGS --help` with standard output a pipe and no COLUMNS (as `| cat` runs it).
    func helpText(_ command: [String]) throws -> (status: Int32, out: String) {
        let process = Process()
        process.executableURL = tokentoolExecutable
        process.arguments = command + ["--help"]
        var environment = ProcessInfo.processInfo.environment
        environment["COLUMNS"] = nil
        process.environment = environment
        let out = Pipe().closingOnExec()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        return (process.waitForExit()?.status ?? -1, text)
    }

    /// Lines of an "Examples:" or "Try it:" block that are not indented (a command cut by wrapping),
    /// or a continuation (`\`) left without its next line.
    static func cutExamples(_ help: String) -> [String] {
        var problems: [String] = []
        var inExamples = false
        var continued = false
        for line in help.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasSuffix("Examples:") || line.hasSuffix("Try it:") {
                inExamples = true
                continue
            }
            guard inExamples else { continue }
            if line.trimmingCharacters(in: .whitespaces).isEmpty {
                if continued { problems.append("a continued example ends at an empty line") }
                inExamples = false
                continued = false
                continue
            }
            if !line.hasPrefix("  ") { problems.append("cut: \"\(line)\"") }
            if line.count > 79 { problems.append("longer than 79 columns: \"\(line)\"") }
            continued = line.hasSuffix("\\")
        }
        return problems
    }

    /// The names under SUBCOMMANDS.
    static func subcommands(_ help: String) -> [String] {
        var names: [String] = []
        var inSection = false
        for line in help.split(separator: "\n", omittingEmptySubsequences: false) {
            if line == "SUBCOMMANDS:" {
                inSection = true
                continue
            }
            guard inSection else { continue }
            if line.isEmpty || !line.hasPrefix("  ") { break }
            let trimmed = line.drop { $0 == " " }
            // An abstract wrapped onto its own line is indented deeper than the names.
            guard line.count - trimmed.count == 2, let name = trimmed.split(separator: " ").first else { continue }
            names.append(String(name))
        }
        return names
    }
}
