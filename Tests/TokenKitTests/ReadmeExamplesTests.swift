import Foundation
import Testing
import PDAKeys
import PeerCA
import TestSupport
import TokenKit

/// Compiles and runs the README's library examples, and checks the README still shows them
/// exactly as they are written here (between the `// README:` markers).
@Suite("README examples")
struct ReadmeExamplesTests {
    let publicKeyPEM: String
    let jwt: String

    init() throws {
        publicKeyPEM = try Fixtures.text("peers/rsa_public.pem")
        jwt = try Fixtures.text("peers/rs256_token.jwt").trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test func verifyAndDecode() throws {
        // README: begin
        let key = try JWTKey(pem: publicKeyPEM)  // an RSA key verifies RS256, and only RS256
        let verifier = try JWTVerifier(
            key: key,
            policy: ClaimsPolicy(maxAge: 30 * 24 * 3600, issuers: ["postman.hubat.net"]))
        let token = try verifier.verify(jwt)
        print(token.claims.subject ?? "-", token.payload["application"]?.stringValue ?? "-")  // a String, not .string("…")
        // README: end
        #expect(token.payload["application"]?.stringValue == "testing")
        // README: begin
        struct HATClaims: Decodable {
            let sub: String
            let application: String
            let exp: Date
        }
        let claims = try verifier.verify(jwt, as: HATClaims.self)
        // README: end
        #expect(claims.application == "testing")
        // README: begin
        let crossCheck = try JWTVerifier(key: key, engine: .libjwt)
        _ = try crossCheck.verify(jwt)
        // README: end
    }

    @Test func signAndVerifyWithJWKS() throws {
        // README: begin
        let signingKey = try JWTKey.generate(.ec(.p256), kid: "2026-11")
        let signer = try JWTSigner(key: signingKey)
        let now = Int(Date().timeIntervalSince1970)
        let issued = try signer.sign(claims: [
            "iss": .string("https://issuer.example/"), "sub": .string("device-42"),
            "aud": .string("my-api"), "iat": .integer(now), "exp": .integer(now + 600),
        ])
        let publicJWKS = try JWKSet(keys: [signingKey.publicKey]).jsonText()
        // README: end
        // README: begin
        let rsaKey = try JWTKey.generate(.rsa(bits: 2048), kid: "rsa-1")
        let rsaToken = try JWTSigner(key: rsaKey).sign(claims: ["sub": .string("device-42"), "exp": .integer(now + 600)])
        let rsaPublicPEM = try rsaKey.publicPEM()   // verifiers: JWTKey(pem: rsaPublicPEM, kid: "rsa-1")
        // README: end
        let rsaVerified = try JWTVerifier(key: JWTKey(pem: rsaPublicPEM, kid: "rsa-1")).verify(rsaToken)
        #expect(rsaVerified.header.algorithm == .rs256 && rsaVerified.claims.subject == "device-42")
        #expect(rsaKey.type == .rsa(bits: 2048))
        let jwksJSON = publicJWKS
        var accessToken = issued
        var outcomes: [String] = []
        for _ in 0..<2 {
            // README: begin
            let keys = try JWKSet(json: jwksJSON)
            let apiVerifier = try JWTVerifier(
                keySet: keys,
                policy: ClaimsPolicy(issuers: ["https://issuer.example/"], audiences: ["my-api"]))
            do {
                _ = try apiVerifier.verify(accessToken)
            } catch {
                switch error.code {
                case .expired: print("ask the client to refresh")
                case .unknownKey: print("no key has that kid: did the issuer rotate its keys?")
                default: print("rejected: \(error)")
                }
            }
            // README: end
            outcomes.append((try? apiVerifier.verify(accessToken)) == nil ? "rejected" : "valid")
            accessToken = try JWTSigner(key: JWTKey.generate(.ec(.p256), kid: "other")).sign(claims: ["exp": .integer(now + 60)])
        }
        #expect(outcomes == ["valid", "rejected"])
    }

    /// The README's HAT examples run as written against a loopback PDA (`alice.hubat.net`,
    /// serving its `/publickey` over HTTPS): a local `HTTPKeyFetcher()` stands in for the type's
    /// default initializer here, with the test CA trusted and the PDA's name sent to 127.0.0.1.
    @Test func remoteKeysExamplesRunAgainstALoopbackPDA() async throws {
        let server = try KeyServer(routes: ["alice.hubat.net/publickey": Route(body: TestKeys.publicPEM(TestKeys.rsa))])
        defer { server.stop() }
        let token = try sign(hatClaims(iss: "alice.hubat.net", now: Date().timeIntervalSince1970), with: TestKeys.rsa)
        var loopback = KeyFetchConfiguration()
        loopback.trustRoots = .pemFile(try TestPKI.shared.get().caFile)
        loopback.pdaPort = server.port
        loopback.hostOverrides = ["alice.hubat.net": "127.0.0.1"]
        let identity = try await Self.hatExamples(token: token, loopback: loopback)
        #expect(identity.pdaHost == "alice.hubat.net")
        #expect(identity.application == "my-app")
        #expect(server.requests.filter { $0.contains("/publickey") }.count == 1, "one key fetch for two verifications: \(server.requests)")
    }

    static func hatExamples(token: String, loopback: KeyFetchConfiguration) async throws -> HATIdentity {
        func HTTPKeyFetcher() throws -> PDAKeys.HTTPKeyFetcher { try PDAKeys.HTTPKeyFetcher(configuration: loopback) }
        // README: begin
        let fetcher = try HTTPKeyFetcher()          // HTTPS only, 64 KiB cap, 5 s connect / 10 s total
        let store = RemoteKeyStore(fetcher: fetcher)  // share one store between all verifiers
        let hat = HATTokenVerifier(store: store, applications: ["my-app"])
        let identity = try await hat.verify(token)    // key from https://<iss>/publickey
        print(identity.pdaHost, identity.subject, identity.application ?? "-", identity.expiresAt)
        // README: end
        // README: begin
        do {
            let caller = try await hat.verify(token)
            print("hello \(caller.subject)")
        } catch {
            switch error {
            case .token(let refused) where refused.code == .expired: print("ask the client to refresh")
            case .token(let refused): print("invalid token (401): \(refused.code)")
            case .keys(let unavailable): print("PDA unreachable (503): \(unavailable.code)")
            }
            print(error.code, error.message)
        }
        // README: end
        await fetcher.shutdown()
        return identity
    }

    /// The README's OpenID Connect example, compiled: running it needs the issuer's own host on
    /// port 443, which a test cannot take (its servers listen on a port the OS picks). The same
    /// calls run against a loopback issuer in PDAKeysTests (`jwksAndDescribedVerifiersThrowTheSameType`,
    /// KeyStoreTests' discovery cases).
    func oidcExample(jwt: String) async throws {
        let fetcher = try HTTPKeyFetcher()
        let store = RemoteKeyStore(fetcher: fetcher)
        // README: begin
        let auth0 = RemoteJWTVerifier(
            source: .oidc(issuer: "https://tenant.eu.auth0.com/"),
            store: store,
            policy: ClaimsPolicy(audiences: ["my-api"]))
        let verified = try await auth0.verify(jwt)
        print(verified.claims.subject ?? "-")
        await fetcher.shutdown()
        // README: end
    }

    @Test func peerCertificates() async throws {
        let dir = try temporaryDirectory()
        let idpKey = try JWTKey.generate(.ec(.p256))
        let now = Int(Date().timeIntervalSince1970)
        let jwt = try JWTSigner(key: idpKey).sign(claims: [
            "iss": .string("https://idp.example/"), "sub": .string("user-42"), "exp": .integer(now + 600),
        ])
        let verifier = try JWTVerifier(key: idpKey.publicKey, policy: ClaimsPolicy(issuers: ["https://idp.example/"]))
        let deviceKey = try CAKeyAlgorithm.p256.generate()
        let csrPEM = try DeviceCSR.make(key: deviceKey)
        let ledgerPath = dir.appendingPathComponent("ledger.sqlite").path
        // README: begin
        let material = try CertificateAuthority.create(name: "Example devices", withIntermediate: true)
        let policy = try IssuancePolicy(appID: "my-app", provider: "idp")   // trust domain "my-app"
        let ca = PeerCertificateAuthority(
            authority: material.authority, policy: policy, ledger: try SQLiteLedger(path: ledgerPath))
        let token = try verifier.verify(jwt)                                  // any TokenKit or PDAKeys verifier
        let issued = try await ca.issue(token: token, csr: Array(csrPEM.utf8))
        print(issued.identity.spiffeID, issued.serial, issued.notAfter)       // spiffe://my-app/idp.example/user-42
        let pemChain = issued.chainPEM                                        // leaf + intermediate, for the device
        let reply = issued.replyJSON()   // the JSON `POST /v1/certificates` answers: chain, identity, serial, notAfter, renewAfter, spiffeID
        // README: end
        // README: begin
        let peers = PeerVerifier(roots: [material.authority.root], trustDomain: "my-app")
        let peer = try await peers.verify(chain: issued.chain, role: .client)
        print(peer.spiffeID, peer.commonName ?? "-")
        _ = try await ca.revoke(serial: issued.serial, reason: .keyCompromise)
        let crlDER = try await ca.crl()                                        // signed RFC 5280 CRL
        // README: end
        #expect(!pemChain.isEmpty)
        #expect(try JSONValue.parse(reply).objectValue?["serial"] == .string(issued.serial))
        let list = try RevocationList(crlDER, issuer: material.authority.issuer)
        #expect(list.revoked[issued.serial] != nil)
    }

    /// Every ```swift block of the README that is library code appears here verbatim.
    @Test func readmeShowsTheseExamples() throws {
        let readme = try String(contentsOf: Fixtures.root.appendingPathComponent("README.md"), encoding: .utf8)
        let source = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        func normalise(_ lines: [Substring]) -> [String] {
            lines.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty && !$0.hasPrefix("import ") }
        }
        var examples: [[String]] = []
        var current: [Substring]? = nil
        for line in source.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed == "// README: begin" { current = [] } else if trimmed == "// README: end" {
                if let block = current { examples.append(normalise(block)) }
                current = nil
            } else if current != nil { current?.append(line) }
        }
        var blocks: [[String]] = []
        current = nil
        for line in readme.split(separator: "\n", omittingEmptySubsequences: false) {
            if line == "```swift" { current = [] } else if line == "```", let block = current {
                blocks.append(normalise(block))
                current = nil
            } else if current != nil { current?.append(line) }
        }
        let libraryBlocks = blocks.filter { !($0.first ?? "").hasPrefix(".package") }
        #expect(libraryBlocks.count == examples.count)
        for block in libraryBlocks {
            #expect(examples.contains(block), "README block not compiled by this test:\n\(block.joined(separator: "\n"))")
        }
    }
}
