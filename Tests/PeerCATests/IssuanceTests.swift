import Crypto
import Foundation
@testable import PeerCA
import SwiftASN1
import TestSupport
import Testing
import TokenKit
import X509

@Suite("PeerCA issuance, interoperating with the openssl binary")
struct IssuanceTests {
    @Test(arguments: ["p256", "p384", "rsa2048", "ed25519"])
    func opensslCSRsAreIssuedAndVerifyInOpenSSL(keyType: String) async throws {
        let openssl = try OpenSSL()
        let now = Date().timeIntervalSince1970.rounded(.down)
        let test = try TestCA(clock: .fixed(now))
        let csr = try openssl.csr(keyType, name: "device")
        let token = try Tokens.verified(Tokens.claims(sub: "user-42", now: now, extra: ["name": .string("Ada")]), now: now)
        let issued = try await test.ca.issue(token: token, csr: csr)

        // The identity comes from the token; every name the CSR asked for is ignored.
        let leaf = try issued.certificate
        #expect(issued.identity.spiffeID == "spiffe://app-1234.peers.example/idp.example/user-42")
        let names = try #require(try leaf.extensions.subjectAlternativeNames)
        #expect(Array(names) == [.uniformResourceIdentifier("spiffe://app-1234.peers.example/idp.example/user-42")])
        #expect(leaf.subject.description.contains("CN=user-42"))
        #expect(!leaf.subject.description.contains("Evil"))
        #expect(try leaf.extensions.basicConstraints == .notCertificateAuthority)
        #expect(try leaf.extensions.keyUsage == KeyUsage(digitalSignature: true))
        #expect(try leaf.extensions.extendedKeyUsage == ExtendedKeyUsage([.serverAuth, .clientAuth]))
        // The SKI and the ledger's fingerprint, computed once from the CSR's key, are what the key itself gives.
        #expect(try leaf.extensions.subjectKeyIdentifier == SubjectKeyIdentifier(hash: leaf.publicKey))
        let validated = try ValidatedCSR(csr)
        #expect(validated.keyFingerprint == leaf.publicKey.sha256Fingerprint)
        #expect(try await test.ca.ledger.entry(serial: issued.serial)?.keyFingerprint == leaf.publicKey.sha256Fingerprint)
        // The chain's PEM (written from the recorded DER) is what swift-certificates writes.
        #expect(try issued.chainPEM == issued.chain.map(\.pemString).joined())
        for certificate in try issued.chain { #expect(certificate.pemString == (try certificate.serializeAsPEM().pemString) + "\n") }
        #expect(try issued.chain.count == test.material.authority.intermediates.count + 1)
        #expect(try leaf.extensions.authorityKeyIdentifier?.keyIdentifier == test.material.authority.issuer.extensions.subjectKeyIdentifier?.keyIdentifier)
        #expect(leaf.serialNumber.bytes.count == 16)
        // notBefore back-dated 5 minutes; notAfter capped by the token's exp (1 h) under the 24 h maximum.
        #expect(leaf.notValidBefore.timeIntervalSince1970 == now - 300)
        #expect(leaf.notValidAfter.timeIntervalSince1970 == now + 3600)

        // openssl accepts the chain, for client and server use.
        try openssl.write("root.pem", test.root.pemString)
        try openssl.write("chain.pem", issued.chainPEM)
        try openssl.write("leaf.pem", leaf.pemString)
        try openssl.write("intermediate.pem", test.material.authority.issuer.pemString)
        for purpose in ["sslclient", "sslserver"] {
            let verify = try openssl.run(["verify", "-purpose", purpose, "-CAfile", "root.pem", "-untrusted", "intermediate.pem", "leaf.pem"])
            #expect(verify.status == 0, "\(verify.output)")
            #expect(verify.output.contains("leaf.pem: OK"))
        }
        let text = try openssl.must(["x509", "-in", "leaf.pem", "-noout", "-text"])
        #expect(text.contains("CA:FALSE"))
        #expect(text.contains("TLS Web Server Authentication, TLS Web Client Authentication"))
        #expect(!text.contains("evil.example"))

        // Recorded before it was returned.
        let entry = try #require(try await test.ca.ledger.entry(serial: issued.serial))
        #expect(entry.der == leaf.derBytes)
        #expect(entry.subject == issued.identity.spiffeID)
        #expect(entry.commonName == "user-42")
        #expect(entry.tokenIssuer == "https://idp.example/")
        #expect(entry.tokenID == token.claims.id)
        #expect(entry.keyFingerprint == leaf.publicKey.sha256Fingerprint)
        #expect(entry.status == .valid)
        #expect(try await test.ca.ledger.entries(subject: issued.identity.spiffeID).map(\.serial) == [issued.serial])
        #expect(try await test.ca.ledger.entries(subject: "user-42").map(\.serial) == [issued.serial])
    }

    @Test(arguments: [CAKeyAlgorithm.p384, .ed25519, .rsa3072])
    func caKeyTypes(algorithm: CAKeyAlgorithm) async throws {
        let openssl = try OpenSSL()
        let test = try TestCA(algorithm: algorithm, intermediate: false)
        let issued = try await test.ca.issue(token: try Tokens.verified(Tokens.claims()), csr: try openssl.csr("p256", name: "d"))
        #expect(try issued.chain.count == 1)
        try openssl.write("root.pem", test.root.pemString)
        try openssl.write("leaf.pem", issued.certificate.pemString)
        let verify = try openssl.run(["verify", "-CAfile", "root.pem", "leaf.pem"])
        #expect(verify.status == 0, "\(algorithm): \(verify.output)")
    }

    @Test func validityIsTheEarliestOfPolicyTokenAndRequest() async throws {
        let openssl = try OpenSSL()
        let csr = try openssl.csr("p256", name: "d")
        let now = Date().timeIntervalSince1970.rounded(.down)
        let test = try TestCA(clock: .fixed(now)) { $0.maximumValidity = 600 }
        func token(_ lifetime: Double) throws -> VerifiedToken { try Tokens.verified(Tokens.claims(lifetime: lifetime, now: now), now: now) }
        let long = try await test.ca.issue(token: try token(7 * 86_400), csr: csr)
        #expect(long.notAfter.timeIntervalSince1970 == now + 600)
        let requested = try await test.ca.issue(token: try token(3600), csr: csr, validity: 60)
        #expect(requested.notAfter.timeIntervalSince1970 == now + 60)
        let short = try await test.ca.issue(token: try token(120), csr: csr)
        #expect(short.notAfter.timeIntervalSince1970 == now + 120)
        #expect(short.notBefore.timeIntervalSince1970 == now - 300)
        await #expect(throws: PeerCAError.self) { _ = try await test.ca.issue(token: try Tokens.verified(Tokens.claims()), csr: csr, validity: -1) }
        // Serials are unique.
        #expect(Set([long.serial, requested.serial, short.serial]).count == 3)
    }

    @Test func tokenReusePolicyIsPerIssuer() async throws {
        let openssl = try OpenSSL()
        let csr = try openssl.csr("p256", name: "d")
        let test = try TestCA { $0.tokenReuse = ["https://once.example/": .oncePerTokenID] }
        let once = try Tokens.verified(Tokens.claims(iss: "https://once.example/", jti: "t-1"))
        let first = try await test.ca.issue(token: once, csr: csr)
        #expect(!first.isRepeat)
        // The same token for another key: refused.
        let again = await #expect(throws: PeerCAError.self) { _ = try await test.ca.issue(token: once, csr: try openssl.csr("p256", name: "other")) }
        #expect(again?.code == .tokenReused)
        // The same token and key again (a retry whose first answer was lost): the same certificate.
        let retry = try await test.ca.issue(token: once, csr: csr)
        #expect(retry.isRepeat && retry.serial == first.serial && retry.derBytes == first.derBytes && retry.chainPEM == first.chainPEM)
        // The refused attempt and the retry left nothing behind.
        #expect(try await test.ca.ledger.recent(limit: 10).count == 1)
        let noJTI = await #expect(throws: PeerCAError.self) {
            _ = try await test.ca.issue(token: try Tokens.verified(Tokens.claims(iss: "https://once.example/", jti: nil)), csr: csr)
        }
        #expect(noJTI?.code == .policyViolation)
        // Another issuer, unlimited by default: the same jti twice is fine.
        let many = try Tokens.verified(Tokens.claims(iss: "https://many.example/", jti: "t-1"))
        _ = try await test.ca.issue(token: many, csr: csr)
        _ = try await test.ca.issue(token: many, csr: csr)
        #expect(try await test.ca.ledger.recent(limit: 10).count == 3)
    }

    @Test func identityPolicy() async throws {
        let openssl = try OpenSSL()
        let csr = try openssl.csr("p256", name: "d")
        let now = Date().timeIntervalSince1970
        let test = try TestCA {
            $0.requiredFactors = 2
            $0.maximumSignInAge = 600
            $0.permissionsClaim = "scope"
        }
        let good = try Tokens.verified(Tokens.claims(extra: [
            "amr": .array([.string("pwd"), .string("otp")]), "auth_time": .integer(Int(now) - 60), "scope": .string("read write"),
        ]))
        let issued = try await test.ca.issue(token: good, csr: csr)
        #expect(issued.identity.factors.map(\.method) == ["pwd", "otp"])
        #expect(issued.identity.permissions == ["read", "write"])
        #expect(issued.identity.latestSignIn.map { Int($0.timeIntervalSince1970) } == Int(now) - 60)
        let oneFactor = try Tokens.verified(Tokens.claims(extra: ["amr": .array([.string("pwd")]), "auth_time": .integer(Int(now) - 60)]))
        let error1 = await #expect(throws: PeerCAError.self) { _ = try await test.ca.issue(token: oneFactor, csr: csr) }
        #expect(error1?.code == .policyViolation)
        let stale = try Tokens.verified(Tokens.claims(extra: ["amr": .array([.string("pwd"), .string("otp")]), "auth_time": .integer(Int(now) - 3600)]))
        let error2 = await #expect(throws: PeerCAError.self) { _ = try await test.ca.issue(token: stale, csr: csr) }
        #expect(error2?.code == .policyViolation)
        #expect(try await test.ca.ledger.recent(limit: 10).count == 1)
    }

    /// An `auth_time` that is not a NumericDate in range says nothing about the sign-in: under an
    /// age limit it is refused with a typed error that says so (far in the past it trapped when
    /// the refusal printed the sign-in's age; far in the future it passed any limit; a string was
    /// replaced by `iat`, so a stale sign-in passed), and without one it is ignored — the
    /// identity has no sign-in time, and the session starts at `iat` (ADFS and others have sent
    /// ISO 8601 text there). `null` is no `auth_time`: `iat` stands in. A limit no `Int` holds,
    /// set in code, is printed as it is.
    @Test func anAuthTimeOutOfRangeOrNotANumberSaysNothing() async throws {
        let openssl = try OpenSSL()
        let csr = try openssl.csr("p256", name: "d")
        let now = Date().timeIntervalSince1970
        let unreadable = [JSONValue.number("-1e300"), .number("1e300"), .number("-1"), .number("253402300800"), .string("2026-11-27T10:00:00Z")]
        let limited = try TestCA { $0.maximumSignInAge = 600; $0.factorPolicy.maximumSignInAge = 600 }
        for bad in unreadable {
            let token = try Tokens.verified(Tokens.claims(extra: ["auth_time": bad]))
            let error = await #expect(throws: PeerCAError.self, "\(bad)") { _ = try await limited.ca.issue(token: token, csr: csr) }
            #expect(error?.code == .policyViolation)
            #expect(error?.message.contains("\"auth_time\" is not a NumericDate") == true, "\(String(describing: error))")
        }
        let unlimited = try TestCA()
        for bad in unreadable {
            let token = try Tokens.verified(Tokens.claims(extra: ["auth_time": bad]))
            let issued = try await unlimited.ca.issue(token: token, csr: csr)
            #expect(issued.identity.latestSignIn == nil, "\(bad)")
            #expect(try await unlimited.ca.ledger.entry(serial: issued.serial)?.sessionStart == token.claims.issuedAtDate, "\(bad)")
        }
        let fine = try Tokens.verified(Tokens.claims(extra: ["auth_time": .number("\(Int(now) - 5).5")]))
        #expect(try await limited.ca.issue(token: fine, csr: csr).identity.latestSignIn?.timeIntervalSince1970 == Double(Int(now) - 5) + 0.5)
        let null = try Tokens.verified(Tokens.claims(extra: ["auth_time": .null]))
        #expect(try await limited.ca.issue(token: null, csr: csr).identity.latestSignIn == null.claims.issuedAtDate)
        var odd = try IssuancePolicy(appID: "app-1234", trustDomainSuffix: "peers.example", provider: "idp")
        odd.factorPolicy.maximumSignInAge = .nan
        let old = try Tokens.verified(Tokens.claims(extra: ["auth_time": .integer(Int(now) - 60)]))
        let refused = #expect(throws: PeerCAError.self) { _ = try odd.identity(for: old, now: Date()) }
        #expect(refused?.code == .signInTooOld)
        #expect(refused?.message.hasSuffix("at most nan s is accepted") == true, "\(String(describing: refused))")
    }

    /// A sign-in in the future is refused (an `auth_time` of 9999-12-31 passed every age limit,
    /// and the session counted from it for renewal never ended); an `amr` that is not an array is
    /// refused (a string was read as no `amr`); an account with a control or bidi formatting
    /// character is refused (a newline forged log lines, a NUL went into the CN).
    @Test func aFutureSignInAStringAmrAndAnUnprintableAccountAreRefused() async throws {
        let openssl = try OpenSSL()
        let csr = try openssl.csr("p256", name: "d")
        let test = try TestCA()
        let now = Int(Date().timeIntervalSince1970)
        for (claims, fragment) in [
            (Tokens.claims(extra: ["auth_time": .integer(253_402_300_799)]), "\"auth_time\" (9999-12-31T23:59:59Z) is more than 300 s in the future"),
            (Tokens.claims(extra: ["auth_time": .integer(now + 400)]), "more than 300 s in the future"),
            (Tokens.claims(extra: ["amr": .string("mfa")]), "\"amr\" must be an array of strings"),
            (Tokens.claims(sub: "m\n2026-11-27T22:30:00+0000 critical tokentool.serve: forged"), "control or bidirectional formatting character (U+A)"),
            (Tokens.claims(sub: "a\u{0}b"), "(U+0)"),
            (Tokens.claims(sub: "evil\u{202E}gnp.exe"), "(U+202E)"),
            (Tokens.claims(sub: "x\u{85}y"), "(U+85)"),
        ] {
            let token = try Tokens.verified(claims)
            let error = await #expect(throws: PeerCAError.self, "\(fragment)") { _ = try await test.ca.issue(token: token, csr: csr) }
            #expect(error?.code == .policyViolation)
            #expect(error?.message.contains(fragment) == true, "\(String(describing: error))")
        }
        #expect(try await test.ca.ledger.recent(limit: 10).isEmpty)
        // A sign-in a little ahead of this clock (the provider's a few seconds fast) is accepted, and so are other scripts.
        _ = try await test.ca.issue(token: try Tokens.verified(Tokens.claims(extra: ["auth_time": .integer(now + 200)])), csr: csr)
        _ = try await test.ca.issue(token: try Tokens.verified(Tokens.claims(sub: "Zoë-Łukasz-東京")), csr: csr)
    }

    /// A renewal's maximum session age must be a positive number of seconds: NaN made the end
    /// of the session NaN (and its refusal trapped printing it), infinity no end at all.
    @Test func aRenewalNeedsAPositiveSessionAge() async throws {
        let openssl = try OpenSSL()
        let csr = try ValidatedCSR(try openssl.csr("p256", name: "d"))
        let test = try TestCA()
        let issued = try await test.ca.issue(token: try Tokens.verified(Tokens.claims()), csr: csr)
        let current = try #require(try await test.ca.ledger.entry(serial: issued.serial))
        for age in [TimeInterval.nan, .infinity, 0, -60] {
            let error = await #expect(throws: PeerCAError.self, "\(age)") { _ = try await test.ca.renew(current, csr: csr, maximumSessionAge: age) }
            #expect(error?.code == .invalidSettings)
        }
        #expect(try await test.ca.renew(current, csr: csr, maximumSessionAge: 3600).identity.accountUID == issued.identity.accountUID)
    }

    /// The reply that hands a certificate over, written straight to bytes, is the text of the same
    /// members as a JSONValue (sorted, compact), for an identity with every optional member and
    /// for one with none; its identity is `PeerIdentity.jsonValue`.
    @Test func theCertificateReplyIsItsJSONValuesText() async throws {
        let openssl = try OpenSSL()
        let csr = try openssl.csr("p256", name: "d")
        let now = Date().timeIntervalSince1970
        let test = try TestCA { $0.permissionsClaim = "scope" }
        let full = try Tokens.verified(Tokens.claims(extra: [
            "amr": .array([.string("pwd"), .string("otp")]), "auth_time": .integer(Int(now) - 60), "scope": .string("read write"),
            "acr": .string("urn:mace:incommon:iap:silver"), "name": .string("Ada \"Quote\" Lovelace\n"), "email": .string("ada@example.com"),
        ]))
        let bare = try Tokens.verified(Tokens.claims(sub: "bare", jti: nil))
        var names: [Set<String>] = []
        for token in [full, bare] {
            let issued = try await test.ca.issue(token: token, csr: csr)
            names.append(Set(issued.identity.jsonValue.objectValue?.keys.map { $0 } ?? []))
            let at = Date(timeIntervalSince1970: now)
            for renewalOf in [nil, "0badc0de"] as [String?] {
                let bytes = issued.replyJSON(renewalOf: renewalOf, now: at)
                var members: [String: JSONValue] = [
                    "certificate": .string(issued.chainPEM), "serial": .string(issued.serial),
                    "notAfter": .string(ISO8601Text.string(issued.notAfter)), "renewAfter": .string(ISO8601Text.string(issued.renewAfter(now: at))),
                    "spiffeID": .string(issued.identity.spiffeID), "identity": issued.identity.jsonValue,
                ]
                if let renewalOf { members["renewalOf"] = .string(renewalOf) }
                #expect(bytes == JSONValue.object(members).compactBytes)
                #expect(try JSONValue.parse(bytes) == .object(members))
            }
            var identity = JSONObjectWriter()
            issued.identity.writeJSON(into: &identity)
            #expect(identity.finished() == issued.identity.jsonValue.compactBytes)
        }
        // Every optional member present in the first, none in the second.
        #expect(names.first == ["account", "acr", "expiresAt", "factors", "issuedAt", "issuer", "name", "permissions", "profile", "provider", "providerUID", "spiffeID"])
        #expect(names.last == ["account", "expiresAt", "factors", "issuedAt", "issuer", "profile", "provider", "providerUID", "spiffeID"])
    }

    /// The identity written straight to bytes is `jsonValue`'s text for identities no token makes:
    /// no factors, a factor without a time, profile names and values that need escaping or sort
    /// outside ASCII, an empty profile, and dates outside 1600…9999 (the format style's text).
    @Test func anIdentityWrittenAsBytesIsItsJSONValuesText() {
        let odd = [
            "é": "x", "E": "quote \" and \\ and \n", "😀": "", "": "empty name", "a\u{0}b": "\u{1F}", "f\u{301}": "combining",
        ]
        for (factors, profile, permissions) in [
            ([AuthenticationFactor](), [String: String](), [String]()),
            ([AuthenticationFactor(method: "pwd", signedInAt: nil), AuthenticationFactor(method: "o\"tp", signedInAt: Date(timeIntervalSince1970: -1e11))], odd, ["r", "w\n"]),
        ] {
            for (expires, issued) in [(Date(timeIntervalSince1970: 1e12), Date?.none), (Date(timeIntervalSince1970: -2e10), Date(timeIntervalSince1970: 1_795_567_547.75))] {
                let identity = PeerIdentity(
                    trustDomain: "app", accountUID: "dev:ü\"1", provider: "dev", issuer: "https://idp.example/", providerUID: "u/1", displayName: "Ada\t",
                    expiresAt: expires, factors: factors, permissions: permissions, tokenID: nil, profile: profile, authenticationContext: "acr\u{7F}",
                    issuedAt: issued)
                var writer = JSONObjectWriter()
                identity.writeJSON(into: &writer)
                #expect(writer.finished() == identity.jsonValue.compactBytes, "\(profile.count) \(expires)")
            }
        }
    }

    /// A SPIFFE ID is parsed only when its path keeps the SPIFFE rules: no `.`/`..` or empty
    /// segment, no `%`-escape, query or other character outside letters, digits, `.`, `-`, `_`
    /// (a relying party that normalises or compares prefixes could read two names into one); the
    /// IDs the CA makes always parse.
    @Test func spiffeIDsParseOnlyWhenTheirPathKeepsTheRules() throws {
        #expect(SPIFFE.parse("spiffe://my-app/idp.example/user-1")! == ("my-app", "idp.example/user-1"))
        #expect(SPIFFE.parse("spiffe://my-app")! == ("my-app", ""))
        for bad in [
            "spiffe://my-app/", "spiffe://my-app//x", "spiffe://my-app/idp.example/../admin/x", "spiffe://my-app/./x",
            "spiffe://my-app/idp.example%2Fvictim", "spiffe://my-app/victim?x=1", "spiffe://my-app/victim#f", "spiffe://my-app/a/b/",
            "spiffe://my-app/ü", "spiffe://MY-APP/x",
        ] {
            #expect(SPIFFE.parse(bad) == nil, "\(bad)")
        }
        let made = SPIFFE.id(trustDomain: "my-app", issuer: "https://idp.example/", subject: "../we ird/ü")
        #expect(SPIFFE.parse(made)?.path.hasPrefix("idp.example/_x") == true, "\(made)")
    }

    @Test func spiffeSegmentsNeverCollide() throws {
        #expect(SPIFFE.segment("user-42") == "user-42")
        #expect(SPIFFE.segment("a/b") == "_x612f62")
        #expect(SPIFFE.segment("_x612f62") != "_x612f62")
        #expect(SPIFFE.segment("..") == "_x2e2e")
        #expect(SPIFFE.segment("") == "_x")
        #expect(SPIFFE.segment("ünï") != SPIFFE.segment("uni"))
        #expect(throws: PeerCAError.self) { _ = try IssuancePolicy(appID: "App ID!", provider: "x") }
        let policy = try IssuancePolicy(appID: "2F4E-AB", provider: "x")
        #expect(policy.trustDomain == "2f4e-ab")
    }

    /// Serials: 16 bytes, positive, a 48-bit millisecond clock after the first byte (so they grow
    /// with time and the ledger appends to its serial index), then 72 random bits.
    @Test func serialsGrowWithTimeAndCarryRandomBits() throws {
        let t = Date(timeIntervalSince1970: 1_790_000_000.123)
        let a = SerialNumbers.random(now: t), b = SerialNumbers.random(now: t)
        let later = SerialNumbers.random(now: t.addingTimeInterval(0.001))
        for serial in [a, b, later] {
            #expect(serial.bytes.count == 16)
            #expect(serial.bytes.first == 0x40)
        }
        let milliseconds = a.bytes.dropFirst().prefix(6).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        #expect(milliseconds == 1_790_000_000_123)
        // Same millisecond: the random part still differs.
        #expect(a != b)
        #expect(Array(a.bytes.prefix(7)) == Array(b.bytes.prefix(7)))
        // Hex order is issue order across milliseconds.
        #expect(SerialNumbers.hex(later) > SerialNumbers.hex(a) && SerialNumbers.hex(later) > SerialNumbers.hex(b))
        // 1000 draws in one millisecond: no repeat, and every random byte position takes many values.
        let draws = (0..<1000).map { _ in Array(SerialNumbers.random(now: t).bytes) }
        #expect(Set(draws).count == 1000)
        for position in 7..<16 { #expect(Set(draws.map { $0[position] }).count > 100, "byte \(position)") }
    }

    /// Hex: two lower-case digits per byte, the same text `String(format: "%02x")` gives.
    @Test func hexMatchesFormat() {
        let all = (0...255).map { UInt8($0) }
        #expect(Hex.encode(all) == all.map { String(format: "%02x", $0) }.joined())
        #expect(Hex.encode([UInt8]()) == "")
        // Not contiguous (a lazily mapped range), raw bytes, and a digest's bytes (the fingerprint's path).
        #expect(Hex.encode((0...255).lazy.map { UInt8($0) }) == Hex.encode(all))
        #expect(all.withUnsafeBytes { Hex.encode($0) } == Hex.encode(all))
        #expect(Hex.encode(all[250...]) == "fafbfcfdfeff")
        let spki = Array("not really a key".utf8)
        #expect(Certificate.PublicKey.sha256Fingerprint(ofSubjectPublicKeyInfo: spki) == SHA256.hash(data: spki).map { String(format: "%02x", $0) }.joined())
        #expect(SPIFFE.segment("a b") == "_x612062")
    }
}
