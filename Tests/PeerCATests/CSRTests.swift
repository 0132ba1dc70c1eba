import Foundation
@testable import PeerCA
import TestSupport
import Testing
import TokenKit

@Suite("CSR checks: proof of possession, key types, hostile input")
struct CSRTests {
    static let vectors = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("TestVectors/x509")

    func vector(_ name: String) throws -> [UInt8] { Array(try Data(contentsOf: Self.vectors.appendingPathComponent(name))) }

    func code(_ bytes: [UInt8]) -> String? {
        do { _ = try ValidatedCSR(bytes); return nil } catch { return error.code.rawValue }
    }

    @Test(arguments: [
        // An RSA-1024 key (and a broken signature): the key is refused first.
        ("pyca-requests/invalid_signature.pem", "unsupported_key"),
        // SHA-1 (and a broken signature).
        ("pyca-requests/unsupported_extension_critical.pem", "unsupported_key"),
        ("limbo-assets/explicit_curve_ca.csr", "unsupported_key"),
        ("limbo-assets/explicit_curve_leaf.csr", "unsupported_key"),
        ("pyca-requests/dsa_sha1.pem", "unsupported_key"),
        ("pyca-requests/rsa_md4.pem", "unsupported_key"),
        ("pyca-requests/rsa_sha1.pem", "unsupported_key"),
        ("pyca-requests/bad-version.pem", "invalid_csr"),
        // A challengePassword of the wrong type, and a self-signature that does not verify.
        ("pyca-requests/challenge-invalid.der", "bad_csr_signature"),
    ])
    func refusedVectors(file: String, expected: String) throws {
        let got = code(try vector(file))
        #expect(got == expected, "\(file)")
    }

    @Test(arguments: ["pyca-requests/rsa_sha256.pem", "pyca-requests/rsa_sha256.der", "pyca-requests/ec_sha256.pem", "pyca-requests/ec_sha256_old_header.pem"])
    func acceptedVectors(file: String) throws {
        let got = code(try vector(file))
        #expect(got == nil, "\(file)")
    }

    /// PEM with base64 lines of another length than 64 (76, MIME's; one long line) is read, as
    /// RFC 7468 §3 asks of parsers (it was "not valid PEM"); the DER is the same either way.
    @Test func pemOfAnyLineLengthIsRead() throws {
        let openssl = try OpenSSL()
        let pem = String(decoding: try openssl.csr("p256", name: "lines"), as: UTF8.self)
        let der = try ValidatedCSR(Array(pem.utf8)).derBytes
        let base64 = Data(der).base64EncodedString()
        for width in [76, 60, base64.count] {
            var lines: [String] = []
            var rest = Substring(base64)
            while !rest.isEmpty {
                lines.append(String(rest.prefix(width)))
                rest = rest.dropFirst(width)
            }
            let rewrapped = "-----BEGIN CERTIFICATE REQUEST-----\n" + lines.joined(separator: "\n") + "\n-----END CERTIFICATE REQUEST-----\n"
            #expect(try ValidatedCSR(Array(rewrapped.utf8)).derBytes == der, "\(width)")
        }
        let broken = "-----BEGIN CERTIFICATE REQUEST-----\n" + base64.dropLast(3) + "!!!\n-----END CERTIFICATE REQUEST-----\n"
        #expect(code(Array(broken.utf8)) == "invalid_csr")
    }

    @Test func weakAndHostileInput() throws {
        let openssl = try OpenSSL()
        #expect(code(try openssl.csr("rsa1024", name: "weak")) == "unsupported_key")
        let good = try openssl.csr("p256", name: "good")
        #expect(code(good) == nil)
        // A flipped bit in the signature, a truncated request, garbage, empty, oversized, two PEM blocks, a certificate.
        var flipped = try openssl.read("good.csr")
        let text = String(decoding: flipped, as: UTF8.self)
        try openssl.must(["req", "-in", "good.csr", "-outform", "DER", "-out", "good.der"])
        var der = try openssl.read("good.der")
        #expect(code(der) == nil)
        der[der.count - 5] ^= 0x01
        #expect(code(der) == "bad_csr_signature")
        #expect(code(Array(try openssl.read("good.der").prefix(100))) == "invalid_csr")
        #expect(code(Array("hello".utf8)) == "invalid_csr")
        #expect(code([]) == "invalid_csr")
        #expect(code([0x30] + [UInt8](repeating: 0x41, count: 20_000)) == "invalid_csr")
        #expect(code(Array((text + text).utf8)) == "invalid_csr")
        flipped = Array(text.replacingOccurrences(of: "CERTIFICATE REQUEST", with: "CERTIFICATE").utf8)
        #expect(code(flipped) == "invalid_csr")
        #expect(code([0x30, 0x84, 0xff, 0xff, 0xff, 0xff]) == "invalid_csr")
        #expect(code([UInt8](repeating: 0x30, count: 5000)) == "invalid_csr")
    }

    @Test func issuanceRefusesBadCSRsAndRecordsNothing() async throws {
        let test = try TestCA()
        let token = try Tokens.verified(Tokens.claims())
        for file in ["pyca-requests/invalid_signature.pem", "limbo-assets/explicit_curve_leaf.csr"] {
            await #expect(throws: PeerCAError.self) { _ = try await test.ca.issue(token: token, csr: try vector(file)) }
        }
        #expect(try await test.ca.ledger.recent(limit: 10).isEmpty)
    }
}
