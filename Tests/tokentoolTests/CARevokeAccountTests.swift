import Foundation
import TestSupport
import Testing

/// `tokentool ca revoke --account`: an operator logs an account out everywhere: every
/// certificate of it is revoked (and in the next CRL), others' are untouched.
@Suite("tokentool ca revoke --account", .serialized)
struct CARevokeAccountTests {
    @Test func revokingAnAccountRevokesExactlyItsCertificates() throws {
        let openssl = try OpenSSL()
        func tool(_ args: [String]) throws -> (status: Int32, out: String, err: String) { try run(tokentoolExecutable, args, cwd: openssl.dir) }
        let initialised = try tool(["ca", "init", "--dir", "ca", "--app-id", "accounts"])
        #expect(initialised.status == 0, "\(initialised.err)")
        #expect(try tool(["keygen", "hmac", "--out", "hs.secret"]).status == 0)

        /// Signs a token for `account` and issues a certificate for a new key; returns its serial.
        func issue(_ account: String, _ n: Int) throws -> String {
            let token = try tool(["sign", "--secret-file", "hs.secret", "--iss", "https://idp.example/", "--sub", account, "--expires-in", "600"])
            #expect(token.status == 0, "\(token.err)")
            try openssl.write("t\(n).jwt", token.out)
            let csr = try tool(["csr", "--out", "d\(n).key"])
            #expect(csr.status == 0, "\(csr.err)")
            try openssl.write("d\(n).csr", csr.out)
            let issued = try tool([
                "ca", "issue", "--dir", "ca", "--csr", "d\(n).csr", "--secret-file", "hs.secret", "--iss", "https://idp.example/", "--json", "t\(n).jwt",
            ])
            #expect(issued.status == 0, "\(issued.err)")
            let object = try JSONSerialization.jsonObject(with: Data(issued.out.utf8)) as? [String: Any]
            // ca issue --json carries the identity in its one JSON form.
            let identity = object?["identity"] as? [String: Any]
            #expect(identity?["account"] as? String == account, "\(issued.out)")
            #expect(identity?["providerUID"] as? String == account)
            return try #require(object?["serial"] as? String)
        }
        let alice = [try issue("alice", 1), try issue("alice", 2)]
        let bob = try issue("bob", 3)

        let revoked = try tool(["ca", "revoke", "--dir", "ca", "--account", "alice", "--reason", "cessationOfOperation"])
        #expect(revoked.status == 0, "\(revoked.err)")
        let lines = revoked.out.split(separator: "\n").map(String.init)
        #expect(lines.count == 3, "\(revoked.out)")
        let serials = lines.dropLast().compactMap { line -> String? in line.firstMatch(of: /^revoked ([0-9a-f]+)\s/).map { String($0.1) } }
        #expect(Set(serials) == Set(alice), "\(revoked.out)")
        #expect(lines.last?.hasPrefix("revoked 2 certificates of alice; its sessions before 20") == true, "\(revoked.out)")
        #expect(lines.last?.hasSuffix(" are ended") == true, "\(revoked.out)")

        let list = try tool(["ca", "list", "--dir", "ca", "--json"])
        #expect(list.status == 0, "\(list.err)")
        let entries = try #require(try JSONSerialization.jsonObject(with: Data(list.out.utf8)) as? [[String: Any]])
        var statuses: [String: String] = [:]
        for entry in entries {
            let status = entry["status"] as? String ?? "?"
            statuses[entry["serial"] as? String ?? "?"] = status == "revoked" ? "revoked \(entry["reason"] as? String ?? "?")" : status
        }
        #expect(statuses == [alice[0]: "revoked cessationOfOperation", alice[1]: "revoked cessationOfOperation", bob: "valid"])

        // The CRL lists exactly alice's two.
        let crl = try tool(["ca", "crl", "--dir", "ca"])
        #expect(crl.status == 0, "\(crl.err)")
        try openssl.write("crl.pem", crl.out)
        let text = try openssl.must(["crl", "-in", "crl.pem", "-noout", "-text"])
        let listed = text.matches(of: /Serial Number: ([0-9A-Fa-f]+)/).map { Self.normalised(String($0.1)) }
        #expect(listed.count == 2, "\(text)")
        #expect(Set(listed) == Set(alice.map(Self.normalised)), "\(text)")

        // Again: nothing left to revoke, still a success (the sessions end again, later).
        let again = try tool(["ca", "revoke", "--dir", "ca", "--account", "alice"])
        #expect(again.status == 0, "\(again.err)")
        #expect(again.out.hasPrefix("revoked 0 certificates of alice; its sessions before "), "\(again.out)")
        // An account without certificates can be logged out.
        let nobody = try tool(["ca", "revoke", "--dir", "ca", "--account", "nobody"])
        #expect(nobody.status == 0, "\(nobody.err)")
        #expect(nobody.out.hasPrefix("revoked 0 certificates of nobody;"), "\(nobody.out)")

        // As `serve` does, `ca issue` refuses a token of alice's from before the end, and issues
        // for one signed after it (a second later: `iat` is in whole seconds).
        let csr = try tool(["csr", "--out", "late.key"])
        try openssl.write("late.csr", csr.out)
        let ended = try tool(["ca", "issue", "--dir", "ca", "--csr", "late.csr", "--secret-file", "hs.secret", "--iss", "https://idp.example/", "t1.jwt"])
        #expect(ended.status == 1 && ended.err.contains("REFUSED session_ended"), "\(ended.status) \(ended.err)")
        Thread.sleep(forTimeInterval: 1.1)
        let fresh = try tool(["sign", "--secret-file", "hs.secret", "--iss", "https://idp.example/", "--sub", "alice", "--expires-in", "600"])
        try openssl.write("fresh.jwt", fresh.out)
        let signedInAgain = try tool(["ca", "issue", "--dir", "ca", "--csr", "late.csr", "--secret-file", "hs.secret", "--iss", "https://idp.example/", "fresh.jwt"])
        #expect(signedInAgain.status == 0, "\(signedInAgain.err)")
        let afterwards = try tool(["ca", "list", "--dir", "ca", "--json"])
        let count = (try JSONSerialization.jsonObject(with: Data(afterwards.out.utf8)) as? [[String: Any]])?.count
        #expect(count == 4, "alice's, bob's and the one after the end: \(afterwards.out)")
    }

    /// Exactly one of a serial and --account: anything else is a usage error (exit 2) that says so,
    /// and revokes nothing.
    @Test func aSerialOrAnAccountNotBothNorNeither() throws {
        let openssl = try OpenSSL()
        func tool(_ args: [String]) throws -> (status: Int32, out: String, err: String) { try run(tokentoolExecutable, args, cwd: openssl.dir) }
        #expect(try tool(["ca", "init", "--dir", "ca", "--app-id", "accounts"]).status == 0)
        for (arguments, message) in [
            (["--account", "alice", "00ff"], "not both"), ([], "a serial number or --account"), (["--account", ""], "--account is empty"),
        ] {
            let result = try tool(["ca", "revoke", "--dir", "ca"] + arguments)
            #expect(result.status == 2, "\(arguments): \(result.out)\(result.err)")
            #expect(result.err.contains(message), "\(arguments): \(result.err)")
            #expect(result.out.isEmpty, "\(arguments): \(result.out)")
        }
        let help = try tool(["ca", "revoke", "--help"])
        #expect(help.status == 0)
        #expect(help.out.contains("--account"), "\(help.out)")
    }

    /// A hex serial without leading zeros, upper-case (as openssl prints it, or not).
    static func normalised(_ serial: String) -> String {
        let upper = serial.uppercased().drop { $0 == "0" }
        return upper.isEmpty ? "0" : String(upper)
    }
}
