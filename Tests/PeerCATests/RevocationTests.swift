import Foundation
@testable import PeerCA
import SwiftASN1
import Synchronization
import TestSupport
import Testing
import TokenKit
import X509

@Suite("Revocation: CRL and OCSP, read by the openssl binary")
struct RevocationTests {
    @Test func crlListsRevokedSerialsAndOpenSSLReadsIt() async throws {
        let openssl = try OpenSSL()
        let test = try TestCA()
        let csr = try openssl.csr("p256", name: "d")
        let first = try await test.ca.issue(token: try Tokens.verified(Tokens.claims()), csr: csr)
        let second = try await test.ca.issue(token: try Tokens.verified(Tokens.claims()), csr: csr)
        let revoked = try await test.ca.revoke(serial: first.serial, reason: .keyCompromise)
        guard case .revoked(_, let reason) = revoked.status else { Issue.record("not revoked"); return }
        #expect(reason == .keyCompromise)
        // Revoking again keeps the first reason; an unknown serial is a typed error.
        let again = try await test.ca.revoke(serial: first.serial, reason: .superseded)
        #expect(again.status == revoked.status)
        let missing = await #expect(throws: PeerCAError.self) { _ = try await test.ca.revoke(serial: "00ff") }
        #expect(missing?.code == .notFound)

        let crl = try await test.ca.crl()
        try openssl.write("crl.der", crl)
        try openssl.write("root.pem", test.root.pemString)
        try openssl.write("issuer.pem", test.material.authority.issuer.pemString)
        try openssl.must(["crl", "-inform", "DER", "-in", "crl.der", "-out", "crl.pem"])
        let text = try openssl.must(["crl", "-in", "crl.pem", "-noout", "-text"])
        #expect(text.contains("Serial Number: \(first.serial.uppercased())"), "\(text)")
        #expect(!text.contains(second.serial.uppercased()))
        #expect(text.contains("Key Compromise"))
        #expect(text.contains("X509v3 CRL Number"))
        // The signature verifies with the issuing CA's key.
        let verified = try openssl.run(["crl", "-in", "crl.pem", "-CAfile", "issuer.pem", "-noout"])
        #expect(verified.output.contains("verify OK"), "\(verified.output)")
        // openssl verify with CRL checking refuses the revoked certificate and accepts the other.
        try openssl.write("first.pem", first.certificate.pemString)
        try openssl.write("second.pem", second.certificate.pemString)
        let bundle = test.root.pemString + test.material.authority.issuer.pemString
        try openssl.write("cas.pem", bundle)
        let refused = try openssl.run(["verify", "-crl_check", "-CAfile", "cas.pem", "-CRLfile", "crl.pem", "first.pem"])
        #expect(refused.status != 0)
        #expect(refused.output.contains("revoked"), "\(refused.output)")
        let accepted = try openssl.run(["verify", "-crl_check", "-CAfile", "cas.pem", "-CRLfile", "crl.pem", "second.pem"])
        #expect(accepted.status == 0, "\(accepted.output)")

        // Our own parser verifies and reads it.
        let list = try RevocationList(crl, issuer: test.material.authority.issuer)
        #expect(list.isRevoked(try first.certificate.serialNumber))
        #expect(!list.isRevoked(try second.certificate.serialNumber))
        // A CRL signed by another CA, or tampered with, is refused.
        let other = try TestCA()
        #expect(throws: PeerCAError.self) { _ = try RevocationList(crl, issuer: other.material.authority.issuer) }
        var tampered = crl
        tampered[tampered.count / 2] ^= 0x01
        #expect(throws: PeerCAError.self) { _ = try RevocationList(tampered, issuer: test.material.authority.issuer) }
    }

    /// A CRL's validity must be a positive number of seconds: NaN trapped (the refusal printed
    /// the NaN date), a negative one made a CRL whose nextUpdate came before its thisUpdate. No
    /// CRL number is taken for a refused one.
    @Test func aCRLValidityThatIsNotPositiveIsRefused() async throws {
        let test = try TestCA()
        for validity in [TimeInterval.nan, .infinity, 0, -5] {
            let error = await #expect(throws: PeerCAError.self, "\(validity)") { _ = try await test.ca.crl(validity: validity) }
            #expect(error?.code == .invalidSettings)
        }
        #expect(try await test.ca.ledger.nextCRLNumber() == 1)
    }

    /// A CRL is made again (a new number, a durable write, a signature) when the revoked list
    /// has changed or the last one is half through its validity; otherwise the last is given
    /// again, whoever asks how often.
    @Test func crlIsMadeAgainOnlyWhenItsListOrAgeCallsForIt() async throws {
        let openssl = try OpenSSL()
        let now = Mutex(Date().timeIntervalSince1970.rounded(.down))
        let test = try TestCA(clock: VerificationClock { now.withLock { $0 } })
        let issuer = test.material.authority.issuer
        let csr = try openssl.csr("p256", name: "d")
        let first = try await test.ca.issue(token: try Tokens.verified(Tokens.claims()), csr: csr)
        let second = try await test.ca.issue(token: try Tokens.verified(Tokens.claims()), csr: csr)

        let empty = try await test.ca.crl(validity: 600)
        let emptyAgain = try await test.ca.crl(validity: 600)
        #expect(emptyAgain == empty)
        let emptyNumber = try #require(try RevocationList(empty, issuer: issuer).number)

        // A revocation: a new CRL with a higher number lists it.
        _ = try await test.ca.revoke(serial: first.serial, reason: .keyCompromise)
        let one = try await test.ca.crl(validity: 600)
        let oneList = try RevocationList(one, issuer: issuer)
        #expect(oneList.isRevoked(try first.certificate.serialNumber))
        let oneNumber = try #require(oneList.number)
        #expect(oneNumber > emptyNumber)
        let oneAgain = try await test.ca.crl(validity: 600)
        #expect(oneAgain == one)

        // A revocation the ledger has but this CA object did not make (another instance, or
        // `tokentool ca revoke` on the same ledger) is in the next CRL too.
        _ = try await test.ca.ledger.revoke(serial: second.serial, reason: .superseded, at: Date(timeIntervalSince1970: now.withLock { $0 }))
        let two = try RevocationList(try await test.ca.crl(validity: 600), issuer: issuer)
        #expect(two.isRevoked(try second.certificate.serialNumber))
        #expect(two.isRevoked(try first.certificate.serialNumber))
        let twoDER = try await test.ca.crl(validity: 600)

        // Just short of half its validity, the same CRL; at half, a new one, same list, higher number.
        now.withLock { $0 += 299 }
        let beforeHalf = try await test.ca.crl(validity: 600)
        #expect(beforeHalf == twoDER)
        now.withLock { $0 += 1 }
        let renewed = try RevocationList(try await test.ca.crl(validity: 600), issuer: issuer)
        let renewedNumber = try #require(renewed.number)
        #expect(renewedNumber > (two.number ?? .max))
        #expect(renewed.revoked.count == 2)
        // Asked for another validity, a CRL made for it.
        let longer = try await test.ca.crl(validity: 3600)
        let longerNumber = try #require(try RevocationList(longer, issuer: issuer).number)
        #expect(longerNumber > renewedNumber)
    }

    /// Many requests for a CRL at once, when none is current (start-up, a revocation, half the
    /// validity gone): one CRL is made — one number taken, one signature — and every caller gets it.
    @Test func concurrentRequestsForANewCRLShareOne() async throws {
        let openssl = try OpenSSL()
        let now = Mutex(Date().timeIntervalSince1970.rounded(.down))
        let test = try TestCA(clock: VerificationClock { now.withLock { $0 } })
        let issuer = test.material.authority.issuer
        let issued = try await test.ca.issue(token: try Tokens.verified(Tokens.claims()), csr: try openssl.csr("p256", name: "d"))

        // The distinct CRLs 32 concurrent calls got: one, when they share its making.
        func burst() async throws -> [UInt8]? {
            let distinct = try await withThrowingTaskGroup(of: [UInt8].self) { group in
                for _ in 0..<32 { group.addTask { try await test.ca.crl(validity: 600) } }
                return try await group.reduce(into: Set<[UInt8]>()) { $0.insert($1) }
            }
            #expect(distinct.count == 1)
            return distinct.first
        }
        let first = try #require(try await burst())
        let firstNumber = try #require(try RevocationList(first, issuer: issuer).number)
        // After a revocation, and again at half the validity: one new CRL each, the next number.
        _ = try await test.ca.revoke(serial: issued.serial, reason: .keyCompromise)
        let second = try #require(try await burst())
        let secondList = try RevocationList(second, issuer: issuer)
        #expect(secondList.isRevoked(try issued.certificate.serialNumber))
        #expect(secondList.number == firstNumber + 1)
        now.withLock { $0 += 300 }
        let third = try #require(try await burst())
        #expect(try RevocationList(third, issuer: issuer).number == firstNumber + 2)
        // Nothing taken meanwhile: the ledger's next number follows the last CRL's.
        #expect(try await test.ca.ledger.nextCRLNumber() == firstNumber + 3)
    }

    /// A request without a nonce gets the response last signed for the same certificate, status
    /// and validity until half that validity has passed; a revocation shows in the next response;
    /// a request with a nonce is signed each time and gets its own nonce back.
    @Test func ocspResponsesWithoutANonceAreReusedWhileTheyHold() async throws {
        let openssl = try OpenSSL()
        let now = Mutex(Date().timeIntervalSince1970.rounded(.down))
        let test = try TestCA(clock: VerificationClock { now.withLock { $0 } })
        let issued = try await test.ca.issue(token: try Tokens.verified(Tokens.claims()), csr: try openssl.csr("p256", name: "d"))
        try openssl.write("issuer.pem", test.material.authority.issuer.pemString)
        try openssl.write("cas.pem", test.root.pemString + test.material.authority.issuer.pemString)
        try openssl.write("d.pem", issued.certificate.pemString)
        try openssl.must(["ocsp", "-issuer", "issuer.pem", "-cert", "d.pem", "-no_nonce", "-reqout", "plain-req.der"])
        let plain = try openssl.read("plain-req.der")
        /// What openssl makes of a response: its signature, and the certificate's status.
        func read(_ response: [UInt8], _ name: String, digest: [String] = []) throws -> String {
            try openssl.write("\(name).der", response)
            return try openssl.run(["ocsp", "-respin", "\(name).der", "-issuer", "issuer.pem"] + digest + ["-cert", "d.pem", "-CAfile", "cas.pem", "-no_nonce"]).output
        }

        // P-256 signatures are randomized: equal bytes are the same response given again.
        let first = await test.ca.ocspResponse(for: plain, validity: 600)
        #expect(await test.ca.ocspResponse(for: plain, validity: 600) == first)
        let firstRead = try read(first, "first")
        #expect(firstRead.contains("Response verify OK") && firstRead.contains("d.pem: good"), "\(firstRead)")
        // Another validity is another response.
        #expect(await test.ca.ocspResponse(for: plain, validity: 3600) != first)
        // A CertID hashed with SHA-256 (openssl's default is SHA-1) names the same issuer.
        try openssl.must(["ocsp", "-issuer", "issuer.pem", "-sha256", "-cert", "d.pem", "-no_nonce", "-reqout", "sha256-req.der"])
        let bySHA256 = try read(await test.ca.ocspResponse(for: try openssl.read("sha256-req.der"), validity: 600), "sha256", digest: ["-sha256"])
        #expect(bySHA256.contains("Response verify OK") && bySHA256.contains("d.pem: good"), "\(bySHA256)")
        // And with SHA-384 and SHA-512 (a good certificate was answered unknown).
        for digest in ["sha384", "sha512"] {
            try openssl.must(["ocsp", "-issuer", "issuer.pem", "-\(digest)", "-cert", "d.pem", "-no_nonce", "-reqout", "\(digest)-req.der"])
            let read = try read(await test.ca.ocspResponse(for: try openssl.read("\(digest)-req.der"), validity: 600), digest, digest: ["-\(digest)"])
            #expect(read.contains("Response verify OK") && read.contains("d.pem: good"), "\(digest): \(read)")
        }

        // Just short of half its validity, the same; at half, a new one, still good.
        now.withLock { $0 += 299 }
        #expect(await test.ca.ocspResponse(for: plain, validity: 600) == first)
        now.withLock { $0 += 1 }
        let second = await test.ca.ocspResponse(for: plain, validity: 600)
        #expect(second != first)
        #expect(try read(second, "second").contains("d.pem: good"))

        // Revoked: the next response says so at once, and is then given again.
        _ = try await test.ca.revoke(serial: issued.serial, reason: .keyCompromise)
        let revoked = await test.ca.ocspResponse(for: plain, validity: 600)
        let revokedRead = try read(revoked, "revoked")
        #expect(revokedRead.contains("Response verify OK") && revokedRead.contains("d.pem: revoked"), "\(revokedRead)")
        #expect(await test.ca.ocspResponse(for: plain, validity: 600) == revoked)

        // Two requests with nonces, for the same certificate: each response carries its own.
        for name in ["n1", "n2"] {
            try openssl.must(["ocsp", "-issuer", "issuer.pem", "-cert", "d.pem", "-reqout", "\(name)-req.der"])
            try openssl.write("\(name)-resp.der", await test.ca.ocspResponse(for: try openssl.read("\(name)-req.der"), validity: 600))
            let checked = try openssl.run(["ocsp", "-respin", "\(name)-resp.der", "-reqin", "\(name)-req.der", "-CAfile", "cas.pem"])
            #expect(checked.output.contains("Response verify OK") && !checked.output.contains("once"), "\(name): \(checked.output)")
        }

        // RFC 8954: a nonce is an OCTET STRING of 1 to 32 octets. The request above with a nonce of
        // each length: 32 is answered (and echoed, as openssl checks), 0 and 33 — or a nonce that
        // is not an OCTET STRING — are malformed (any size up to 64 KiB was echoed and signed).
        func request(nonce: [UInt8]?, raw: Bool = false) throws -> [UInt8] {
            // OCSPRequest { TBSRequest { requestList } }: the request list of openssl's request, kept as it is.
            guard case .constructed(let outer) = try DER.parse(plain).content, let tbsRequest = Array(outer).first,
                case .constructed(let inner) = tbsRequest.content, let tbs = Array(inner).first
            else { throw SupportError("not an OCSP request") }
            var out = DER.Serializer()
            try out.appendConstructedNode(identifier: .sequence) { s in
                try s.appendConstructedNode(identifier: .sequence) { s in
                    s.serializeRawBytes(tbs.encodedBytes)
                    if let nonce {
                        var value = DER.Serializer()
                        if raw { value.serializeRawBytes(nonce[...]) } else { try value.serialize(ASN1OctetString(contentBytes: nonce[...])) }
                        let nonceExtension = Certificate.Extension(oid: OCSPResponder.nonceOID, critical: false, value: value.serializedBytes[...])
                        try s.serialize(explicitlyTaggedWithTagNumber: 2, tagClass: .contextSpecific) { s in try s.serializeSequenceOf([nonceExtension]) }
                    }
                }
            }
            return out.serializedBytes
        }
        let malformed = OCSPResponder.errorResponse(.malformedRequest)
        try openssl.write("n32-req.der", try request(nonce: Array(repeating: 7, count: 32)))
        try openssl.write("n32-resp.der", await test.ca.ocspResponse(for: try openssl.read("n32-req.der"), validity: 600))
        let echoed = try openssl.run(["ocsp", "-respin", "n32-resp.der", "-reqin", "n32-req.der", "-CAfile", "cas.pem"])
        #expect(echoed.output.contains("Response verify OK") && !echoed.output.contains("nonce"), "\(echoed.output)")
        for (nonce, raw) in [([UInt8](), false), (Array(repeating: 7, count: 33), false), (Array(repeating: 7, count: 16), true)] {
            #expect(await test.ca.ocspResponse(for: try request(nonce: nonce, raw: raw), validity: 600) == malformed, "\(nonce.count) \(raw)")
        }
    }

    /// The reused OCSP responses stay bounded: when full, those past half their validity go;
    /// if all are still good, all go.
    @Test func theOCSPResponsesKeptStayBounded() {
        let reuse = OCSPResponder.Reuse()
        let capacity = OCSPResponder.Reuse.capacity
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        func key(_ i: Int) -> OCSPResponder.Reuse.Key {
            OCSPResponder.Reuse.Key(answers: [OCSPResponder.Answer(certID: [UInt8(i & 0xff), UInt8(i >> 8)], status: .good)], validity: 600)
        }
        for i in 0..<capacity { reuse.keep([1], for: key(i), producedAt: start) }
        #expect(reuse.count == capacity)
        #expect(reuse.response(for: key(0), now: start.addingTimeInterval(299)) == [1])
        // 300 s on, the first ones are half through their validity: only the new one stays.
        let later = start.addingTimeInterval(300)
        reuse.keep([2], for: key(capacity), producedAt: later)
        #expect(reuse.count == 1)
        #expect(reuse.response(for: key(capacity), now: later) == [2])
        #expect(reuse.response(for: key(0), now: later) == nil)
        // Full of live ones: they all go for the next.
        for i in 0..<(capacity - 1) { reuse.keep([3], for: key(i), producedAt: later) }
        #expect(reuse.count == capacity)
        reuse.keep([4], for: key(capacity + 1), producedAt: later)
        #expect(reuse.count == 1)
        #expect(reuse.response(for: key(capacity + 1), now: later) == [4])
    }

    @Test func opensslReadsOurOCSPResponses() async throws {
        let openssl = try OpenSSL()
        let test = try TestCA()
        let csr = try openssl.csr("p256", name: "d")
        let good = try await test.ca.issue(token: try Tokens.verified(Tokens.claims()), csr: csr)
        let bad = try await test.ca.issue(token: try Tokens.verified(Tokens.claims()), csr: csr)
        _ = try await test.ca.revoke(serial: bad.serial, reason: .cessationOfOperation)
        try openssl.write("root.pem", test.root.pemString)
        try openssl.write("issuer.pem", test.material.authority.issuer.pemString)
        try openssl.write("cas.pem", test.root.pemString + test.material.authority.issuer.pemString)
        for (name, issued, expected) in [("good", good, "good"), ("bad", bad, "revoked")] {
            try openssl.write("\(name).pem", issued.certificate.pemString)
            try openssl.must(["ocsp", "-issuer", "issuer.pem", "-cert", "\(name).pem", "-reqout", "\(name)-req.der"])
            let response = await test.ca.ocspResponse(for: try openssl.read("\(name)-req.der"))
            try openssl.write("\(name)-resp.der", response)
            // Signature and nonce, checked against the request that carried the nonce...
            let checked = try openssl.run(["ocsp", "-respin", "\(name)-resp.der", "-reqin", "\(name)-req.der", "-CAfile", "cas.pem"])
            #expect(checked.output.contains("Response verify OK"), "\(name): \(checked.output)")
            // ...and the status of the certificate (a new request would carry a new nonce: -no_nonce).
            let read = try openssl.run([
                "ocsp", "-respin", "\(name)-resp.der", "-issuer", "issuer.pem", "-cert", "\(name).pem", "-CAfile", "cas.pem", "-no_nonce",
            ])
            #expect(read.output.contains("Response verify OK"), "\(name): \(read.output)")
            #expect(read.output.contains("\(name).pem: \(expected)"), "\(name): \(read.output)")
        }
        // A certificate from another CA is unknown; garbage gets malformedRequest, not a crash.
        let other = try TestCA()
        let stranger = try await other.ca.issue(token: try Tokens.verified(Tokens.claims()), csr: csr)
        try openssl.write("stranger.pem", stranger.certificate.pemString)
        try openssl.write("other-issuer.pem", other.material.authority.issuer.pemString)
        try openssl.must(["ocsp", "-issuer", "other-issuer.pem", "-cert", "stranger.pem", "-reqout", "s-req.der"])
        try openssl.write("s-resp.der", await test.ca.ocspResponse(for: try openssl.read("s-req.der")))
        let unknown = try openssl.run(["ocsp", "-respin", "s-resp.der", "-issuer", "other-issuer.pem", "-cert", "stranger.pem", "-noverify"])
        #expect(unknown.output.contains("stranger.pem: unknown"), "\(unknown.output)")
        #expect(await test.ca.ocspResponse(for: Array("garbage".utf8)) == [0x30, 0x03, 0x0a, 0x01, 0x01])
        #expect(await test.ca.ocspResponse(for: []) == [0x30, 0x03, 0x0a, 0x01, 0x01])
    }
}
