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
            return (Int(response.status.code), (try? JSONValue.parse(Array(bytes.readableBytesView)))?.objectValue ?? [:])
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    @Test func renewalKeepsTheIdentityWithinTheSessionAndRefusesTheRest() async throws {
        let dir = try temporaryDirectory()
        let openssl = try #require(which("openssl"))
        @Sendable func run(_ arguments: [String]) async throws -> String {
            let result = try await runDetached(openssl, arguments, cwd: dir)
            #expect(result.status == 0, "\(arguments): \(result.err)")
            return result.out
        }
        _ = try await run([
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "server.key", "-out", "server.pem",
            "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
        ])
        let serverCertificate = dir.appendingPathComponent("server.pem").path
        chmod(dir.appendingPathComponent("server.key").path, 0o600)
        @Sendable func csr(_ name: String) async throws -> String {
            try await run(["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "\(name).key", "-subj", "/CN=x"])
        }
        @Sendable func device(_ name: String, _ reply: [String: JSONValue]) throws -> Device {
            let chain = dir.appendingPathComponent("\(name).pem").path
            try (reply["certificate"]?.stringValue ?? "").write(toFile: chain, atomically: true, encoding: .utf8)
            return Device(key: dir.appendingPathComponent("\(name).key").path, chain: chain)
        }
        try await LiveServer.with(configure: {
            $0.tls = .init(certificate: serverCertificate, key: dir.appendingPathComponent("server.key").path)
            $0.sessions = ServerConfiguration.Sessions(maxSessionAgeSeconds: 120)
        }) { server in
            let port = server.base.split(separator: ":").last.map(String.init) ?? ""
            func post(_ path: String, _ object: [String: JSONValue], device: Device? = nil) async throws -> (status: Int, json: [String: JSONValue]) {
                try await Self.post(server, port: port, serverCertificate: serverCertificate, path, object, device: device)
            }
            let now = Int(Date().timeIntervalSince1970)
            // Signed in 60 s ago: the session may be renewed for another 60 s.
            let token = try server.token(["sub": .string("renewer"), "auth_time": .integer(now - 60)])
            let (issuedStatus, issued) = try await post("/v1/certificates", ["provider": .string("dev"), "token": .string(token), "csr": .string(try await csr("a"))])
            #expect(issuedStatus == 200, "\(issued)")
            #expect(issued["renewAfter"]?.stringValue != nil)
            let first = try device("a", issued)
            let firstSerial = try #require(issued["serial"]?.stringValue)

            // Renewed with the current certificate: same identity, recorded as its renewal, within the session.
            let (renewedStatus, renewed) = try await post("/v1/certificates/renew", ["csr": .string(try await csr("b"))], device: first)
            #expect(renewedStatus == 200, "\(renewed)")
            #expect(renewed["renewalOf"]?.stringValue == firstSerial)
            #expect(renewed["spiffeID"] == issued["spiffeID"])
            #expect(renewed["identity"]?.objectValue?["account"]?.stringValue == "dev:renewer")
            let renewedSerial = try #require(renewed["serial"]?.stringValue)
            let notAfter = try #require(renewed["notAfter"]?.stringValue.flatMap { ISO8601DateFormatter().date(from: $0) })
            #expect(notAfter.timeIntervalSince1970 <= Double(now - 60 + 120) + 1, "never past the session limit")
            let entry = try #require(try await server.service.ca.ledger.entry(serial: renewedSerial))
            #expect(entry.renewalOf == firstSerial)
            #expect(entry.sessionStart.map { abs($0.timeIntervalSince1970 - Double(now - 60)) < 1 } == true)
            // The renewed certificate renews too (the session limit still counts from the sign-in).
            let second = try device("b", renewed)
            let (againStatus, again) = try await post("/v1/certificates/renew", ["csr": .string(try await csr("c"))], device: second)
            #expect(againStatus == 200, "\(again)")
            #expect(again["renewalOf"]?.stringValue == renewedSerial)

            // Without a client certificate: refused, nothing issued.
            let before = try await server.service.ca.ledger.recent(limit: 100).count
            let (bareStatus, bare) = try await post("/v1/certificates/renew", ["csr": .string(try await csr("d"))])
            #expect(bareStatus == 401)
            #expect(bare["error"]?.objectValue?["code"]?.stringValue == "client_certificate_required")
            // Bad input: refused, nothing issued.
            let (badStatus, _) = try await post("/v1/certificates/renew", ["csr": .integer(1)], device: second)
            #expect(badStatus == 400)
            // A revoked certificate: refused.
            _ = try await server.service.ca.revoke(serial: firstSerial, reason: .keyCompromise)
            let (revokedStatus, revoked) = try await post("/v1/certificates/renew", ["csr": .string(try await csr("e"))], device: first)
            #expect(revokedStatus == 403)
            #expect(revoked["error"]?.objectValue?["code"]?.stringValue == "revoked")
            #expect(try await server.service.ca.ledger.recent(limit: 100).count == before)

            // A foreign certificate (not from this CA) does not get through the handshake.
            _ = try await run([
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "foreign.key", "-out", "foreign.pem",
                "-days", "1", "-subj", "/CN=dev:renewer",
            ])
            let foreign = Device(key: dir.appendingPathComponent("foreign.key").path, chain: dir.appendingPathComponent("foreign.pem").path)
            await #expect(throws: (any Error).self) { _ = try await post("/v1/certificates/renew", ["csr": .string(try await csr("f"))], device: foreign) }

            // An expired certificate: refused (at the handshake).
            let (shortStatus, short) = try await post(
                "/v1/certificates", ["provider": .string("dev"), "token": .string(token), "csr": .string(try await csr("g")), "validitySeconds": .integer(1)])
            #expect(shortStatus == 200)
            let expiring = try device("g", short)
            try await Task.sleep(for: .milliseconds(2500))
            let expired = try? await post("/v1/certificates/renew", ["csr": .string(try await csr("h"))], device: expiring)
            #expect(expired == nil || expired?.status == 403, "\(String(describing: expired))")

            // Past the session limit: a session that began 119 s ago has 1 s left, less than a certificate needs.
            let late = try server.token(["sub": .string("late"), "auth_time": .integer(Int(Date().timeIntervalSince1970) - 119)])
            let (lateStatus, lateIssued) = try await post("/v1/certificates", ["provider": .string("dev"), "token": .string(late), "csr": .string(try await csr("i"))])
            #expect(lateStatus == 200)
            try await Task.sleep(for: .milliseconds(1200))
            let (limitStatus, limit) = try await post("/v1/certificates/renew", ["csr": .string(try await csr("j"))], device: try device("i", lateIssued))
            #expect(limitStatus == 403)
            #expect(limit["error"]?.objectValue?["code"]?.stringValue == "session_expired")

            // A logout racing an issuance on an instance that had not heard of it yet: the
            // certificate is recorded after the logout's revocation, for a session that began
            // before it (here issued by the CA directly, past the check that would refuse the
            // token now). It does not renew: the end is compared with the session's start, not
            // with the certificate's issue time (which renewed such a certificate until the limit).
            let racing = try server.token(["sub": .string("racer"), "iat": .integer(Int(Date().timeIntervalSince1970) - 5)])
            let identity = try #require(try await server.service.providers.providers["dev"]?.verify(racing).identity)
            _ = await server.service.endSessions(of: identity.accountUID, reason: .cessationOfOperation, by: "logout")
            let straggler = try await server.service.ca.issue(identity: identity, csr: try ValidatedCSR(Array(try await csr("k").utf8)))
            let (stragglerStatus, stragglerReply) = try await post(
                "/v1/certificates/renew", ["csr": .string(try await csr("l"))], device: try device("k", ["certificate": .string(straggler.chainPEM)]))
            #expect(stragglerStatus == 401, "\(stragglerReply)")
            #expect(stragglerReply["error"]?.objectValue?["code"]?.stringValue == "session_ended")
            // A new sign-in after the logout renews as before.
            let fresh = try server.token(["sub": .string("racer"), "iat": .integer(Int(Date().timeIntervalSince1970) + 1)])
            let (freshStatus, freshIssued) = try await post("/v1/certificates", ["provider": .string("dev"), "token": .string(fresh), "csr": .string(try await csr("m"))])
            #expect(freshStatus == 200, "\(freshIssued)")
            let (freshRenewedStatus, freshRenewed) = try await post("/v1/certificates/renew", ["csr": .string(try await csr("n"))], device: try device("m", freshIssued))
            #expect(freshRenewedStatus == 200, "\(freshRenewed)")
        }
    }
}
