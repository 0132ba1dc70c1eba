import Foundation
@testable import PeerCA
import TestSupport
import Testing

/// `tokentool ca …`, `tokentool csr` and `tokentool peer verify` as a user runs them.
@Suite("tokentool ca, csr and peer", .serialized)
struct CACLITests {
    func tokentool(_ args: [String], cwd: URL) throws -> (status: Int32, out: String, err: String) {
        try run(tokentoolExecutable, args, cwd: cwd)
    }

    /// `ca init` with a longest validity that is not a number of seconds (inf, nan) is a usage
    /// error that writes nothing: inf left the keys and certificates behind, without ca.json,
    /// and the next `ca init` refused to overwrite them.
    @Test func caInitRefusesAnUnusableValidityAndWritesNothing() throws {
        let dir = try temporaryDirectory()
        for validity in ["inf", "nan", "59"] {
            let refused = try tokentool(["ca", "init", "--dir", "ca", "--app-id", "a", "--max-validity", validity], cwd: dir)
            #expect(refused.status == 2 && refused.err.contains("--max-validity must be a number of seconds, at least 60"), "\(validity): \(refused.err)")
            #expect(!FileManager.default.fileExists(atPath: dir.appendingPathComponent("ca").path))
        }
        #expect(try tokentool(["ca", "init", "--dir", "ca", "--app-id", "a", "--max-validity", "60"], cwd: dir).status == 0)
        // A CRL's validity likewise (nan trapped; a negative one gave nextUpdate before thisUpdate).
        for validity in ["nan", "inf", "0", "-5"] {
            let refused = try tokentool(["ca", "crl", "--dir", "ca", "--validity=\(validity)"], cwd: dir)
            #expect(refused.status == 2 && refused.err.contains("--validity must be a number of seconds"), "\(validity): \(refused.err)")
        }
        #expect(try tokentool(["ca", "crl", "--dir", "ca", "--validity", "60"], cwd: dir).status == 0)
    }

    /// A ledger that never answers (a PostgreSQL "server" that takes the connection and says
    /// nothing) ends a ledger command at --ledger-timeout with a message naming the store without
    /// its password; PostgresNIO's own connection wait is 120 s and its queries have none.
    @Test func aLedgerThatNeverAnswersEndsTheCommandInTime() throws {
        let dir = try temporaryDirectory()
        #expect(try tokentool(["ca", "init", "--dir", "ca", "--app-id", "a"], cwd: dir).status == 0)
        let listener = try LoopbackListener()
        let store = "postgres://tokentool:s3cret@127.0.0.1:\(listener.port)/tt?sslmode=disable"
        for command in [["ca", "list"], ["ca", "crl"], ["ca", "revoke", "ab"]] {
            let start = Date()
            let stalled = try tokentool(command + ["--dir", "ca", "--store", store, "--ledger-timeout", "1.5"], cwd: dir)
            #expect(Date().timeIntervalSince(start) < 60, "\(command)")
            #expect(stalled.status == 1, "\(command): \(stalled.err)")
            #expect(stalled.err.contains("did not answer within 1.5 s (--ledger-timeout)"), "\(command): \(stalled.err)")
            #expect(stalled.err.contains("127.0.0.1:\(listener.port)") && !stalled.err.contains("s3cret"), "\(command): \(stalled.err)")
        }
        let refused = try tokentool(["ca", "list", "--dir", "ca", "--ledger-timeout", "0"], cwd: dir)
        #expect(refused.status == 2 && refused.err.contains("--ledger-timeout must be more than 0"), "\(refused.err)")
        withExtendedLifetime(listener) {}
    }

    /// A certificate past its notAfter is listed as expired, in the text and in the JSON alike
    /// (the JSON said "valid" for it before).
    @Test func anExpiredCertificateIsListedAsExpired() async throws {
        let openssl = try OpenSSL()
        func tool(_ args: [String]) throws -> (status: Int32, out: String, err: String) { try tokentool(args, cwd: openssl.dir) }
        #expect(try tool(["ca", "init", "--dir", "ca", "--app-id", "my-app"]).status == 0)
        #expect(try tool(["keygen", "ec", "--out", "idp.key", "--public-out", "idp.pub"]).status == 0)
        let token = try tool(["sign", "--key", "idp.key", "--iss", "https://idp.example/", "--sub", "user-42", "--expires-in", "600"])
        try openssl.write("token.jwt", token.out)
        try openssl.write("device.csr", try tool(["csr", "--key-type", "p256", "--out", "device.key"]).out)
        // One certificate for an hour (valid throughout the test), one for 3 s (waited out).
        for validity in ["3600", "3"] {
            let issued = try tool(["ca", "issue", "--dir", "ca", "--csr", "device.csr", "--key", "idp.pub", "--validity", validity, "token.jwt"])
            #expect(issued.status == 0, "\(issued.err)")
        }
        func listed() throws -> [(status: String?, notAfter: Date)] {
            let entries = try JSONSerialization.jsonObject(with: Data(try tool(["ca", "list", "--dir", "ca", "--json"]).out.utf8)) as? [[String: Any]] ?? []
            return entries.compactMap { entry in
                (entry["notAfter"] as? String).flatMap { try? Date($0, strategy: .iso8601) }.map { (entry["status"] as? String, $0) }
            }.sorted { $0.notAfter < $1.notAfter }
        }
        let fresh = try listed()
        try #require(fresh.count == 2, "\(fresh)")
        #expect(fresh[1].status == "valid", "\(fresh)")
        try await Task.sleep(for: .seconds(max(0, fresh[0].notAfter.timeIntervalSinceNow) + 1.1))
        let later = try listed()
        #expect(later.map(\.status) == ["expired", "valid"], "\(later)")
        #expect(try tool(["ca", "list", "--dir", "ca"]).out.contains("  expired  until "))
    }

    @Test func theWholeFlowFromTheCommandLine() throws {
        let openssl = try OpenSSL()
        let dir = openssl.dir
        func tool(_ args: [String]) throws -> (status: Int32, out: String, err: String) { try tokentool(args, cwd: dir) }
        let initialised = try tool(["ca", "init", "--dir", "ca", "--app-id", "My-App", "--intermediate", "--token-reuse", "once"])
        #expect(initialised.status == 0, "\(initialised.err)")
        #expect(initialised.out.contains("trust domain: my-app"))
        for (file, mode) in [("ca/issuer.key", 0o600), ("ca/root.key", 0o600), ("ca/root.pem", 0o644)] {
            let attributes = try FileManager.default.attributesOfItem(atPath: openssl.path(file))
            #expect((attributes[.posixPermissions] as? Int) == mode, "\(file)")
        }
        // Never overwritten.
        let again = try tool(["ca", "init", "--dir", "ca", "--app-id", "other"])
        #expect(again.status == 2)
        #expect(again.err.contains("never overwrites"))

        #expect(try tool(["keygen", "ec", "--out", "idp.key", "--public-out", "idp.pub"]).status == 0)
        let token = try tool(["sign", "--key", "idp.key", "--iss", "https://idp.example/", "--sub", "user-42", "--jti", "t1", "--expires-in", "600"])
        #expect(token.status == 0, "\(token.err)")
        try openssl.write("token.jwt", token.out)
        let csr = try tool(["csr", "--key-type", "ed25519", "--out", "device.key"])
        #expect(csr.status == 0, "\(csr.err)")
        try openssl.write("device.csr", csr.out)
        #expect(try openssl.run(["req", "-in", "device.csr", "-noout", "-verify"]).output.contains("verify OK"))

        let issued = try tool(["ca", "issue", "--dir", "ca", "--csr", "device.csr", "--key", "idp.pub", "--iss", "https://idp.example/", "token.jwt"])
        #expect(issued.status == 0, "\(issued.err)")
        try openssl.write("device.pem", issued.out)
        let verified = try openssl.run(["verify", "-CAfile", "ca/root.pem", "-untrusted", "ca/issuer.pem", "device.pem"])
        #expect(verified.output.contains("device.pem: OK"), "\(verified.output)")
        // Token reuse "once": the same token for another key is refused (exit 1), nothing recorded;
        // for the same key it gives the same certificate again (a retry).
        let other = try tool(["csr", "--key-type", "ed25519", "--out", "other.key"])
        try openssl.write("other.csr", other.out)
        let reused = try tool(["ca", "issue", "--dir", "ca", "--csr", "other.csr", "--key", "idp.pub", "token.jwt"])
        #expect(reused.status == 1)
        #expect(reused.err.contains("token_reused"))
        let retried = try tool(["ca", "issue", "--dir", "ca", "--csr", "device.csr", "--key", "idp.pub", "token.jwt"])
        #expect(retried.status == 0 && retried.out == issued.out, "\(retried.err)")
        // A token signed by someone else is refused before anything is issued.
        #expect(try tool(["keygen", "ec", "--out", "evil.key"]).status == 0)
        let forged = try tool(["sign", "--key", "evil.key", "--iss", "https://idp.example/", "--sub", "admin", "--expires-in", "600"])
        try openssl.write("forged.jwt", forged.out)
        let refused = try tool(["ca", "issue", "--dir", "ca", "--csr", "device.csr", "--key", "idp.pub", "forged.jwt"])
        #expect(refused.status == 1)
        #expect(refused.err.contains("bad_signature"))

        let list = try tool(["ca", "list", "--dir", "ca", "--json"])
        #expect(list.status == 0)
        let entries = try #require(try JSONSerialization.jsonObject(with: Data(list.out.utf8)) as? [[String: Any]])
        #expect(entries.count == 1)
        let serial = try #require(entries.first?["serial"] as? String)
        #expect(entries.first?["subject"] as? String == "spiffe://my-app/idp.example/user-42")

        let trusted = try tool(["peer", "verify", "--ca", "ca/root.pem", "--trust-domain", "my-app", "device.pem"])
        #expect(trusted.status == 0, "\(trusted.err)")
        #expect(trusted.out.contains("TRUSTED spiffe://my-app/idp.example/user-42"))
        #expect(try tool(["peer", "verify", "--ca", "ca/root.pem", "--trust-domain", "other", "device.pem"]).status == 1)

        #expect(try tool(["ca", "revoke", "--dir", "ca", "--reason", "keyCompromise", serial]).status == 0)
        let crl = try tool(["ca", "crl", "--dir", "ca"])
        try openssl.write("crl.pem", crl.out)
        #expect(try openssl.must(["crl", "-in", "crl.pem", "-noout", "-text"]).contains(serial.uppercased()))
        // The CRL's signer comes from the user, never from the chain the peer sent.
        let unsigned = try tool(["peer", "verify", "--ca", "ca/root.pem", "--crl", "crl.pem", "device.pem"])
        #expect(unsigned.status == 2 && unsigned.err.contains("--crl needs --crl-issuer"), "\(unsigned.err)")
        let revoked = try tool(["peer", "verify", "--ca", "ca/root.pem", "--crl", "crl.pem", "--crl-issuer", "ca/issuer.pem", "device.pem"])
        #expect(revoked.status == 1)
        #expect(revoked.err.contains("revoked"))
        #expect(try tool(["ca", "revoke", "--dir", "ca", "00ff"]).status == 2)
        // Help explains every command.
        for command in [["ca"], ["ca", "init"], ["ca", "issue"], ["ca", "revoke"], ["ca", "list"], ["ca", "crl"], ["csr"], ["peer", "verify"]] {
            let help = try tool(command + ["--help"])
            #expect(help.status == 0)
            #expect(help.out.contains("Example") || help.out.contains("SUBCOMMANDS"), "\(command)")
        }
    }

    /// `tokentool ca` with the issuer key encrypted under a passphrase file.
    @Test func cliWithAPassphrase() throws {
        let openssl = try OpenSSL()
        let dir = openssl.dir
        try openssl.write("pass.txt", "s3cret passphrase\n")
        chmod(openssl.path("pass.txt"), 0o600)
        let created = try run(tokentoolExecutable, ["ca", "init", "--dir", "ca", "--app-id", "app", "--passphrase-file", "pass.txt"], cwd: dir)
        #expect(created.status == 0, "\(created.err)")
        #expect(String(decoding: try openssl.read("ca/issuer.key"), as: UTF8.self).hasPrefix("-----BEGIN ENCRYPTED PRIVATE KEY-----"))
        let without = try run(tokentoolExecutable, ["ca", "crl", "--dir", "ca"], cwd: dir)
        #expect(without.status == 2)
        #expect(without.err.contains("passphrase"))
        let with = try run(tokentoolExecutable, ["ca", "crl", "--dir", "ca", "--passphrase-file", "pass.txt"], cwd: dir)
        #expect(with.status == 0, "\(with.err)")
        #expect(with.out.hasPrefix("-----BEGIN X509 CRL-----"))
        // A passphrase file others can read is refused.
        chmod(openssl.path("pass.txt"), 0o644)
        #expect(try run(tokentoolExecutable, ["ca", "crl", "--dir", "ca", "--passphrase-file", "pass.txt"], cwd: dir).status == 2)
    }
}
