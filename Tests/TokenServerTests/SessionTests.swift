import Foundation
import NIOHTTP1
import PeerCA
import TestSupport
import Synchronization
import Testing
import TokenKit
@testable import TokenServer

/// Logout and revocation by account over real HTTP: the account's certificates are revoked (CRL),
/// its tokens issued before the end are refused, an administrator can do the same by serial or
/// account with the configured bearer secret, and bad input changes nothing.
@Suite("Sessions: logout and revocation by account")
struct SessionTests {
    static func csr() throws -> String { try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate()) }

    @Test func logoutRevokesTheAccountAndRefusesItsOlderTokens() async throws {
        try await LiveServer.with { server in
            let token = try server.token()
            var serials: [String] = []
            for _ in 0..<2 {
                let (status, reply) = try await server.json("/v1/certificates", ["provider": .string("dev"), "token": .string(token), "csr": .string(try Self.csr())])
                #expect(status == 200)
                serials.append(try #require(reply["serial"]?.stringValue))
            }
            // Someone else's certificate stays valid.
            let other = try server.token(["sub": .string("someone-else")])
            let (_, otherReply) = try await server.json("/v1/certificates", ["provider": .string("dev"), "token": .string(other), "csr": .string(try Self.csr())])
            let otherSerial = try #require(otherReply["serial"]?.stringValue)

            let (status, logout) = try await server.json("/v1/logout", ["provider": .string("dev"), "token": .string(token)])
            #expect(status == 200, "\(logout)")
            #expect(logout["account"]?.stringValue == "dev:user-7")
            #expect(Set(logout["revoked"]?.arrayValue?.compactMap(\.stringValue) ?? []) == Set(serials))

            // The token (and any of the account's tokens issued before the logout) is refused now.
            let (_, refused) = try await server.json("/v1/auth", ["provider": .string("dev"), "token": .string(token)])
            #expect(refused["authenticate"] == .bool(false))
            #expect(refused["error"].errorCode == "session_ended")
            let (issueStatus, issueRefused) = try await server.json("/v1/certificates", ["provider": .string("dev"), "token": .string(token), "csr": .string(try Self.csr())])
            #expect(issueStatus == 401)
            #expect(issueRefused["error"].errorCode == "session_ended")
            // Other accounts are untouched; a token issued after the logout works.
            #expect(try await server.json("/v1/auth", ["provider": .string("dev"), "token": .string(other)]).json["authenticate"] == .bool(true))
            let fresh = try server.token(["iat": .integer(Int(Date().timeIntervalSince1970) + 2)])
            #expect(try await server.json("/v1/auth", ["provider": .string("dev"), "token": .string(fresh)]).json["authenticate"] == .bool(true))

            // The CRL lists exactly the account's certificates.
            let crl = try await server.request(.GET, "/v1/crl")
            let list = try RevocationList(crl.body, issuer: server.service.ca.authority.issuer)
            #expect(Set(list.revoked.keys) == Set(serials))
            #expect(list.revoked[otherSerial] == nil)
        }
    }

    @Test func adminRevocationNeedsTheCredentialAndValidInput() async throws {
        let dir = try temporaryDirectory()
        let secretFile = dir.appendingPathComponent("admin.token").path
        let secret = "admin-" + UUID().uuidString
        _ = try SecureFile.writeNew(secretFile, Array((secret + "\n").utf8), mode: 0o600)
        try await LiveServer.with(configure: { $0.admin = ServerConfiguration.Admin(tokenFile: secretFile) }) { server in
            let token = try server.token(["sub": .string("carol")])
            let (_, issued) = try await server.json("/v1/certificates", ["provider": .string("dev"), "token": .string(token), "csr": .string(try Self.csr())])
            let serial = try #require(issued["serial"]?.stringValue)
            let (_, issued2) = try await server.json("/v1/certificates", ["provider": .string("dev"), "token": .string(token), "csr": .string(try Self.csr())])
            let serial2 = try #require(issued2["serial"]?.stringValue)
            let admin = ["authorization": "Bearer \(secret)"]

            // Without or with a wrong credential: 401, nothing changes.
            for headers in [[:], ["authorization": "Bearer wrong"], ["authorization": "Bearer \(secret)x"], ["authorization": "Basic \(secret)"]] {
                let (status, reply) = try await server.json("/v1/admin/revoke", ["serial": .string(serial)], headers: headers)
                #expect(status == 401)
                #expect(reply["error"].errorCode == "unauthorized")
            }
            // Bad input: 400 or 404, nothing changes.
            for body: [String: JSONValue] in [
                [:], ["serial": .string(serial), "account": .string("dev:carol")], ["serial": .integer(5)], ["serial": .string("zz")],
                ["account": .string("")], ["serial": .string(serial), "reason": .string("because")], ["serial": .string(serial), "extra": .bool(true)],
            ] {
                let (status, reply) = try await server.json("/v1/admin/revoke", body, headers: admin)
                #expect(status == 400, "\(body): \(reply)")
                #expect(reply["error"].errorCode == "invalid_request")
            }
            let (unknownStatus, unknown) = try await server.json("/v1/admin/revoke", ["serial": .string("abcdef")], headers: admin)
            #expect(unknownStatus == 404)
            #expect(unknown["error"].errorCode == "not_found")
            #expect(try await server.service.ca.ledger.revoked(notExpiredAt: Date()).isEmpty)
            #expect(try await server.json("/v1/auth", ["provider": .string("dev"), "token": .string(token)]).json["authenticate"] == .bool(true))

            // By serial, then by account.
            let (bySerial, bySerialReply) = try await server.json("/v1/admin/revoke", ["serial": .string(serial), "reason": .string("keyCompromise")], headers: admin)
            #expect(bySerial == 200, "\(bySerialReply)")
            #expect(try await server.service.ca.ledger.entry(serial: serial)?.status != .valid)
            #expect(try await server.service.ca.ledger.entry(serial: serial2)?.status == .valid)
            // Again, with another reason: the answer says the reason the ledger (and the CRL) kept.
            let (again, againReply) = try await server.json("/v1/admin/revoke", ["serial": .string(serial), "reason": .string("superseded")], headers: admin)
            #expect(again == 200 && againReply["reason"]?.stringValue == "keyCompromise", "\(againReply)")
            #expect(againReply["revokedAt"]?.stringValue != nil)
            let (byAccount, byAccountReply) = try await server.json("/v1/admin/revoke", ["account": .string("dev:carol")], headers: admin)
            #expect(byAccount == 200, "\(byAccountReply)")
            #expect(byAccountReply["revoked"]?.arrayValue?.compactMap(\.stringValue) == [serial2])
            #expect(try await server.json("/v1/auth", ["provider": .string("dev"), "token": .string(token)]).json["error"].errorCode == "session_ended")
        }
    }

    @Test func withoutAnAdminCredentialTheEndpointIsOff() async throws {
        try await LiveServer.with { server in
            let (status, reply) = try await server.json("/v1/admin/revoke", ["serial": .string("ab")], headers: ["authorization": "Bearer anything"])
            #expect(status == 404)
            #expect(reply["error"].errorCode == "admin_disabled")
        }
    }

    @Test func anAdminSecretOthersCanReadIsRefused() throws {
        let dir = try temporaryDirectory()
        let path = dir.appendingPathComponent("admin.token").path
        _ = try SecureFile.writeNew(path, Array("a-long-enough-admin-secret".utf8), mode: 0o644)
        let error = #expect(throws: ConfigurationError.self) { _ = try AdminCredential.read(path) }
        #expect(error?.key == "admin.tokenFile")
        let short = dir.appendingPathComponent("short.token").path
        _ = try SecureFile.writeNew(short, Array("short".utf8), mode: 0o600)
        #expect(throws: ConfigurationError.self) { _ = try AdminCredential.read(short) }
        // A secret file larger than anything a secret is (17 MiB, sparse) is refused from its size.
        let huge = dir.appendingPathComponent("huge.token").path
        _ = try SecureFile.writeNew(huge, Array("x".utf8), mode: 0o600)
        #expect(truncate(huge, 17 << 20) == 0)
        let tooLarge = #expect(throws: ConfigurationError.self) { _ = try AdminCredential.read(huge) }
        #expect(tooLarge?.key == "admin.tokenFile")
        #expect(tooLarge?.message.contains("holds more than 16 MiB") == true, "\(String(describing: tooLarge))")
        #expect(AdminCredential.matches("Bearer 0123456789abcdef", Array("0123456789abcdef".utf8)))
        #expect(AdminCredential.matches("bearer   0123456789abcdef", Array("0123456789abcdef".utf8)))
        #expect(!AdminCredential.matches("Bearer 0123456789abcdeF", Array("0123456789abcdef".utf8)))
        #expect(!AdminCredential.matches("0123456789abcdef", Array("0123456789abcdef".utf8)))
    }
}

extension SessionTests {
    /// A logout that arrives while an issuance for the same account is at the ledger — after the
    /// issuance's session check, before its certificate is recorded: the logout's revocation finds
    /// nothing to revoke, so the issuance checks again once recorded, revokes its certificate and
    /// answers session_ended (it answered 200 with a certificate the logout had missed).
    @Test func aLogoutWhileAnIssuanceIsAtTheLedgerRevokesItsCertificate() async throws {
        try await LiveServer.with { server in
            let base = server.service
            let ledger = BeforeEachRecord(ledger: base.ca.ledger)
            let service = TokenService(
                configuration: base.configuration, ca: PeerCertificateAuthority(authority: base.ca.authority, policy: base.ca.policy, ledger: ledger),
                providers: base.providers, logger: base.logger, appID: base.appID, store: base.store, sessions: base.sessions, adminToken: nil)
            let token = try server.token(["sub": .string("racer"), "iat": .integer(Int(Date().timeIntervalSince1970) - 5)])
            ledger.hook.withLock { $0 = { _ = await service.endSessions(of: "dev:racer", reason: .cessationOfOperation, by: "logout") } }
            let csr = try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate())
            let body = JSONValue.object(["provider": .string("dev"), "token": .string(token), "csr": .string(csr)]).compactBytes
            let answer = await service.issueCertificate(body)
            #expect(answer.status == 401, "\(String(decoding: answer.body, as: UTF8.self))")
            #expect(try JSONValue.parse(answer.body).objectValue?["error"].errorCode == "session_ended")
            let recorded = try await base.ca.ledger.entries(subject: "dev:racer")
            #expect(recorded.count == 1)
            #expect(recorded.allSatisfy { if case .revoked = $0.status { true } else { false } }, "the certificate the logout missed is revoked")
        }
    }
}

/// A real ledger that runs `hook` once, at the first record, before recording: something that
/// happens while a request is at the ledger.
final class BeforeEachRecord: ForwardingLedger, @unchecked Sendable {
    let hook = Mutex<(@Sendable () async -> Void)?>(nil)
    override func record(_ entry: LedgerEntry, claiming use: TokenUse?) async throws(PeerCAError) {
        if let hook = hook.withLock({ hook in defer { hook = nil }; return hook }) { await hook() }
        try await ledger.record(entry, claiming: use)
    }
}

extension JSONValue {
    var arrayValue: [JSONValue]? { if case .array(let items) = self { items } else { nil } }
}
