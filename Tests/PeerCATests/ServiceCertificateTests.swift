import Foundation
import SwiftASN1
@testable import PeerCA
import TestSupport
import Testing
import X509

/// `serve --tls`'s own HTTPS certificate: a server certificate for DNS names and addresses from the
/// CA's issuing key, which openssl accepts for TLS servers and refuses for clients.
@Suite("The service's own TLS certificate")
struct ServiceCertificateTests {
    @Test(arguments: [false, true])
    func aServerCertificateForNamesAndAddressesVerifiesInOpenSSL(withIntermediate: Bool) throws {
        let material = try CertificateAuthority.create(name: "Service test", withIntermediate: withIntermediate)
        let authority = material.authority
        let key = try CAKeyAlgorithm.p256.generate()
        let certificate = try authority.serviceCertificate(publicKey: key.publicKey, names: ["localhost", "127.0.0.1", "::1", "tt.example"])
        #expect(certificate.subject.description == "CN=localhost")
        let names = try #require(try certificate.extensions.subjectAlternativeNames)
        #expect(Array(names) == [
            .dnsName("localhost"), .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1])),
            .ipAddress(ASN1OctetString(contentBytes: ArraySlice([UInt8](repeating: 0, count: 15) + [1]))), .dnsName("tt.example"),
        ])
        #expect(try certificate.extensions.extendedKeyUsage == ExtendedKeyUsage([.serverAuth]))
        #expect(try certificate.extensions.basicConstraints == .notCertificateAuthority)
        let openssl = try OpenSSL()
        try openssl.write("root.pem", authority.root.pemString)
        try openssl.write("chain.pem", ([certificate] + authority.intermediates).map(\.pemString).joined())
        for (host, ip) in [("localhost", nil), (nil, "127.0.0.1"), (nil, "::1"), ("tt.example", nil)] as [(String?, String?)] {
            var arguments = ["verify", "-CAfile", "root.pem", "-untrusted", "chain.pem", "-purpose", "sslserver"]
            if let host { arguments += ["-verify_hostname", host] }
            if let ip { arguments += ["-verify_ip", ip] }
            let result = try openssl.run(arguments + ["chain.pem"])
            #expect(result.status == 0, "\(host ?? ip ?? ""): \(result.output)")
        }
        // Not for another name, and not a device: no clientAuth.
        #expect(try openssl.run(["verify", "-CAfile", "root.pem", "-untrusted", "chain.pem", "-verify_hostname", "other.example", "chain.pem"]).status != 0)
        #expect(try openssl.run(["verify", "-CAfile", "root.pem", "-untrusted", "chain.pem", "-purpose", "sslclient", "chain.pem"]).status != 0)
    }

    @Test func namesThatAreNeitherHostsNorAddressesAreRefused() throws {
        let authority = try CertificateAuthority.create(name: "Service test").authority
        let key = try CAKeyAlgorithm.p256.generate().publicKey
        for names in [[], ["bad name"], ["-leading.example"], ["a..b"], ["spiffe://x/y"]] as [[String]] {
            #expect(throws: PeerCAError.self, "\(names)") { try authority.serviceCertificate(publicKey: key, names: names) }
        }
        #expect(throws: PeerCAError.self) { try authority.serviceCertificate(publicKey: key, names: ["localhost"], validity: 400 * 86_400) }
    }
}
