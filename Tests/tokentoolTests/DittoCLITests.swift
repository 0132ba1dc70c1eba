import Foundation
import TestSupport
import Testing

/// Ditto from the command line: the README's signed-call walk-through against a live `serve`,
/// `webhook sign`, and `keygen shared-key` read back by openssl.
@Suite("Ditto from the command line")
struct DittoCLITests {
    @Test func theReadmeDittoLinesWork() async throws {
        try await offThePool { try walkThrough() }
    }

    func walkThrough() throws {
        let block = try readmeBlock("ditto")
        #expect(block.contains("--port 8080"))
        let dir = try temporaryDirectory()
        let result = try runServingBlock(
            block.replacingOccurrences(of: "--port 8080", with: "--port 0").replacingOccurrences(of: "\ncurl ", with: "\necho; curl "), in: dir)
        #expect(result.status == 0, "\(result.out)\(result.err)")
        let answers = result.out.split(separator: "\n").filter { $0.hasPrefix("{") }.map(String.init)
        #expect(answers.count == 2, "\(result.out)")
        guard answers.count == 2 else { return }
        let signed = try JSONSerialization.jsonObject(with: Data(answers[0].utf8)) as? [String: Any] ?? [:]
        #expect(signed["authenticated"] as? Bool == true, "\(answers[0])")
        #expect(signed["userID"] as? String == "ada", "\(answers[0])")
        #expect((signed["clientInfo"] as? [String: String]) == ["team": "blue"], "\(answers[0])")
        let read = (signed["permissions"] as? [String: Any])?["read"] as? [String: Any]
        #expect((read?["queriesByCollection"] as? [String: [String]]) == ["cars": ["owner == 'ada'"]], "\(answers[0])")
        #expect(answers[1].contains(#""signature_missing""#), "\(answers[1])")
    }

    /// The header `webhook sign` prints is openssl's HMAC-SHA256 over `<t>.<body>`, keyed by the
    /// base64-decoded secret.
    @Test func webhookSignPrintsOpenSSLsHMAC() throws {
        let dir = try temporaryDirectory()
        let secret = Data((0..<32).map { UInt8($0 * 7 & 0xff) })
        let secretFile = dir.appendingPathComponent("ditto.secret")
        try Data((secret.base64EncodedString() + "\n").utf8).write(to: secretFile)
        let body = Data(#"{"appID":"app","provider":"p","token":"t"}"#.utf8)
        let bodyFile = dir.appendingPathComponent("body.json")
        try body.write(to: bodyFile)
        let open = try run(tokentoolExecutable, ["webhook", "sign", "--secret-file", secretFile.path, "--body-file", bodyFile.path])
        #expect(open.status == 2 && open.err.contains("chmod 600"), "a secret others can read: \(open.err)")
        #expect(chmod(secretFile.path, 0o600) == 0)
        let signed = try run(tokentoolExecutable, ["webhook", "sign", "--secret-file", secretFile.path, "--body-file", bodyFile.path, "--time", "1700000000"])
        #expect(signed.status == 0, "\(signed.err)")
        let hexKey = secret.map { String(format: "%02x", $0) }.joined()
        let openssl = try #require(which("openssl"))
        let mac = try run(openssl, ["dgst", "-sha256", "-mac", "HMAC", "-macopt", "hexkey:\(hexKey)", "-r"], stdin: Data("1700000000.".utf8) + body)
        let expected = mac.out.split(separator: " ").first.map(String.init) ?? "none"
        #expect(signed.out == "t=1700000000,v1=\(expected)\n")
        // From standard input, now.
        let piped = try run(tokentoolExecutable, ["webhook", "sign", "--secret-file", secretFile.path], stdin: body)
        let time = Int(piped.out.firstMatch(of: /t=(\d+),/)?.1 ?? "") ?? 0
        #expect(abs(time - Int(Date().timeIntervalSince1970)) < 600, "\(piped.out)")
        try Data("not base64 at all!".utf8).write(to: secretFile)
        #expect(try run(tokentoolExecutable, ["webhook", "sign", "--secret-file", secretFile.path, "--body-file", bodyFile.path]).status == 2)
    }

    /// Ditto's documented form: PKCS#8 DER of a P-256 key, base64 on one line, mode 0600.
    @Test func keygenSharedKeyIsDittosForm() throws {
        let dir = try temporaryDirectory()
        let made = try run(tokentoolExecutable, ["keygen", "shared-key", "--out", "shared.key"], cwd: dir)
        #expect(made.status == 0, "\(made.err)")
        let path = dir.appendingPathComponent("shared.key").path
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text.hasSuffix("\n") && !text.dropLast().contains("\n") && !text.contains("-----"), "one base64 line: \(text)")
        let mode = (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) ?? 0
        #expect(mode == 0o600)
        let der = try #require(Data(base64Encoded: text.trimmingCharacters(in: .whitespacesAndNewlines)))
        let derFile = dir.appendingPathComponent("shared.der")
        try der.write(to: derFile)
        let openssl = try #require(which("openssl"))
        let parsed = try run(openssl, ["pkey", "-inform", "DER", "-in", derFile.path, "-noout", "-text"])
        #expect(parsed.status == 0, "\(parsed.err)")
        #expect(parsed.out.contains("prime256v1") || parsed.out.contains("P-256"), "\(parsed.out)")
        // PKCS#8 (what `openssl pkcs8 -topk8 -nocrypt -outform der` writes), not SEC 1.
        let pkcs8 = try run(openssl, ["pkcs8", "-nocrypt", "-inform", "DER", "-in", derFile.path, "-outform", "DER"])
        #expect(pkcs8.status == 0, "\(pkcs8.err)")
        let pem = try run(tokentoolExecutable, ["keygen", "shared-key", "--format", "pem", "--out", "shared.pem"], cwd: dir)
        #expect(pem.status == 0)
        #expect(try String(contentsOf: dir.appendingPathComponent("shared.pem"), encoding: .utf8).hasPrefix("-----BEGIN PRIVATE KEY-----"))
        #expect(try run(tokentoolExecutable, ["keygen", "shared-key", "--curve", "P-384"], cwd: dir).status == 2)
        #expect(try run(tokentoolExecutable, ["keygen", "ec", "--format", "base64"], cwd: dir).status == 2)
    }
}
