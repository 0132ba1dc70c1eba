import Foundation
import TestSupport
import Testing
@testable import TokenKit

/// The `tokentool` executable, run as a user would, and interoperability with PyJWT.
@Suite("tokentool CLI", .serialized)
struct CLITests {
    let tool = Fixtures.tokentool

    func tokentool(_ args: [String], stdin: Data? = nil, cwd: URL? = nil) throws -> (status: Int32, out: String, err: String) {
        try run(tool, args, stdin: stdin, cwd: cwd)
    }

    /// Output that cannot be written is an error (exit 2) that leaves nothing half done, never a
    /// trap: FileHandle's write trapped on a full disk (`keygen ec > /dev/full`: exit 132), and
    /// `csr --out KEY > /dev/full` exited 0 with the key written and its CSR lost. A key pair is
    /// written whole or not at all.
    @Test func outputThatCannotBeWrittenFailsCleanly() throws {
        let dir = try temporaryDirectory()
        func shell(_ line: String) throws -> (status: Int32, out: String, err: String) {
            try run(URL(fileURLWithPath: "/bin/sh"), ["-c", "\"$0\" " + line, tool.path], cwd: dir)
        }
        let full = try shell("keygen ec > /dev/full")
        #expect(full.status == 2 && full.err.contains("cannot write standard output"), "\(full.status) \(full.err)")
        let lost = try shell("csr --out device.key > /dev/full")
        #expect(lost.status == 2 && lost.err.contains("cannot write standard output"), "\(lost.status) \(lost.err)")
        #expect(!FileManager.default.fileExists(atPath: dir.appendingPathComponent("device.key").path), "a key without its CSR is removed")
        #expect(try shell("csr --out device.key > device.csr").status == 0)
        let quiet = try shell("decode not.a.token 2>/dev/full")
        #expect(quiet.status == 1 || quiet.status == 2, "\(quiet.status)")

        #expect(FileManager.default.createFile(atPath: dir.appendingPathComponent("taken.pem").path, contents: Data("x".utf8)))
        for publicOut in ["taken.pem", "no-such-dir/pub.pem"] {
            let refused = try tokentool(["keygen", "ec", "--out", "k.key", "--public-out", publicOut], cwd: dir)
            #expect(refused.status == 2, "\(publicOut): \(refused.err)")
            #expect(!FileManager.default.fileExists(atPath: dir.appendingPathComponent("k.key").path), "\(publicOut): the private half stays only with its public half")
        }
        #expect(try tokentool(["keygen", "ec", "--out", "k.key", "--public-out", "k.pub"], cwd: dir).status == 0)

        // Input past 16 MiB is refused, not read until memory runs out (--key /dev/zero did).
        for arguments in [["jwk", "/dev/zero"], ["verify", "--key", "/dev/zero", "a.b.c"], ["decode", "/dev/zero"]] {
            let refused = try tokentool(arguments, cwd: dir)
            #expect(refused.status == 2 && refused.err.contains("/dev/zero holds more than 16 MiB"), "\(arguments): \(refused.err)")
        }
        let large = try tokentool(["decode", "-"], stdin: Data(repeating: 0x41, count: (16 << 20) + 1))
        #expect(large.status == 2 && large.err.contains("standard input holds more than 16 MiB"), "\(large.err)")
        // serve's settings file too: refused with the reason, before anything is started.
        let zeroConfig = try tokentool(["serve", "--config", "/dev/zero", "--state", "state"], cwd: dir)
        #expect(zeroConfig.status == 2 && zeroConfig.err.contains("/dev/zero holds more than 16 MiB"), "\(zeroConfig.err)")
        let directoryConfig = try tokentool(["serve", "--config", dir.path, "--state", "state"], cwd: dir)
        #expect(directoryConfig.status == 2 && directoryConfig.err.contains("it is a directory"), "\(directoryConfig.err)")
    }

    @Test func helpExplains() throws {
        let root = try tokentool(["--help"])
        #expect(root.status == 0)
        #expect(root.out.contains("Exit status"))
        for command in ["decode", "verify", "sign", "keygen", "jwk", "demo"] {
            let help = try tokentool([command, "--help"])
            #expect(help.status == 0, "\(command)")
            #expect(help.out.contains("tokentool \(command)") || help.out.contains("USAGE"), "\(command)")
        }
        #expect(try tokentool(["verify", "--help"]).out.contains("Examples"))
    }

    @Test func verifiesThePeerTokens() throws {
        let dir = Fixtures.vectors.appendingPathComponent("peers")
        let rs = try Fixtures.text("peers/rs256_tokens.txt").split(separator: "\n").prefix(5)
        for token in rs {
            let result = try tokentool(["verify", "--key", dir.appendingPathComponent("rsa_public.pem").path, "--iss", "postman.hubat.net", String(token)])
            #expect(result.status == 0, "\(result.err)")
            #expect(result.out.hasPrefix("VALID RS256"))
        }
        let hs = try Fixtures.text("peers/hs256_tokens.txt").split(separator: "\n").prefix(5)
        for token in hs {
            // The shared test secret is checked out world-readable: allowed explicitly.
            let result = try tokentool(["verify", "--secret-file", dir.appendingPathComponent("hs256_secret.bin").path, "--allow-insecure-key-file", "--json", String(token)])
            #expect(result.status == 0, "\(result.err)")
            guard case .object(let json) = try JSONValue.parse(result.out) else { Issue.record("not JSON"); continue }
            #expect(json["valid"] == .bool(true))
            // The secret never appears in the output.
            #expect(!result.out.contains(try Fixtures.text("peers/hs256_secret.b64url").trimmingCharacters(in: .whitespacesAndNewlines)))
        }
        // base64url-encoded secret file, token on standard input.
        let viaStdin = try tokentool(
            ["verify", "--secret-file", dir.appendingPathComponent("hs256_secret.b64url").path, "--secret-encoding", "base64url", "--allow-insecure-key-file", "-"],
            stdin: Data(try Fixtures.text("peers/hs256_token.jwt").utf8))
        #expect(viaStdin.status == 0, "\(viaStdin.err)")
    }

    @Test func exitStatusesAndMessages() throws {
        let dir = Fixtures.vectors.appendingPathComponent("peers")
        let pub = dir.appendingPathComponent("rsa_public.pem").path
        let cases = try Fixtures.text("peers/cases.tsv").split(separator: "\n").map { $0.split(separator: "\t").map(String.init) }
        let expired = try #require(cases.first { $0[0] == "rs256_expired" })[3]
        let confusion = try #require(cases.first { $0[0] == "confusion_hs256_pem" })[3]
        let result = try tokentool(["verify", "--key", pub, expired])
        #expect(result.status == 1)
        #expect(result.err.contains("INVALID expired"))
        let json = try tokentool(["verify", "--key", pub, "--json", confusion])
        #expect(json.status == 1)
        guard case .object(let object) = try JSONValue.parse(json.out), case .object(let error)? = object["error"] else {
            Issue.record("no JSON error: \(json.out)")
            return
        }
        #expect(error["code"] == .string("algorithm_not_allowed"))
        #expect(try tokentool(["verify", expired]).status == 2)  // no key: usage error
        #expect(try tokentool(["verify", "--key", "/nonexistent/key.pem", expired]).status == 2)
        #expect(try tokentool(["verify", "--key", pub, "--alg", "XS256", expired]).status == 2)
        // Times and limits that are not numbers of seconds are usage errors (a NaN leeway, age or
        // time passed an expired token; an --expires-in past Int's range trapped in sign; a
        // negative --limit trapped in ca list).
        for bad in [["--leeway", "nan"], ["--leeway", "inf"], ["--leeway=-1"], ["--max-age", "nan"], ["--at", "nan"], ["--at", "1e300"], ["--at=-5"]] {
            let refused = try tokentool(["verify", "--key", pub] + bad + [expired])
            #expect(refused.status == 2 && refused.err.contains(bad[0].split(separator: "=")[0]), "\(bad): \(refused.status) \(refused.err)")
        }
        let secret = try temporaryDirectory().appendingPathComponent("s.bin")
        #expect(FileManager.default.createFile(atPath: secret.path, contents: Data(repeating: 7, count: 32), attributes: [.posixPermissions: 0o600]))
        for expiresIn in ["9223372036854775807", "-253402300800"] {
            let refused = try tokentool(["sign", "--secret-file", secret.path, "--expires-in", expiresIn])
            #expect(refused.status == 2 && refused.err.contains("--expires-in must be from"), "\(expiresIn): \(refused.err)")
        }
        #expect(try tokentool(["sign", "--secret-file", secret.path, "--expires-in", "-60"]).status == 0)
        let limit = try tokentool(["ca", "list", "--dir", secret.deletingLastPathComponent().path, "--limit=-1"])
        #expect(limit.status == 2 && limit.err.contains("--limit must be 0 or more"), "\(limit.err)")
        // Neither a file nor shaped like a token: a usage error ("no such file"), not an invalid token.
        #expect(try tokentool(["verify", "--key", pub, "not-a-token"]).status == 2)
        #expect(try tokentool(["verify", "--key", pub, "not.a.token"]).status == 1)
        let weak = try tokentool(["verify", "--secret-file", pub, "--allow-insecure-key-file", "--alg", "HS512", expired])  // PEM as an HS512 secret: 451 bytes, fine length-wise
        #expect(weak.status == 1)
        let decoded = try tokentool(["decode", expired])
        #expect(decoded.status == 0)
        #expect(decoded.out.contains("NOT VERIFIED"))
        #expect(decoded.out.contains("postman.hubat.net"))
    }

    @Test func keygenWritesPrivateFilesSafely() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let gen = try tokentool(["keygen", "ec", "--out", "k.pem", "--public-out", "k.pub"], cwd: dir)
        #expect(gen.status == 0, "\(gen.err)")
        let attributes = try FileManager.default.attributesOfItem(atPath: dir.appendingPathComponent("k.pem").path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        let before = try Data(contentsOf: dir.appendingPathComponent("k.pem"))
        let again = try tokentool(["keygen", "ec", "--out", "k.pem"], cwd: dir)
        #expect(again.status == 2)
        #expect(again.err.contains("exists"))
        #expect(try Data(contentsOf: dir.appendingPathComponent("k.pem")) == before)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasPrefix(".tokentool-") }
        #expect(leftovers.isEmpty)
        let key = try JWTKey(pem: String(decoding: before, as: UTF8.self))
        #expect(key.isPrivate && key.type == .ec(.p256))
    }

    /// keygen → sign → verify for every algorithm, through the CLI only.
    @Test(arguments: [
        (["rsa"], "RS256"), (["rsa"], "PS256"), (["rsa", "--bits", "3072"], "PS512"), (["ec"], "ES256"),
        (["ec", "--curve", "P-384"], "ES384"), (["ec", "--curve", "P-521"], "ES512"), (["ed25519"], "EdDSA"),
        (["hmac", "--format", "jwk"], "HS256"), (["hmac", "--alg", "HS512", "--format", "raw"], "HS512"),
    ])
    func cliRoundTrip(keygen: [String], alg: String) throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let isHMAC = keygen[0] == "hmac"
        var gen = ["keygen"] + keygen + ["--out", "key"]
        if !isHMAC { gen += ["--public-out", "pub"] }
        let generated = try tokentool(gen, cwd: dir)
        #expect(generated.status == 0, "\(generated.err)")
        let keyOption = keygen.contains("raw") ? ["--secret-file", "key"] : ["--key", "key"]
        let signed = try tokentool(["sign"] + keyOption + ["--alg", alg, "--iss", "me", "--sub", "user-1", "--aud", "api", "--jti", "random"], cwd: dir)
        #expect(signed.status == 0, "\(signed.err)")
        let token = signed.out.trimmingCharacters(in: .whitespacesAndNewlines)
        let verifyKey = isHMAC ? keyOption : ["--key", "pub"]
        let verified = try tokentool(["verify"] + verifyKey + ["--alg", alg, "--iss", "me", "--aud", "api", token], cwd: dir)
        #expect(verified.status == 0, "\(verified.err)")
        #expect(verified.out.hasPrefix("VALID \(alg)"))
        let wrongAudience = try tokentool(["verify"] + verifyKey + ["--alg", alg, "--aud", "other", token], cwd: dir)
        #expect(wrongAudience.status == 1)
        #expect(wrongAudience.err.contains("audience_mismatch"))
    }

    @Test func secretFilesReadableByOthersAreRefused() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        #expect(try tokentool(["keygen", "hmac", "--format", "raw", "--out", "s.bin"], cwd: dir).status == 0)
        #expect(try tokentool(["keygen", "ec", "--out", "k.pem"], cwd: dir).status == 0)
        let signed = try tokentool(["sign", "--secret-file", "s.bin", "--sub", "x"], cwd: dir)
        #expect(signed.status == 0)
        let token = signed.out.trimmingCharacters(in: .whitespacesAndNewlines)
        for file in ["s.bin", "k.pem"] {
            try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: dir.appendingPathComponent(file).path)
        }
        let refused = try tokentool(["verify", "--secret-file", "s.bin", token], cwd: dir)
        #expect(refused.status == 2)
        #expect(refused.err.contains("chmod 600"))
        #expect(try tokentool(["verify", "--secret-file", "s.bin", "--allow-insecure-key-file", token], cwd: dir).status == 0)
        #expect(try tokentool(["sign", "--key", "k.pem", "--sub", "x"], cwd: dir).status == 2)
        #expect(try tokentool(["jwk", "k.pem"], cwd: dir).status == 2)
        // A public key file may be world-readable.
        #expect(try tokentool(["jwk", "--private", "--allow-insecure-key-file", "k.pem"], cwd: dir).status == 0)
    }

    @Test func jwkConversion() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        #expect(try tokentool(["keygen", "ec", "--curve", "P-384", "--out", "k.pem", "--public-out", "k.pub"], cwd: dir).status == 0)
        let jwk = try tokentool(["jwk", "--kid", "one", "k.pub"], cwd: dir)
        #expect(jwk.status == 0)
        try Data(jwk.out.utf8).write(to: dir.appendingPathComponent("k.jwk"))
        let key = try JWTKey(jwk: jwk.out)
        #expect(key.kid == "one" && key.type == .ec(.p384) && !key.isPrivate)
        let pem = try tokentool(["jwk", "k.jwk"], cwd: dir)
        #expect(pem.out == (try String(contentsOf: dir.appendingPathComponent("k.pub"), encoding: .utf8)))
        let thumbprint = try tokentool(["jwk", "--thumbprint", "k.pem"], cwd: dir)
        #expect(thumbprint.out.trimmingCharacters(in: .whitespacesAndNewlines) == (try key.thumbprint()))
        let privateJWK = try tokentool(["jwk", "--private", "k.pem"], cwd: dir)
        #expect(try JWTKey(jwk: privateJWK.out).isPrivate)
        #expect(!jwk.out.contains("\"d\""))
    }

    @Test func demoRuns() throws {
        let demo = try tokentool(["demo"])
        #expect(demo.status == 0, "\(demo.err)")
        #expect(demo.out.contains("REFUSED HS256 MACed with the RSA public key PEM"))
        #expect(!demo.out.contains("ACCEPTED"))
    }

    // MARK: PyJWT

    static let python = which("python3")

    func pyjwt(_ script: String, _ args: [String]) throws -> (status: Int32, out: String, err: String) {
        guard let python = Self.python else { throw FixtureError("python3 is required") }
        let probe = try run(python, ["-c", "import jwt, cryptography"])
        guard probe.status == 0 else {
            throw FixtureError("PyJWT is required for interoperability tests: pip install pyjwt cryptography (scripts/bootstrap.sh does this)")
        }
        return try run(python, ["-c", script] + args)
    }

    static let pyVerify = """
        import sys, jwt
        alg, keyfile, token = sys.argv[1], sys.argv[2], sys.argv[3]
        key = open(keyfile, "rb").read()
        claims = jwt.decode(token, key, algorithms=[alg], audience="api", issuer="me", options={"require": ["exp", "iat", "sub"]})
        print(claims["sub"])
        """

    static let pySign = """
        import sys, jwt, time
        alg, keyfile = sys.argv[1], sys.argv[2]
        key = open(keyfile, "rb").read()
        now = int(time.time())
        print(jwt.encode({"sub": "py-user", "iss": "py", "iat": now, "exp": now + 600}, key, algorithm=alg, headers={"kid": "py1"}))
        """

    /// Tokens signed by `tokentool sign` verify in PyJWT, and PyJWT's verify in `tokentool verify`,
    /// for every algorithm both support.
    @Test(arguments: [
        ("RS256", ["rsa"]), ("RS384", ["rsa"]), ("RS512", ["rsa"]), ("PS256", ["rsa"]), ("PS384", ["rsa"]), ("PS512", ["rsa"]),
        ("ES256", ["ec"]), ("ES384", ["ec", "--curve", "P-384"]), ("ES512", ["ec", "--curve", "P-521"]), ("EdDSA", ["ed25519"]),
        ("HS256", ["hmac", "--alg", "HS256"]), ("HS384", ["hmac", "--alg", "HS384"]), ("HS512", ["hmac", "--alg", "HS512"]),
    ])
    func interoperatesWithPyJWT(alg: String, keygen: [String]) throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let isHMAC = keygen[0] == "hmac"
        let gen = ["keygen"] + keygen + (isHMAC ? ["--format", "raw", "--out", "key"] : ["--out", "key", "--public-out", "pub"])
        #expect(try tokentool(gen, cwd: dir).status == 0)
        let keyOption = isHMAC ? ["--secret-file", "key"] : ["--key", "key"]
        let signed = try tokentool(["sign"] + keyOption + ["--alg", alg, "--iss", "me", "--aud", "api", "--sub", "user-\(alg)"], cwd: dir)
        #expect(signed.status == 0, "\(signed.err)")
        let token = signed.out.trimmingCharacters(in: .whitespacesAndNewlines)
        let verifyFile = dir.appendingPathComponent(isHMAC ? "key" : "pub").path
        let py = try pyjwt(Self.pyVerify, [alg, verifyFile, token])
        #expect(py.status == 0, "PyJWT refused our \(alg) token: \(py.err)")
        #expect(py.out.trimmingCharacters(in: .whitespacesAndNewlines) == "user-\(alg)")

        let pySigned = try pyjwt(Self.pySign, [alg, dir.appendingPathComponent("key").path])
        #expect(pySigned.status == 0, "\(pySigned.err)")
        let pyToken = pySigned.out.trimmingCharacters(in: .whitespacesAndNewlines)
        let verifyOption = isHMAC ? ["--secret-file", "key"] : ["--key", "pub"]
        let ours = try tokentool(["verify"] + verifyOption + ["--alg", alg, "--kid", "py1", "--iss", "py", pyToken], cwd: dir)
        #expect(ours.status == 0, "tokentool refused PyJWT's \(alg) token: \(ours.err)")
    }
}
