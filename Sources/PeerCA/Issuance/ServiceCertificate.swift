public import Foundation
import SwiftASN1
public import X509

extension CertificateAuthority {
    /// A TLS server certificate for the service itself, signed by the issuing key: what
    /// `tokentool serve --tls` presents on the embedded defaults, so that devices holding only
    /// this CA's root can reach the service over HTTPS (host names checked) and renew over mutual
    /// TLS with no other set-up.
    ///
    /// The certificate is `CA:FALSE`, key usage digitalSignature, EKU serverAuth only (it cannot
    /// act as a device), its subject `CN=` the first name, and one SAN entry per name: a DNS name,
    /// or an IP address when the name is an IPv4 or IPv6 literal. It is not a peer certificate and
    /// is not recorded in the issuance ledger: it names no account, and it is replaced by making a
    /// new one (`serve` does at start when less than half of its validity is left).
    ///
    /// Refused (``PeerCAError/Code/invalidCAMaterial``): no name, a name that is neither an
    /// address nor a DNS name of letters, digits, hyphens and dots, or a validity outside 1 s – 398 days.
    public func serviceCertificate(
        publicKey: Certificate.PublicKey, names: [String], validity: TimeInterval = 30 * 86_400, now: Date = Date()
    ) throws(PeerCAError) -> Certificate {
        guard let first = names.first else { throw PeerCAError(.invalidCAMaterial, "a service certificate needs at least one name") }
        guard validity >= 1, validity <= 398 * 86_400 else {
            throw PeerCAError(.invalidCAMaterial, "a service certificate's validity must be 1 s to 398 days, not \(validity) s")
        }
        var entries: [GeneralName] = []
        for name in names {
            if let address = Self.ipAddressBytes(name) {
                entries.append(.ipAddress(ASN1OctetString(contentBytes: ArraySlice(address))))
            } else if Self.isDNSName(name) {
                entries.append(.dnsName(name))
            } else {
                throw PeerCAError(.invalidCAMaterial, "\"\(name)\" is neither an IP address nor a DNS name")
            }
        }
        let notAfter = min(now.addingTimeInterval(validity), issuer.notValidAfter)
        do {
            let extensions = try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.serverAuth])
                SubjectKeyIdentifier(hash: publicKey)
                if let identifier = try issuer.extensions.subjectKeyIdentifier?.keyIdentifier {
                    AuthorityKeyIdentifier(keyIdentifier: identifier)
                }
                SubjectAlternativeNames(entries)
            }
            return try Certificate(
                version: .v3, serialNumber: SerialNumbers.random(), publicKey: publicKey, notValidBefore: now.addingTimeInterval(-60),
                notValidAfter: notAfter, issuer: issuer.subject, subject: try DistinguishedName { CommonName(first) },
                signatureAlgorithm: signatureAlgorithm, extensions: extensions, issuerPrivateKey: issuerKey)
        } catch {
            throw PeerCAError(.invalidCAMaterial, "cannot sign the service certificate (\(error))")
        }
    }

    /// The 4 or 16 bytes of an IPv4 or IPv6 literal, or nil.
    static func ipAddressBytes(_ text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return withUnsafeBytes(of: &v4) { Array($0) } }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 { return withUnsafeBytes(of: &v6) { Array($0) } }
        return nil
    }

    /// A host name: labels of 1–63 letters, digits and hyphens (not at either end), 253 characters at most.
    static func isDNSName(_ text: String) -> Bool {
        guard !text.isEmpty, text.utf8.count <= 253 else { return false }
        return text.split(separator: ".", omittingEmptySubsequences: false).allSatisfy { label in
            !label.isEmpty && label.utf8.count <= 63 && label.first != "-" && label.last != "-"
                && label.utf8.allSatisfy { $0 == UInt8(ascii: "-") || (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) }
        }
    }
}
