import Foundation
import TestSupport
import Testing
import TokenKit

/// `tokentool issuer init` as a user runs it: the key directory it makes, checked with `openssl`
/// rather than with tokentool's own code.
@Suite("tokentool issuer init")
struct IssuerCLITests {
    @Test func initMakesACurrentAndANextKeyOnlyOnce() throws {
        let dir = try temporaryDirectory()
        let made = try run(tokentoolExecutable, ["issuer", "init", "--dir", "issuer"], cwd: dir)
        #expect(made.status == 0, "\(made.err)")
        let lines = made.out.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).map(String.init) }
        #expect(lines.map { $0.last } == ["current", "next"], "\(made.out)")
        let kids = lines.compactMap(\.first)
        #expect(Set(kids).count == 2, "two different keys: \(made.out)")

        let keys = dir.appendingPathComponent("issuer")
        #expect(try mode(keys.path) == 0o700)
        let manifest = try JSONSerialization.jsonObject(with: Data(contentsOf: keys.appendingPathComponent("keys.json"))) as? [String: Any]
        let entries = (manifest?["keys"] as? [[String: Any]] ?? []).map { ($0["kid"] as? String ?? "", $0["state"] as? String ?? "") }
        #expect(entries.map(\.0) == kids && entries.map(\.1) == ["current", "next"], "\(String(describing: manifest))")

        let openssl = try #require(which("openssl"))
        for kid in kids {
            let file = keys.appendingPathComponent("\(kid).pem").path
            #expect(try mode(file) == 0o600, "\(kid).pem")
            // A P-256 private key, named by its RFC 7638 thumbprint.
            let text = try run(openssl, ["pkey", "-in", file, "-noout", "-text"])
            #expect(text.status == 0 && text.out.contains("prime256v1"), "\(text.out)\(text.err)")
            #expect(try Self.thumbprint(file, openssl: openssl) == kid)
        }

        // Again on the same directory: refused, and nothing changed.
        let before = try Data(contentsOf: keys.appendingPathComponent("keys.json"))
        let again = try run(tokentoolExecutable, ["issuer", "init", "--dir", "issuer"], cwd: dir)
        #expect(again.status == 2, "\(again.out)\(again.err)")
        #expect(again.err.contains("file_exists") && again.err.contains("never made again"), "\(again.err)")
        #expect(try Data(contentsOf: keys.appendingPathComponent("keys.json")) == before)
        #expect(try FileManager.default.contentsOfDirectory(atPath: keys.path).filter { $0.hasSuffix(".pem") }.count == 2)
    }

    func mode(_ path: String) throws -> Int {
        ((try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber)?.intValue ?? -1) & 0o777
    }

    /// The RFC 7638 thumbprint of an EC P-256 key file, by openssl: x and y are the last 64 bytes of
    /// the public key's DER (an uncompressed point), hashed in the members' canonical order.
    static func thumbprint(_ file: String, openssl: URL) throws -> String {
        let dir = try temporaryDirectory()
        let der = dir.appendingPathComponent("public.der").path
        let exported = try run(openssl, ["pkey", "-in", file, "-pubout", "-outform", "DER", "-out", der])
        guard exported.status == 0 else { throw SupportError("openssl pkey: \(exported.err)") }
        let point = try Data(contentsOf: URL(fileURLWithPath: der)).suffix(64)
        let members = #"{"crv":"P-256","kty":"EC","x":"\#(Base64URL.encode(point.prefix(32)))","y":"\#(Base64URL.encode(point.suffix(32)))"}"#
        let input = dir.appendingPathComponent("members.json")
        try members.write(to: input, atomically: true, encoding: .utf8)
        let digest = dir.appendingPathComponent("digest.bin").path
        let hashed = try run(openssl, ["dgst", "-sha256", "-binary", "-out", digest, input.path])
        guard hashed.status == 0 else { throw SupportError("openssl dgst: \(hashed.err)") }
        return Base64URL.encode(try Data(contentsOf: URL(fileURLWithPath: digest)))
    }
}
