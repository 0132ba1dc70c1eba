import ArgumentParser
import Foundation
import PeerCA
import TokenKit

struct CAIssue: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "issue",
        abstract: "Verify a token, then issue a peer certificate for a CSR's key (or, with --manual, provision a device with no token).",
        discussion: """
            The token is verified exactly as `tokentool verify` does (same key and policy options: \
            --key, --jwks, --oidc, --pda, --iss, --aud, …). The CSR's self-signature must verify; its \
            key must be P-256, P-384, Ed25519 or RSA ≥ 2048. The certificate's identity comes only \
            from the token: CN = the account UID (the "sub", or --account-claim, after \
            --account-prefix), URI SAN spiffe://<trust domain>/<issuer>/<sub>. It is recorded in the \
            ledger before it is printed (leaf, then intermediate). The provider comes from ca.json \
            unless --provider is given. --require-factor, --acr and --max-sign-in-age refuse a \
            sign-in that does not meet them (exit 1, REFUSED factor_required, acr_not_accepted or \
            sign_in_too_old); nothing is issued. So is a token issued before its account's sessions \
            were ended (`tokentool ca revoke --account`, or a logout through `serve` on the same \
            ledger): REFUSED session_ended. With one-use tokens (ca.json tokenReuse "once"), the same \
            token for another key is REFUSED token_reused, and for the same key prints the \
            certificate it got before (a retry).

            --manual provisions a device an operator vouches for, with no token (Ditto's Manual \
            identity): CN = --device-id, URI SAN spiffe://<trust domain>/manual/<device ID>, valid for \
            --validity (required: 3600, 90m, 24h, 365d; at most 825 days), recorded as provider \
            "manual" with --by as who provisioned it. `tokentool ca provision --csv` does many at once.

            Exit status: 0 issued, 1 the token is invalid or the policy refuses it, 2 usage, CSR or key error.

            Examples:
              tokentool ca issue --dir ca --csr device.csr --key idp.pub \\
                  --iss https://idp.example/ token.jwt > device.pem
              tokentool ca issue --dir ca --csr device.csr --pda \\
                  --validity 3600 hat-token.jwt
              tokentool ca issue --dir ca --csr device.csr --key idp.pub \\
                  --require-factor mfa --account-prefix idp: token.jwt
              tokentool ca issue --dir ca --csr kiosk-7.csr --manual --device-id kiosk-7 \\
                  --validity 365d --by ops@example.com > kiosk-7.pem
            """)

    @Option(help: "CA directory made by tokentool ca init.")
    var dir: String

    @Option(help: "The CSR file (PEM or DER).")
    var csr: String

    @Option(help: "Certificate validity: seconds, or a number with s, m, h or d (shorter than the token's for a token; required with --manual).")
    var validity: ValiditySpan?

    @Flag(help: "Provision a device with no token (Ditto's Manual identity): needs --device-id, --validity and --by.")
    var manual = false

    @Option(help: "With --manual: the device's ID (the certificate's CN and SPIFFE path).")
    var deviceID: String?

    @Option(help: "With --manual: who provisions the device (recorded in the ledger).")
    var by: String?

    @Flag(help: "Print a JSON object (serial, notAfter, SPIFFE ID, chain, identity) instead of PEM.")
    var json = false

    @Argument(help: "The token, a file holding it, or - for standard input.")
    var token: String?

    @OptionGroup(title: "Token verification") var options: VerificationOptions

    @OptionGroup(title: "CA key passphrase") var passphrase: PassphraseOptions

    @OptionGroup(title: "Ledger") var store: StoreOption

    func run() async throws {
        if manual {
            guard token == nil else { throw ValidationError("--manual issues without a token: give no token argument") }
            guard options.keySources == 0 else {
                throw ValidationError("--manual verifies no token: give no --key, --secret-file, --pda, --jwks or --oidc")
            }
            guard let deviceID, let validity, let by else { throw ValidationError("--manual needs --device-id, --validity and --by") }
            let request = try Input.read(csr)
            try await CADeployment(directory: dir).withCA(
                passphrase: passphrase, store: store, allowInsecure: options.allowInsecureKeyFile, issuing: true
            ) { ca in
                let issued: IssuedCertificate
                do throws(PeerCAError) {
                    issued = try await ca.issueManual(deviceID: deviceID, csr: try ValidatedCSR(request), validity: validity.seconds, by: by)
                } catch {
                    throw CLIExit(code: 2, message: "REFUSED \(error.code.rawValue): \(error.message)")
                }
                try report(issued)
            }
            return
        }
        if deviceID != nil || by != nil { throw ValidationError("--device-id and --by go with --manual") }
        let text = try Input.token(token)
        try await CADeployment(directory: dir).withCA(
            passphrase: passphrase, store: store, allowInsecure: options.allowInsecureKeyFile, issuing: true
        ) { ca in
            try await issue(text, with: ca)
        }
    }

    func issue(_ text: String, with ca: PeerCertificateAuthority) async throws {
        let request = try Input.read(csr)
        let (outcome, _) = try await options.verify(text)
        let verified: VerifiedToken
        switch outcome {
        case .success(let token): verified = token
        case .failure(let error): throw CLIExit(code: 1, message: "INVALID \(error.code.rawValue): \(error.message)")
        }
        // The CA's policy (from ca.json) with the identity and factor options that were given.
        let rules = options.identity.applied(to: ca.policy)
        let issued: IssuedCertificate
        do throws(PeerCAError) {
            let validated = try ValidatedCSR(request)
            let now = Date(timeIntervalSince1970: ca.clock.now)
            let identity = try rules.identity(for: verified, now: now)
            // As `serve` does: a token issued before its account's sessions were ended (logout,
            // `ca revoke --account`) gets nothing.
            if let end = try await ca.ledger.endedSession(account: identity.accountUID), end >= now.addingTimeInterval(-EndedSessions.horizon),
                let refusal = EndedSessions.refusal(of: identity, endedAt: end)
            {
                throw refusal
            }
            issued = try await ca.issue(identity: identity, csr: validated, validity: validity?.seconds)
        } catch {
            let refusals: [PeerCAError.Code] = [.policyViolation, .tokenExpired, .tokenReused, .factorRequired, .acrNotAccepted, .signInTooOld, .sessionEnded]
            let status: Int32 = refusals.contains(error.code) ? 1 : 2
            throw CLIExit(code: status, message: "REFUSED \(error.code.rawValue): \(error.message)")
        }
        try report(issued)
    }

    func report(_ issued: IssuedCertificate) throws {
        if json {
            Output.json(.object([
                "serial": .string(issued.serial), "spiffeID": .string(issued.identity.spiffeID),
                "notBefore": .string(ISO8601Text.string(issued.notBefore)),
                "notAfter": .string(ISO8601Text.string(issued.notAfter)), "chain": .string(issued.chainPEM),
                "identity": issued.identity.jsonValue,
            ]))
        } else {
            Swift.print(issued.chainPEM, terminator: "")
        }
        if issued.isRepeat {
            // A one-use token already used for this key: the certificate it got, again.
            printError("already issued \(issued.serial) to \(issued.identity.spiffeID) for this token and key: the same certificate again, valid until \(ISO8601Text.string(issued.notAfter))")
        } else {
            printError("issued \(issued.serial) to \(issued.identity.spiffeID), valid until \(ISO8601Text.string(issued.notAfter))")
        }
    }
}
