import Foundation
import TestSupport
import Testing

/// Ditto's Manual identity from the command line: `ca issue --manual` and `ca provision --csv`,
/// checked with the openssl binary and the ledger's listing.
@Suite("Manual identity: ca issue --manual, ca provision", .serialized)
struct ManualIdentityCLITests {
    func listed(_ openssl: OpenSSL) throws -> [[String: Any]] {
        let list = try run(tokentoolExecutable, ["ca", "list", "--dir", "ca", "--json"], cwd: openssl.dir)
        return (try JSONSerialization.jsonObject(with: Data(list.out.utf8)) as? [[String: Any]]) ?? []
    }

    @Test func aDeviceIsProvisionedWithoutAToken() throws {
        let openssl = try OpenSSL()
        func tool(_ args: [String]) throws -> (status: Int32, out: String, err: String) { try run(tokentoolExecutable, args, cwd: openssl.dir) }
        #expect(try tool(["ca", "init", "--dir", "ca", "--app-id", "my-app"]).status == 0)
        try openssl.write("kiosk.csr", try tool(["csr", "--key-type", "p256", "--out", "kiosk.key"]).out)
        let issued = try tool(["ca", "issue", "--dir", "ca", "--csr", "kiosk.csr", "--manual", "--device-id", "kiosk-7", "--validity", "365d", "--by", "ops@example.com"])
        #expect(issued.status == 0, "\(issued.err)")
        try openssl.write("kiosk.pem", issued.out)
        // openssl reads the device's certificate: CN, the manual SPIFFE ID, a year's validity.
        let text = try openssl.run(["x509", "-in", "kiosk.pem", "-noout", "-subject", "-ext", "subjectAltName", "-enddate"])
        #expect(text.output.contains("CN=kiosk-7") || text.output.contains("CN = kiosk-7"), "\(text.output)")
        #expect(text.output.contains("URI:spiffe://my-app/manual/kiosk-7"), "\(text.output)")
        let notAfter = try #require(text.output.firstMatch(of: /notAfter=(.+)/).map { String($0.1) })
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "MMM d HH:mm:ss yyyy 'GMT'"
        let end = try #require(formatter.date(from: notAfter.replacingOccurrences(of: "  ", with: " ")), "\(notAfter)")
        #expect(abs(end.timeIntervalSinceNow - 365 * 86_400) < 3600, "\(notAfter)")
        // The chain verifies against the CA's root with openssl, as a peer's would.
        let verified = try openssl.run(["verify", "-x509_strict", "-CAfile", "ca/root.pem", "-untrusted", "kiosk.pem", "kiosk.pem"])
        #expect(verified.status == 0, "\(verified.output)")
        // In the ledger as provider manual, its token ID naming who provisioned it.
        let entry = try #require(try listed(openssl).first)
        #expect(entry["provider"] as? String == "manual")
        #expect(entry["tokenID"] as? String == "ops@example.com")
        #expect(entry["commonName"] as? String == "kiosk-7")
        // Revoked like any other: the serial is in the CRL.
        let serial = try #require(entry["serial"] as? String)
        #expect(try tool(["ca", "revoke", "--dir", "ca", serial]).status == 0)
        let pem = try tool(["ca", "crl", "--dir", "ca"])
        #expect(pem.status == 0, "\(pem.err)")
        try openssl.write("ca.crl", pem.out)
        let crl = try openssl.run(["crl", "-in", "ca.crl", "-noout", "-text"])
        #expect(crl.output.uppercased().contains(serial.uppercased()), "\(crl.output)")

        // What --manual needs, and what it refuses.
        #expect(try tool(["ca", "issue", "--dir", "ca", "--csr", "kiosk.csr", "--manual", "--device-id", "k"]).status == 2)
        let tooLong = try tool(["ca", "issue", "--dir", "ca", "--csr", "kiosk.csr", "--manual", "--device-id", "k", "--validity", "900d", "--by", "ops"])
        #expect(tooLong.status == 2 && tooLong.err.contains("825 days"), "\(tooLong.err)")
        let withToken = try tool(["ca", "issue", "--dir", "ca", "--csr", "kiosk.csr", "--manual", "--device-id", "k", "--validity", "1d", "--by", "ops", "a.b.c"])
        #expect(withToken.status == 2, "\(withToken.err)")
    }

    func csrs(_ openssl: OpenSSL, _ names: [String]) throws {
        try FileManager.default.createDirectory(at: openssl.dir.appendingPathComponent("csr"), withIntermediateDirectories: true)
        for name in names {
            let csr = try run(tokentoolExecutable, ["csr", "--key-type", "p256", "--out", "csr/\(name).key"], cwd: openssl.dir)
            try openssl.write("csr/\(name).csr", csr.out)
        }
    }

    @Test func aCSVOfDevicesIsProvisionedAllOrNothing() throws {
        let openssl = try OpenSSL()
        func tool(_ args: [String]) throws -> (status: Int32, out: String, err: String) { try run(tokentoolExecutable, args, cwd: openssl.dir) }
        #expect(try tool(["ca", "init", "--dir", "ca", "--app-id", "my-app"]).status == 0)
        try csrs(openssl, ["kiosk-1", "kiosk-2", "kiosk-3"])
        try openssl.write("devices.csv", "deviceID,csr,validity\nkiosk-1,csr/kiosk-1.csr,\nkiosk-2,csr/kiosk-2.csr,30d\nkiosk-3,csr/kiosk-3.csr,\n")
        let made = try tool(["ca", "provision", "--dir", "ca", "--csv", "devices.csv", "--validity", "365d", "--by", "ops", "--out", "certs"])
        #expect(made.status == 0, "\(made.err)")
        let rows = (try JSONSerialization.jsonObject(with: Data(made.out.utf8)) as? [[String: Any]]) ?? []
        #expect(rows.map { $0["deviceID"] as? String } == ["kiosk-1", "kiosk-2", "kiosk-3"])
        for name in ["kiosk-1", "kiosk-2", "kiosk-3"] {
            let subject = try openssl.run(["x509", "-in", "certs/\(name).pem", "-noout", "-subject"])
            #expect(subject.output.contains(name), "\(subject.output)")
        }
        #expect(try listed(openssl).count == 3)
        #expect(try listed(openssl).allSatisfy { $0["provider"] as? String == "manual" && $0["status"] as? String == "valid" })

        // A row the CA refuses (past 825 days) after one it issued: that one is revoked, no file written.
        try csrs(openssl, ["kiosk-4", "kiosk-5"])
        try openssl.write("more.csv", "deviceID,csr,validity\nkiosk-4,csr/kiosk-4.csr,10d\nkiosk-5,csr/kiosk-5.csr,900d\n")
        let refused = try tool(["ca", "provision", "--dir", "ca", "--csv", "more.csv", "--by", "ops", "--out", "more"])
        #expect(refused.status == 2 && refused.err.contains("line 3 (kiosk-5)") && refused.err.contains("1 certificates issued in this run were revoked"), "\(refused.err)")
        #expect(!FileManager.default.fileExists(atPath: openssl.dir.appendingPathComponent("more/kiosk-4.pem").path))
        let kiosk4 = try listed(openssl).filter { $0["commonName"] as? String == "kiosk-4" }
        #expect(kiosk4.count == 1 && kiosk4.first?["status"] as? String == "revoked" && kiosk4.first?["reason"] as? String == "cessationOfOperation", "\(kiosk4)")

        // Rows checked before anything is issued: a CSR that is not one, a device named twice.
        let before = try listed(openssl).count
        try openssl.write("csr/bad.csr", "not a CSR\n")
        for (text, words) in [
            ("deviceID,csr\nkiosk-6,csr/kiosk-4.csr\nkiosk-7,csr/bad.csr\n", "line 3"),
            ("deviceID,csr\nkiosk-6,csr/kiosk-4.csr\nkiosk-6,csr/kiosk-5.csr\n", "listed twice"),
            ("deviceID,csr\n../etc,csr/kiosk-4.csr\n", "device ID"),
            ("name,csr\nkiosk-6,csr/kiosk-4.csr\n", "deviceID and csr"),
        ] {
            try openssl.write("bad.csv", text)
            let result = try tool(["ca", "provision", "--dir", "ca", "--csv", "bad.csv", "--validity", "1d", "--by", "ops", "--out", "bad"])
            #expect(result.status == 2 && result.err.contains(words), "\(words): \(result.err)")
        }
        #expect(try listed(openssl).count == before)
        // Files are never overwritten: a run whose file exists issues nothing.
        try openssl.write("again.csv", "deviceID,csr\nkiosk-1,csr/kiosk-1.csr\n")
        let again = try tool(["ca", "provision", "--dir", "ca", "--csv", "again.csv", "--validity", "1d", "--by", "ops", "--out", "certs"])
        #expect(again.status == 2 && again.err.contains("exists"), "\(again.err)")
        #expect(try listed(openssl).count == before)
    }
}
