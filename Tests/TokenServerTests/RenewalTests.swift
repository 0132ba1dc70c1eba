import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
import PeerCA
import TestSupport
import Testing
import TokenKit
@testable import TokenServer

/// Renewal without a new identity-provider token: `tokentool serve` with TLS accepts the device's
/// current certificate as a client certificate (mutual TLS) and issues a new one with the same
/// identity, never past the session limit; revoked, expired and foreign certificates are refused.
@Suite("Renewal over mutual TLS", .serialized)
struct RenewalTests {
    struct Device: Sendable {
        let key: String
        let chain: String
    }

    /// An HTTPS client for the test server, presenting `device` when given.
    static func post(
        _ server: LiveServer, port: String, serverCertificate: String, _ path: String, _ object: [String: JSONValue], device: Device? = nil
    ) async throws -> (status: Int, json: [String: JSONValue]) {
        let (status, _, body) = try await exchange(server, port: port, serverCertificate: serverCertificate, path, object, device: device)
        return (status, (try? JSONValue.parse(body))?.objectValue ?? [:])
    }

    /// ``post(_:port:serverCertificate:_:_:device:)``'s status, content type and body bytes.
    static func exchange(
        _ server: LiveServer, port: String, serverCertificate: String, _ path: String, _ object: [String: JSONValue], device: Device? = nil
    ) async throws -> (status: Int, contentType: String, body: [UInt8]) {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .file(serverCertificate)
        if let device {
            tls.certificateChain = try NIOSSLCertificate.fromPEMFile(device.chain).map { .certificate($0) }
            tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: device.key, format: .pem))
        }
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(tlsConfiguration: tls))
        do {
            var request = HTTPClientRequest(url: "https://localhost:\(port)\(path)")
            request.method = .POST
            request.headers.add(name: "content-type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: JSONValue.object(object).compactText))
            let response = try await client.execute(request, timeout: .seconds(20))
            let bytes = try await response.body.collect(upTo: 1 << 20)
            try await client.shutdown()
            return (Int(response.status.code), response.headers.first(name: "content-type") ?? "", Array(bytes.readableBytesView))
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// A TLS server running the service with a self-signed server certificate, the client side
    /// of a device (its keys and CSRs made by `openssl`), and a sessions limit of 120 s.
    struct Fixture: Sendable {
        let server: LiveServer
        let dir: URL
        let serverCertificate: String
        let openssl: URL

        static func with(_ body: @Sendable (Fixture) async throws -> Void) async throws {
            let dir = try temporaryDirectory()
            let openssl = try #require(which("openssl"))
            _ = try await run(openssl, dir, [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "server.key", "-out", "server.pem",
                "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
            ])
            let serverCertificate = dir.appendingPathComponent("server.pem").path
            chmod(dir.appendingPathComponent("server.key").path, 0o600)
            try await LiveServer.with(configure: {
                $0.tls = .init(certificate: serverCertificate, key: dir.appendingPathComponent("server.key").path)
                $0.sessions = ServerConfiguration.Sessions(maxSessionAgeSeconds: 120)
            }) { server in
                try await body(Fixture(server: server, dir: dir, serverCertificate: serverCertificate, openssl: openssl))
            }
        }

        static func run(_ openssl: URL, _ dir: URL, _ arguments: [String]) async throws -> String {
            let result = try await runDetached(openssl, arguments, cwd: dir)
            #expect(result.status == 0, "\(arguments): \(result.err)")
            return result.out
        }

        /// A new P-256 key `name.key` and its CSR (PEM).
        func csr(_ name: String) async throws -> String {
            try await Self.run(openssl, dir, ["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "\(name).key", "-subj", "/CN=x"])
        }

        /// The device holding `name.key` and the chain in `reply`.
        func device(_ name: String, _ reply: [String: JSONValue]) throws -> Device {
            let chain = dir.appendingPathComponent("\(name).pem").path
            try (reply["certificate"]?.stringValue ?? "").write(toFile: chain, atomically: true, encoding: .utf8)
            return Device(key: dir.appendingPathComponent("\(name).key").path, chain: chain)
        }

        func post(_ path: String, _ object: [String: JSONValue], device: Device? = nil) async throws -> (status: Int, json: [String: JSONValue]) {
            let port = server.base.split(separator: ":").last.map(String.init) ?? ""
            return try await RenewalTests.post(server, port: port, serverCertificate: serverCertificate, path, object, device: device)
        }

        /// A certificate issued for a dev token with these claims: the reply and the device.
        func enroll(_ name: String, _ claims: [String: JSONValue], validitySeconds: Int? = nil) async throws -> (reply: [String: JSONValue], device: Device) {
            var body: [String: JSONValue] = ["provider": .string("dev"), "token": .string(try server.token(claims)), "csr": .string(try await csr(name))]
            if let validitySeconds { body["validitySeconds"] = .integer(validitySeconds) }
            let (status, reply) = try await post("/v1/certificates", body)
            #expect(status == 200, "\(reply)")
            return (reply, try device(name, reply))
        }

        func recorded() async throws -> Int { try await server.service.ca.ledger.recent(limit: 100).count }

        /// A renewal of `body` with `device`'s certificate (none: no client certificate) is
        /// answered `status` with the error `code`, and nothing is recorded.
        func refused(_ body: [String: JSONValue], device: Device?, status: Int, code: String) async throws {
            let before = try await recorded()
            let (answered, reply) = try await post("/v1/certificates/renew", body, device: device)
            #expect(answered == status, "\(reply)")
            #expect(RenewalTests.errorCode(reply) == code, "\(reply)")
            #expect(try await recorded() == before)
        }

        /// A renewal with `device`'s certificate gets no answer: the handshake ends with the
        /// server's `alert` (BoringSSL's name for it), and nothing is recorded.
        func refusedAtTheHandshake(_ device: Device, alert: String) async throws {
            let before = try await recorded()
            do {
                let reply = try await post("/v1/certificates/renew", ["csr": .string(try await csr("refused"))], device: device)
                Issue.record("answered instead of refused with \(alert): \(reply)")
            } catch {
                #expect(String(reflecting: error).contains(alert), "\(String(reflecting: error))")
            }
            #expect(try await recorded() == before)
        }
    }

    static func errorCode(_ reply: [String: JSONValue]) -> String? { reply["error"]?.objectValue?["code"]?.stringValue }

    /// Renewed with the current certificate: same identity, recorded as its renewal, never past the
    /// session limit; the renewed certificate renews too (the limit still counts from the sign-in).
    @Test func renewalKeepsTheIdentityWithinTheSession() async throws {
        try await Fixture.with { f in
            let now = Int(Date().timeIntervalSince1970)
            // Signed in 60 s ago: the session may be renewed for another 60 s.
            let (issued, first) = try await f.enroll("a", ["sub": .string("renewer"), "auth_time": .integer(now - 60)])
            #expect(issued["renewAfter"]?.stringValue != nil)
            let firstSerial = try #require(issued["serial"]?.stringValue)

            let (renewedStatus, renewed) = try await f.post("/v1/certificates/renew", ["csr": .string(try await f.csr("b"))], device: first)
            #expect(renewedStatus == 200, "\(renewed)")
            #expect(renewed["renewalOf"]?.stringValue == firstSerial)
            #expect(renewed["spiffeID"] == issued["spiffeID"])
            #expect(renewed["identity"]?.objectValue?["account"]?.stringValue == "dev:renewer")
            let renewedSerial = try #require(renewed["serial"]?.stringValue)
            let notAfter = try #require(renewed["notAfter"]?.stringValue.flatMap { ISO8601DateFormatter().date(from: $0) })
            #expect(notAfter.timeIntervalSince1970 <= Double(now - 60 + 120) + 1, "never past the session limit")
            let entry = try #require(try await f.server.service.ca.ledger.entry(serial: renewedSerial))
            #expect(entry.renewalOf == firstSerial)
            #expect(entry.sessionStart.map { abs($0.timeIntervalSince1970 - Double(now - 60)) < 1 } == true)

            let (againStatus, again) = try await f.post("/v1/certificates/renew", ["csr": .string(try await f.csr("c"))], device: try f.device("b", renewed))
            #expect(againStatus == 200, "\(again)")
            #expect(again["renewalOf"]?.stringValue == renewedSerial)
        }
    }

    /// Without a client certificate: 401 client_certificate_required, nothing issued.
    @Test func withoutAClientCertificateNothingIsRenewed() async throws {
        try await Fixture.with { f in
            try await f.refused(["csr": .string(try await f.csr("d"))], device: nil, status: 401, code: "client_certificate_required")
        }
    }

    /// A body that is not a renewal request: 400, nothing issued.
    @Test func badInputIsRefused() async throws {
        try await Fixture.with { f in
            let (_, device) = try await f.enroll("a", ["sub": .string("renewer")])
            try await f.refused(["csr": .integer(1)], device: device, status: 400, code: "invalid_request")
        }
    }

    /// A revoked certificate: 403 revoked, nothing issued.
    @Test func aRevokedCertificateIsRefused() async throws {
        try await Fixture.with { f in
            let (issued, device) = try await f.enroll("a", ["sub": .string("renewer")])
            _ = try await f.server.service.ca.revoke(serial: try #require(issued["serial"]?.stringValue), reason: .keyCompromise)
            try await f.refused(["csr": .string(try await f.csr("e"))], device: device, status: 403, code: "revoked")
        }
    }

    /// A certificate from another CA does not get through the TLS handshake: no answer at all.
    @Test func aForeignCertificateEndsTheHandshake() async throws {
        try await Fixture.with { f in
            _ = try await Fixture.run(f.openssl, f.dir, [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "foreign.key", "-out", "foreign.pem",
                "-days", "1", "-subj", "/CN=dev:renewer",
            ])
            let foreign = Device(key: f.dir.appendingPathComponent("foreign.key").path, chain: f.dir.appendingPathComponent("foreign.pem").path)
            // The server's alert: its trust root (this CA) did not issue the certificate.
            try await f.refusedAtTheHandshake(foreign, alert: "TLSV1_ALERT_UNKNOWN_CA")
        }
    }

    /// An expired certificate: refused at the handshake.
    @Test func anExpiredCertificateIsRefused() async throws {
        try await Fixture.with { f in
            let (_, expiring) = try await f.enroll("g", ["sub": .string("renewer")], validitySeconds: 1)
            // Waits for the expiry (the certificate's one second, and a second for its notAfter's rounding).
            try await Task.sleep(for: .milliseconds(2500))
            try await f.refusedAtTheHandshake(expiring, alert: "ALERT_CERTIFICATE_EXPIRED")
        }
    }

    /// Past the session limit: a session that began 119 s ago has 1 s left, less than a
    /// certificate needs; once that second has passed, renewal is refused 403 session_expired.
    @Test func pastTheSessionLimitRenewalIsRefused() async throws {
        try await Fixture.with { f in
            let (_, late) = try await f.enroll("i", ["sub": .string("late"), "auth_time": .integer(Int(Date().timeIntervalSince1970) - 119)])
            try await Task.sleep(for: .milliseconds(1200))
            let (status, reply) = try await f.post("/v1/certificates/renew", ["csr": .string(try await f.csr("j"))], device: late)
            #expect(status == 403)
            #expect(Self.errorCode(reply) == "session_expired", "\(reply)")
        }
    }

    /// A logout racing an issuance on an instance that had not heard of it yet: the certificate is
    /// recorded after the logout's revocation, for a session that began before it (here issued by
    /// the CA directly, past the check that would refuse the token now). It does not renew: the end
    /// is compared with the session's start, not with the certificate's issue time (which renewed
    /// such a certificate until the limit). A new sign-in after the logout renews as before.
    @Test func aCertificateFromBeforeALogoutDoesNotRenew() async throws {
        try await Fixture.with { f in
            let racing = try f.server.token(["sub": .string("racer"), "iat": .integer(Int(Date().timeIntervalSince1970) - 5)])
            let identity = try #require(try await f.server.service.providers.providers["dev"]?.verify(racing).identity)
            _ = await f.server.service.endSessions(of: identity.accountUID, reason: .cessationOfOperation, by: "logout")
            let straggler = try await f.server.service.ca.issue(identity: identity, csr: try ValidatedCSR(Array(try await f.csr("k").utf8)))
            let (status, reply) = try await f.post(
                "/v1/certificates/renew", ["csr": .string(try await f.csr("l"))], device: try f.device("k", ["certificate": .string(straggler.chainPEM)]))
            #expect(status == 401, "\(reply)")
            #expect(Self.errorCode(reply) == "session_ended", "\(reply)")

            let (_, fresh) = try await f.enroll("m", ["sub": .string("racer"), "iat": .integer(Int(Date().timeIntervalSince1970) + 1)])
            let (freshStatus, freshRenewed) = try await f.post("/v1/certificates/renew", ["csr": .string(try await f.csr("n"))], device: fresh)
            #expect(freshStatus == 200, "\(freshRenewed)")
        }
    }
}
