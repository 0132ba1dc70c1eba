import Foundation
import TestSupport
import Testing

/// `tokentool verify` and `tokentool ca issue` derive the same identity the server does, and apply
/// the factor policy (`--require-factor`, `--acr`, `--max-sign-in-age`) and the account options
/// (`--provider`, `--account-claim`, `--account-prefix`).
@Suite("tokentool identity and factor options", .serialized)
struct IdentityCLITests {
    /// A scratch directory with an HMAC secret (`s.bin`, mode 0600).
    struct Scratch {
        let dir: URL

        init() throws {
            dir = try temporaryDirectory()
            let made = try run(tokentoolExecutable, ["keygen", "hmac", "--format", "raw", "--out", "s.bin"], cwd: dir)
            #expect(made.status == 0, "\(made.err)")
        }

        func tool(_ args: [String]) throws -> (status: Int32, out: String, err: String) {
            try run(tokentoolExecutable, args, cwd: dir)
        }

        /// A token signed with `s.bin` carrying `claims` (plus `iat`, and `exp` in 600 s).
        func token(_ claims: String) throws -> String {
            let signed = try tool(["sign", "--secret-file", "s.bin", "--expires-in", "600", "--claims", claims])
            #expect(signed.status == 0, "\(signed.err)")
            return signed.out.trimmingCharacters(in: .whitespacesAndNewlines)
        }

        /// `tokentool verify --secret-file s.bin ARGS TOKEN`.
        func verify(_ args: [String], _ token: String) throws -> (status: Int32, out: String, err: String) {
            try tool(["verify", "--secret-file", "s.bin"] + args + [token])
        }

        func write(_ name: String, _ text: String) throws {
            try text.write(to: dir.appendingPathComponent(name), atomically: true, encoding: .utf8)
        }
    }

    static func object(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any], "\(text)")
    }

    /// The error code of a `--json` refusal.
    static func errorCode(_ text: String) throws -> String? {
        let object = try object(text)
        #expect(object["valid"] as? Bool == false)
        return (object["error"] as? [String: Any])?["code"] as? String
    }

    @Test func requireFactorRefusesASignInWithoutItAndAcceptsOneWithIt() throws {
        let scratch = try Scratch()
        let password = try scratch.token(#"{"iss":"https://idp.example/","sub":"user-1","amr":["pwd"]}"#)
        let refused = try scratch.verify(["--require-factor", "mfa"], password)
        #expect(refused.status == 1)
        #expect(refused.err.hasPrefix("INVALID factor_required: "), "\(refused.err)")
        #expect(refused.err.contains("mfa"), "\(refused.err)")
        #expect(refused.out.isEmpty)
        let json = try scratch.verify(["--require-factor", "mfa", "--json"], password)
        #expect(json.status == 1)
        #expect(try Self.errorCode(json.out) == "factor_required")
        // No "amr" at all: refused as well.
        let bare = try scratch.token(#"{"iss":"https://idp.example/","sub":"user-1"}"#)
        #expect(try scratch.verify(["--require-factor", "mfa"], bare).err.contains("factor_required"))

        let mfa = try scratch.token(#"{"iss":"https://idp.example/","sub":"user-1","amr":["pwd","mfa"]}"#)
        let accepted = try scratch.verify(["--require-factor", "mfa"], mfa)
        #expect(accepted.status == 0, "\(accepted.err)")
        #expect(accepted.out.hasPrefix("VALID HS256"))
        #expect(accepted.out.contains("  identity: user-1 (provider token; factors pwd, mfa)"), "\(accepted.out)")
        // Every required factor must be shown.
        let both = try scratch.verify(["--require-factor", "mfa", "--require-factor", "hwk"], mfa)
        #expect(both.status == 1)
        #expect(both.err.contains("factor_required") && both.err.contains("hwk"), "\(both.err)")
    }

    @Test func acrAndSignInAgeRefuseWithTheirOwnCodes() throws {
        let scratch = try Scratch()
        let now = Int(Date().timeIntervalSince1970)
        let low = try scratch.token(#"{"iss":"https://idp.example/","sub":"u","acr":"urn:low"}"#)
        let acr = try scratch.verify(["--acr", "urn:high"], low)
        #expect(acr.status == 1)
        #expect(acr.err.hasPrefix("INVALID acr_not_accepted: "), "\(acr.err)")
        #expect(try Self.errorCode(try scratch.verify(["--acr", "urn:high", "--json"], low).out) == "acr_not_accepted")
        let accepted = try scratch.verify(["--acr", "urn:high", "--acr", "urn:low"], low)
        #expect(accepted.status == 0, "\(accepted.err)")
        #expect(accepted.out.contains("acr urn:low"), "\(accepted.out)")

        let old = try scratch.token(#"{"iss":"https://idp.example/","sub":"u","auth_time":\#(now - 3600)}"#)
        let age = try scratch.verify(["--max-sign-in-age", "600"], old)
        #expect(age.status == 1)
        #expect(age.err.hasPrefix("INVALID sign_in_too_old: "), "\(age.err)")
        #expect(try Self.errorCode(try scratch.verify(["--max-sign-in-age", "600", "--json"], old).out) == "sign_in_too_old")
        #expect(try scratch.verify(["--max-sign-in-age", "7200"], old).status == 0)
        // Without auth_time, "iat" (just now) is the sign-in.
        let fresh = try scratch.token(#"{"iss":"https://idp.example/","sub":"u"}"#)
        #expect(try scratch.verify(["--max-sign-in-age", "600"], fresh).status == 0)

        // Usage errors: exit 2.
        for bad in [["--max-sign-in-age", "0"], ["--max-sign-in-age", "-5"], ["--require-factor", ""], ["--acr", ""], ["--account-prefix", ""]] {
            let result = try scratch.verify(bad, fresh)
            #expect(result.status == 2, "\(bad): \(result.err)")
        }
    }

    @Test func jsonCarriesTheIdentityBesideHeaderAndPayload() throws {
        let scratch = try Scratch()
        let token = try scratch.token(
            #"{"iss":"https://idp.example/","sub":"user-1","amr":["pwd","mfa"],"acr":"urn:high","email":"u@example.com","name":"U One"}"#)
        let result = try scratch.verify(["--json", "--provider", "auth0", "--account-prefix", "auth0:", "--require-factor", "mfa"], token)
        #expect(result.status == 0, "\(result.err)")
        let object = try Self.object(result.out)
        #expect(object["valid"] as? Bool == true)
        #expect((object["header"] as? [String: Any])?["alg"] as? String == "HS256")
        #expect((object["payload"] as? [String: Any])?["sub"] as? String == "user-1")
        let identity = try #require(object["identity"] as? [String: Any], "\(result.out)")
        #expect(identity["account"] as? String == "auth0:user-1")
        #expect(identity["provider"] as? String == "auth0")
        #expect(identity["providerUID"] as? String == "user-1")
        #expect(identity["issuer"] as? String == "https://idp.example/")
        #expect(identity["spiffeID"] as? String == "spiffe://tokentool/idp.example/user-1")
        #expect(identity["acr"] as? String == "urn:high")
        #expect(identity["name"] as? String == "U One")
        #expect((identity["profile"] as? [String: Any])?["email"] as? String == "u@example.com")
        let factors = try #require(identity["factors"] as? [[String: Any]])
        #expect(factors.compactMap { $0["method"] as? String } == ["pwd", "mfa"])
        #expect(factors.allSatisfy { $0["signedInAt"] is String })

        // Defaults: the bare sub, provider "token".
        let plain = try Self.object(try scratch.verify(["--json"], token).out)
        let defaults = try #require(plain["identity"] as? [String: Any])
        #expect(defaults["account"] as? String == "user-1")
        #expect(defaults["provider"] as? String == "token")
        // Another claim names the account.
        let byEmail = try Self.object(try scratch.verify(["--json", "--account-claim", "email"], token).out)
        #expect((byEmail["identity"] as? [String: Any])?["account"] as? String == "u@example.com")
        let text = try scratch.verify(["--account-prefix", "auth0:"], token)
        #expect(text.out.contains("  identity: auth0:user-1 (provider token; factors pwd, mfa; acr urn:high)"), "\(text.out)")
    }

    /// Tokens that verified before still do, without an identity; asking for one makes the missing
    /// claim a refusal.
    @Test func aTokenWithoutAnIdentityStaysValidUnlessOneIsAskedFor() throws {
        let scratch = try Scratch()
        let anonymous = try scratch.token(#"{"role":"svc"}"#)
        let text = try scratch.verify([], anonymous)
        #expect(text.status == 0, "\(text.err)")
        #expect(!text.out.contains("identity"), "\(text.out)")
        #expect(text.err.isEmpty, "\(text.err)")
        let json = try scratch.verify(["--json"], anonymous)
        #expect(json.status == 0)
        let object = try Self.object(json.out)
        #expect(object["identity"] == nil)
        #expect(object["payload"] != nil)

        for options in [["--require-factor", "mfa"], ["--account-prefix", "x:"], ["--provider", "p"]] {
            let refused = try scratch.verify(options, anonymous)
            #expect(refused.status == 1, "\(options)")
            #expect(refused.err.hasPrefix("INVALID policy_violation: "), "\(options): \(refused.err)")
        }
        let noEmail = try scratch.token(#"{"iss":"https://idp.example/","sub":"user-1"}"#)
        let missing = try scratch.verify(["--account-claim", "email", "--json"], noEmail)
        #expect(missing.status == 1)
        #expect(try Self.errorCode(missing.out) == "policy_violation")
    }

    @Test func caIssueAppliesTheFactorPolicyAndTheAccountOptions() throws {
        let scratch = try Scratch()
        func tool(_ args: [String]) throws -> (status: Int32, out: String, err: String) { try scratch.tool(args) }
        let initialised = try tool(["ca", "init", "--dir", "ca", "--app-id", "my-app"])
        #expect(initialised.status == 0, "\(initialised.err)")
        let csr = try tool(["csr", "--out", "device.key"])
        #expect(csr.status == 0, "\(csr.err)")
        try scratch.write("device.csr", csr.out)
        let issue = ["ca", "issue", "--dir", "ca", "--csr", "device.csr", "--secret-file", "s.bin"]

        let password = try scratch.token(#"{"iss":"https://idp.example/","sub":"user-1","amr":["pwd"]}"#)
        let refused = try tool(issue + ["--require-factor", "mfa", "--account-prefix", "idp:", password])
        #expect(refused.status == 1)
        #expect(refused.err.hasPrefix("REFUSED factor_required: "), "\(refused.err)")
        #expect(refused.out.isEmpty)
        let old = try scratch.token(#"{"iss":"https://idp.example/","sub":"user-1","amr":["mfa"],"auth_time":1}"#)
        #expect(try tool(issue + ["--max-sign-in-age", "900", old]).err.hasPrefix("REFUSED sign_in_too_old: "))
        #expect(try tool(issue + ["--acr", "urn:high", old]).err.hasPrefix("REFUSED acr_not_accepted: "))
        let empty = try tool(["ca", "list", "--dir", "ca", "--json"])
        #expect(empty.status == 0, "\(empty.err)")
        #expect((try JSONSerialization.jsonObject(with: Data(empty.out.utf8)) as? [Any])?.isEmpty == true, "\(empty.out)")

        let mfa = try scratch.token(#"{"iss":"https://idp.example/","sub":"user-1","amr":["pwd","mfa"]}"#)
        let issued = try tool(issue + ["--require-factor", "mfa", "--account-prefix", "idp:", "--provider", "idp", mfa])
        #expect(issued.status == 0, "\(issued.err)")
        #expect(issued.out.contains("BEGIN CERTIFICATE"))
        #expect(issued.err.contains("spiffe://my-app/idp.example/user-1"), "\(issued.err)")
        let list = try tool(["ca", "list", "--dir", "ca", "--json"])
        let entries = try #require(try JSONSerialization.jsonObject(with: Data(list.out.utf8)) as? [[String: Any]], "\(list.out)")
        #expect(entries.count == 1)
        #expect(entries.first?["commonName"] as? String == "idp:user-1")
        #expect(entries.first?["subject"] as? String == "spiffe://my-app/idp.example/user-1")

        // Without the options, ca issue keeps its behaviour: CN = sub.
        let plain = try tool(issue + [mfa])
        #expect(plain.status == 0, "\(plain.err)")
        let again = try tool(["ca", "list", "--dir", "ca", "--json"])
        let names = (try JSONSerialization.jsonObject(with: Data(again.out.utf8)) as? [[String: Any]] ?? []).compactMap { $0["commonName"] as? String }
        #expect(names.sorted() == ["idp:user-1", "user-1"], "\(again.out)")
    }

    @Test func helpExplainsTheOptions() throws {
        let scratch = try Scratch()
        let verify = try scratch.tool(["verify", "--help"])
        #expect(verify.status == 0)
        for text in ["--require-factor", "--acr", "--max-sign-in-age", "--provider", "--account-claim", "--account-prefix", "bare sub", "factor_required"] {
            #expect(verify.out.contains(text), "verify --help lacks \(text)")
        }
        let issue = try scratch.tool(["ca", "issue", "--help"])
        #expect(issue.status == 0)
        for text in ["--require-factor", "--account-prefix", "ca.json"] {
            #expect(issue.out.contains(text), "ca issue --help lacks \(text)")
        }
    }
}
