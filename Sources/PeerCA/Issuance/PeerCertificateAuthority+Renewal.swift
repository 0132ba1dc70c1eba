public import Foundation
import SwiftASN1
import X509

extension PeerCertificateAuthority {
    /// Renews the certificate a device presented (DER: the certificate it authenticated with over
    /// mutual TLS) for the key in `csr` (PEM or DER). The presented certificate must be a peer
    /// certificate of this CA (``PeerVerifier``, client role, this trust domain) and exactly what
    /// the ledger recorded under its serial; then ``renew(_:csr:maximumSessionAge:validity:)``
    /// applies. Returns the new certificate and the ledger row of the one it renews.
    public func renew(
        presented der: [UInt8], csr: [UInt8], maximumSessionAge: TimeInterval, validity: TimeInterval? = nil
    ) async throws(PeerCAError) -> (issued: IssuedCertificate, previous: LedgerEntry) {
        let certificate: Certificate
        do { certificate = try Certificate(derEncoded: der) } catch {
            throw PeerCAError(.untrustedPeer, "the presented certificate cannot be parsed")
        }
        let verifier = PeerVerifier(roots: [authority.root], trustDomain: policy.trustDomain, clock: clock)
        _ = try await verifier.verify(chain: [certificate] + authority.intermediates, role: .client)
        let serial = SerialNumbers.hex(certificate.serialNumber)
        guard let current = try await ledger.entry(serial: serial), current.der == der else {
            throw PeerCAError(.untrustedPeer, "certificate \(serial) is not in this CA's ledger")
        }
        let request = try ValidatedCSR(csr)
        return (try await renew(current, csr: request, maximumSessionAge: maximumSessionAge, validity: validity), current)
    }
}
