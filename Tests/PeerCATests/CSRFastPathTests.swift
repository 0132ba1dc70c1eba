import Crypto
import Foundation
@_spi(Testing) @testable import PeerCA
import TestSupport
import Testing
import TokenKit
import X509

/// The direct P-256 path (`CSRFastPath`) against swift-certificates' parser: for every request
/// below, `ValidatedCSR` gives the same result — the same key, fingerprint and identifier, or the
/// same error — with the path on and off, and the path takes the requests it is meant for.
@Suite("CSR checks: the direct P-256 path agrees with the generic parser")
struct CSRFastPathTests {
    /// What `ValidatedCSR` made of `bytes`, as text to compare.
    static func outcome(_ bytes: [UInt8], fastPath: Bool) -> String {
        do {
            let csr = try ValidatedCSR(bytes, fastPath: fastPath)
            return "ok \(csr.keyKind) \(csr.keyFingerprint) \(csr.keyIdentifier) \(csr.subjectPublicKeyInfo) \(csr.derBytes)"
        } catch {
            return "\(error.code.rawValue): \(error.message)"
        }
    }

    static func expectAgreement(_ bytes: [UInt8], _ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let direct = outcome(bytes, fastPath: true), generic = outcome(bytes, fastPath: false)
        #expect(direct == generic, "\(what)", sourceLocation: sourceLocation)
    }

    static func tlv(_ tag: UInt8, _ content: [UInt8]) -> [UInt8] {
        switch content.count {
        case 0..<0x80: [tag, UInt8(content.count)] + content
        case 0x80..<0x100: [tag, 0x81, UInt8(content.count)] + content
        default: [tag, 0x82, UInt8(content.count >> 8), UInt8(content.count & 0xff)] + content
        }
    }

    /// The DER of `openssl req` output (PEM).
    static func der(_ openssl: OpenSSL, _ name: String) throws -> [UInt8] {
        try openssl.must(["req", "-in", "\(name).csr", "-outform", "DER", "-out", "\(name).der"])
        return try openssl.read("\(name).der")
    }

    @Test func theRequestsItIsForTakeIt() throws {
        let openssl = try OpenSSL()
        // openssl with a subject and an extension request (attributes), openssl with neither, a device's.
        let named = try openssl.csr("p256", name: "named")
        try openssl.must(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "bare.key"])
        try openssl.must(["req", "-new", "-key", "bare.key", "-subj", "/", "-out", "bare.csr"])
        let device = Array(try DeviceCSR.make(key: .init(P256.Signing.PrivateKey())).utf8)
        for (what, pem) in [("openssl, named, extension request", named), ("openssl, bare", try openssl.read("bare.csr")), ("DeviceCSR", device)] {
            let body = try #require(CSRFastPath.canonicalPEMBody(pem), "\(what): canonical PEM")
            #expect(CSRFastPath.locate(body) != nil, "\(what)")
            #expect(try CSRFastPath.check(body) != nil, "\(what)")
            let csr = try ValidatedCSR(pem)
            #expect(csr.keyKind == .p256 && csr.derBytes == body && csr.checkedDirectly, "\(what)")
            #expect(csr.keyFingerprint == (try csr.publicKey).sha256Fingerprint, "\(what)")
            Self.expectAgreement(pem, what)
        }
        // Not for it: other keys and digests go to the generic parser.
        for keyType in ["p384", "ed25519", "rsa2048"] {
            let pem = try openssl.csr(keyType, name: keyType)
            #expect(CSRFastPath.locate(try Self.der(openssl, keyType)) == nil, "\(keyType)")
            #expect(!(try ValidatedCSR(pem).checkedDirectly), "\(keyType)")
            Self.expectAgreement(pem, keyType)
        }
        try openssl.must(["req", "-new", "-key", "bare.key", "-subj", "/CN=x", "-sha384", "-out", "sha384.csr"])
        #expect(CSRFastPath.locate(try Self.der(openssl, "sha384")) == nil)
        Self.expectAgreement(try openssl.read("sha384.csr"), "P-256 with ECDSA-SHA384")
    }

    @Test func everyVectorGetsTheSameVerdict() throws {
        let directory = CSRTests.vectors
        var count = 0
        for folder in ["pyca-requests", "limbo-assets"] {
            let names = try FileManager.default.contentsOfDirectory(atPath: directory.appendingPathComponent(folder).path).sorted()
            for name in names where folder == "pyca-requests" || name.hasSuffix(".csr") {
                Self.expectAgreement(Array(try Data(contentsOf: directory.appendingPathComponent("\(folder)/\(name)"))), "\(folder)/\(name)")
                count += 1
            }
        }
        #expect(count >= 15)
    }

    @Test func pemLayoutsOtherThanTheCanonicalOneGoToTheGenericParser() throws {
        let openssl = try OpenSSL()
        let pem = String(decoding: try openssl.csr("p256", name: "layout"), as: UTF8.self)
        let lines = pem.split(separator: "\n").map(String.init)
        let body = lines.dropFirst().dropLast().joined()
        func wrapped(_ width: Int, label: String = "CERTIFICATE REQUEST", body: String = body) -> String {
            var out = "-----BEGIN \(label)-----\n", rest = Substring(body)
            while !rest.isEmpty {
                out += rest.prefix(width) + "\n"
                rest = rest.dropFirst(width)
            }
            return out + "-----END \(label)-----\n"
        }
        #expect(wrapped(64) == pem)
        let canonical: [(String, String)] = [
            ("as openssl writes it", pem), ("no final line end", String(pem.dropLast())),
            ("NEW CERTIFICATE REQUEST", wrapped(64, label: "NEW CERTIFICATE REQUEST")),
        ]
        let others: [(String, String)] = [
            ("CRLF", pem.replacingOccurrences(of: "\n", with: "\r\n")), ("text before", "subject=/CN=x\n" + pem),
            ("text after", pem + "trailing\n"), ("two line ends after", pem + "\n"), ("76-character lines", wrapped(76)),
            ("48-character lines", wrapped(48)), ("one line", wrapped(10_000)),
            ("END label differs", pem.replacingOccurrences(of: "-----END CERTIFICATE REQUEST", with: "-----END NEW CERTIFICATE REQUEST")),
            ("space in a line", lines[0] + "\n " + lines.dropFirst().joined(separator: "\n") + "\n"),
            ("empty body", "-----BEGIN CERTIFICATE REQUEST-----\n-----END CERTIFICATE REQUEST-----\n"),
            ("CERTIFICATE", pem.replacingOccurrences(of: "CERTIFICATE REQUEST", with: "CERTIFICATE")),
        ]
        for (what, text) in canonical {
            #expect(CSRFastPath.canonicalPEMBody(Array(text.utf8)) != nil, "\(what)")
            Self.expectAgreement(Array(text.utf8), what)
        }
        for (what, text) in others {
            #expect(CSRFastPath.canonicalPEMBody(Array(text.utf8)) == nil, "\(what)")
            Self.expectAgreement(Array(text.utf8), what)
        }
        // Padding, on bodies whose length needs it (a CSR's own length varies with its signature):
        // 100 bytes end in "==", 101 in "=". Without it, or with a spare bit set in the last data
        // character (lenient decoders give the same bytes), the layout is not canonical.
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        for length in [100, 101] {
            let der = [0x30] + (1..<length).map { _ in UInt8.random(in: 0...255) }
            let text = Array(PEM.encode(label: "CERTIFICATE REQUEST", der: der).utf8)
            #expect(CSRFastPath.canonicalPEMBody(text) == der, "\(length) bytes")
            let firstPad = try #require(text.firstIndex(of: UInt8(ascii: "=")))
            var spare = text
            let lastValue = try #require(alphabet.firstIndex(of: text[firstPad - 1]))
            spare[firstPad - 1] = alphabet[lastValue | 1]
            for (what, variant) in [("no padding", text.filter { $0 != UInt8(ascii: "=") }), ("spare bits set", spare)] {
                #expect(CSRFastPath.canonicalPEMBody(variant) == nil, "\(length) bytes, \(what)")
                Self.expectAgreement(variant, "\(length) bytes, \(what)")
            }
        }
    }

    /// The decoder on every body length from 1 to 300 bytes (every last-line length and both
    /// paddings), written by TokenKit's PEM encoder; and bodies it must not take.
    @Test func canonicalBodiesOfEveryLengthDecode() {
        var generator = SystemRandomNumberGenerator()
        for length in 1...300 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let pem = Array(PEM.encode(label: "CERTIFICATE REQUEST", der: bytes).utf8)
            #expect(CSRFastPath.canonicalPEMBody(pem) == bytes, "\(length) bytes")
            // An '=' or a line end inside the body, or a character dropped from the first line.
            let firstLine = CSRFastPath.armour[0].begin.count
            for (what, damaged) in [
                ("=", Array(pem[..<(firstLine + 1)]) + [0x3d] + Array(pem[(firstLine + 2)...])),
                ("line end", Array(pem[..<(firstLine + 1)]) + [0x0a] + Array(pem[(firstLine + 2)...])),
                ("dropped", Array(pem[..<firstLine]) + Array(pem[(firstLine + 1)...])),
            ] where length > 3 {
                #expect(CSRFastPath.canonicalPEMBody(damaged) == nil, "\(length) bytes, \(what)")
            }
        }
    }

    /// Every single-bit change at every byte, both ends of each byte, and every truncation.
    @Test func damagedRequestsGetTheSameVerdict() throws {
        let openssl = try OpenSSL()
        _ = try openssl.csr("p256", name: "damage")
        let der = try Self.der(openssl, "damage")
        var accepted = 0, refusedForSignature = 0
        for index in der.indices {
            for bit: UInt8 in [0x01, 0x80] {
                var damaged = der
                damaged[index] ^= bit
                let direct = Self.outcome(damaged, fastPath: true)
                #expect(direct == Self.outcome(damaged, fastPath: false), "byte \(index) ^ \(bit)")
                if direct.hasPrefix("ok") { accepted += 1 }
                if direct.hasPrefix("bad_csr_signature") { refusedForSignature += 1 }
            }
        }
        for length in stride(from: 0, to: der.count, by: 3) { Self.expectAgreement(Array(der.prefix(length)), "first \(length) bytes") }
        // Changes in the signed part or the signature are caught by the signature. One may pass:
        // the signature BIT STRING's unused-bits octet 00 -> 01, which swift-asn1 accepts when the
        // last signature byte's low bit is 0 (about every other signature) and swift-certificates
        // then ignores for ECDSA — in both runs, through the generic parser (the path takes only
        // an unused-bits octet of 0 and hands it over).
        #expect(accepted <= 1)
        #expect(refusedForSignature > der.count / 2)
        // A non-minimal length (the same request with its outer length in three octets) is the generic parser's to refuse.
        let outer = Array(der.dropFirst(4))
        let nonMinimal = [0x30, 0x83, 0x00, UInt8(outer.count >> 8), UInt8(outer.count & 0xff)] + outer
        #expect(CSRFastPath.locate(nonMinimal) == nil)
        Self.expectAgreement(nonMinimal, "non-minimal length")
    }

    /// swift-asn1 refuses a tree deeper than 50 levels; a subject nested to depth 51 of the request
    /// must not pass because the path parsed the subject alone.
    @Test func aSubjectNestedBeyondTheParserLimitIsRefusedAlike() throws {
        let openssl = try OpenSSL()
        _ = try openssl.csr("p256", name: "deep")
        let der = try Self.der(openssl, "deep")
        let parts = try #require(CSRFastPath.locate(der))
        for deepest in [50, 51] {
            // Request 1, info 2, Name 3, RDN SET 4, AttributeTypeAndValue 5, then SEQUENCEs down to a UTF8String at `deepest`.
            var value = Self.tlv(0x0c, Array("x".utf8))
            for _ in 0..<(deepest - 6) { value = Self.tlv(0x30, value) }
            let subject = Self.tlv(0x30, Self.tlv(0x31, Self.tlv(0x30, [0x06, 0x03, 0x55, 0x04, 0x03] + value)))
            let info = Self.tlv(0x30, [0x02, 0x01, 0x00] + subject + Array(parts.subjectPublicKeyInfo) + Array(parts.attributes))
            let request = Self.tlv(0x30, info + CSRFastPath.ecdsaWithSHA256 + Self.tlv(0x03, [0x00] + Array(der[parts.signature])))
            #expect(StrictDER.fits(subject[...], depth: 3) == (deepest <= 50))
            Self.expectAgreement(request, "deepest node at \(deepest)")
            // At 50 the subject is read and the (unchanged) signature no longer matches; at 51 the request does not parse.
            #expect(Self.outcome(request, fastPath: true).hasPrefix(deepest <= 50 ? "bad_csr_signature" : "invalid_csr"))
        }
    }
    /// The signature's r and s are read from its DER as BoringSSL reads them: the same numbers for
    /// every encoding both take, and none BoringSSL refuses.
    @Test func signatureIntegersAreReadAsBoringSSLReadsThem() throws {
        let key = P256.Signing.PrivateKey()
        var encodings: [[UInt8]] = try (0..<1000).map { i in Array(try key.signature(for: SHA256.hash(data: [UInt8(i & 0xff), UInt8(i >> 8)])).derRepresentation) }
        func integer(_ content: [UInt8]) -> [UInt8] { Self.tlv(0x02, content) }
        let big = [UInt8](repeating: 0x7f, count: 32), top = [0x00, 0x80] + [UInt8](repeating: 1, count: 31)
        let crafted: [[UInt8]] = [
            integer([0]) + integer([1]), integer([1]) + integer([0x00, 0x80]), integer(big) + integer(top),
            integer([0x80]) + integer([1]),  // negative
            integer([0x00, 0x01]) + integer([1]),  // redundant leading zero
            integer([0x01] + big) + integer([1]),  // 2^256 and more
            integer([]) + integer([1]),  // empty
            integer([1]), integer([1]) + integer([1]) + integer([1]),  // one, three
        ]
        encodings += crafted.map { Self.tlv(0x30, $0) }
        encodings += [Self.tlv(0x31, integer([1]) + integer([1])), Self.tlv(0x30, integer([1]) + integer([1])) + [0]]
        let tooLarge = Self.tlv(0x30, integer([0x01] + big) + integer([1]))
        var read = 0
        for der in encodings {
            let boring = (try? P256.Signing.ECDSASignature(derRepresentation: der)).map { Array($0.rawRepresentation) }
            if let mine = CSRFastPath.rawSignature(der, 0..<der.count) {
                #expect(mine == boring, "\(der)")
                read += 1
            } else {
                // Left to the generic parser: what BoringSSL refuses too, and numbers of 2^256 or more.
                #expect(boring == nil || der == tooLarge, "\(der)")
            }
        }
        // Every real signature and the three well-formed crafted ones.
        #expect(read == 1003)
    }
}
