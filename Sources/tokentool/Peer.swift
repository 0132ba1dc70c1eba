import ArgumentParser
import Foundation
import PeerCA
import TokenKit
import X509

struct CSRCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "csr",
        abstract: "Make a new device key and a certificate signing request for it.",
        discussion: """
            The key goes to --out (mode 0600, never overwritten); the CSR (PEM) to standard output. \
            The CA takes the identity from the token, so the CSR names nothing but its key.

            Examples:
              tokentool csr --out device.key > device.csr
              tokentool csr --key-type ed25519 --out device.key > device.csr
            """)

    @Option(help: "Key type: p256, p384, ed25519 or rsa3072.")
    var keyType: CAKeyAlgorithm = .p256

    @Option(help: "File for the new private key (mode 0600).")
    var out: String

    func run() throws {
        let key = try keyType.generate()
        let request = try DeviceCSR.make(key: key)
        try Output.writeNew(out, contents: Array(try DeviceCSR.keyPEM(key).utf8), mode: 0o600)
        print(request, terminator: "")
        // A key whose CSR was lost is of no use, and would stand in the way of the retry.
        do { try Output.finish() } catch {
            unlink(out)
            throw error
        }
    }
}

struct PeerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "peer",
        abstract: "A device's side: enroll, stay renewed, talk mutual TLS to peers, check their certificates.",
        discussion: """
            Examples:
              tokentool peer enroll --server https://127.0.0.1:8443 \\
                  --ca tokentool-state/ca/root.pem --provider dev \\
                  --token-file alice.jwt --dir alice
              tokentool peer renew --dir alice --daemon
              tokentool peer listen --dir bob --port 9443
              tokentool peer connect --dir alice 127.0.0.1:9443
            """,
        subcommands: [
            PeerEnrollCommand.self, PeerRenewCommand.self, PeerStatusCommand.self, PeerListenCommand.self, PeerConnectCommand.self,
            PeerVerifyCommand.self,
        ])
}

struct PeerVerifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Verify a peer's certificate chain against the CA roots and print its identity.",
        discussion: """
            The chain (leaf first, then any intermediate) must verify to a root in --ca (RFC 5280), \
            carry exactly one SPIFFE ID (in --trust-domain when given), the EKU for --role, and not be \
            listed in --crl. The CRL's signature is checked with --crl-issuer (required with --crl: \
            a certificate the peer sent cannot vouch for the list of its own revocations); it must \
            be the leaf's issuer's, signed with that issuer's key, and current (thisUpdate to \
            nextUpdate), else the certificate is not trusted.

            Exit status: 0 trusted, 1 not trusted or revoked, 2 usage error.

            Examples:
              tokentool peer verify --ca ca/root.pem device.pem
              tokentool peer verify --ca ca/root.pem --trust-domain my-app --crl crl.pem \\
                  --crl-issuer ca/issuer.pem device.pem
            """)

    @Option(help: "PEM file of trusted CA roots.")
    var ca: String

    @Option(help: "Expected SPIFFE trust domain.")
    var trustDomain: String?

    @Option(help: "CRL file (PEM or DER).")
    var crl: String?

    @Option(help: "Certificate of the CRL's issuer (PEM); required with --crl.")
    var crlIssuer: String?

    @Option(help: "The peer's role: client (needs clientAuth) or server (needs serverAuth).")
    var role: Role = .client

    @Argument(help: "The peer's certificate chain (PEM), leaf first.")
    var chain: String

    enum Role: String, ExpressibleByArgument, CaseIterable { case client, server }

    func run() async throws {
        let roots = try Self.certificates(ca)
        let presented = try Self.certificates(chain)
        guard !roots.isEmpty, !presented.isEmpty else { throw CLIExit.usage("no certificates in \(roots.isEmpty ? ca : chain)") }
        var revocations: RevocationList?
        if let crl {
            // The CRL's signer is named by the user, never taken from what the peer sent: a
            // certificate of the peer's choosing would vouch for a CRL of its choosing.
            guard let crlIssuer else {
                throw CLIExit.usage("--crl needs --crl-issuer: the certificate of the CA that signed the CRL (not one the peer sent)")
            }
            guard let issuerCertificate = try Self.certificates(crlIssuer).first else { throw CLIExit.usage("no certificate in \(crlIssuer)") }
            let list = try RevocationList(try Input.read(crl, limit: Input.largestCRL), issuer: issuerCertificate)
            // Asked to check revocation, say so when this CRL cannot: it is another CA's.
            guard list.issuer == presented[0].issuer else {
                throw CLIExit.usage("the CRL was issued by \(list.issuer), not by the certificate's issuer \(presented[0].issuer): revocation cannot be checked with it")
            }
            revocations = list
        }
        let verifier = PeerVerifier(roots: roots, trustDomain: trustDomain, revocations: revocations)
        do {
            let identity = try await verifier.verify(chain: presented, role: role == .client ? .client : .server)
            print("TRUSTED \(identity.spiffeID)")
            if let cn = identity.commonName { print("  CN: \(cn)") }
            print("  serial: \(identity.serial)")
            print("  not after: \(ISO8601Text.string(identity.notAfter))")
        } catch {
            throw CLIExit(code: 1, message: "UNTRUSTED \(error.code.rawValue): \(error.message)")
        }
    }

    static func certificates(_ path: String) throws -> [Certificate] {
        let text = String(decoding: try Input.read(path), as: UTF8.self)
        do { return try DeviceCSR.certificates(pem: text) } catch { throw CLIExit.usage("\(path): \(error.message)") }
    }
}
