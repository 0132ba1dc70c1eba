import ArgumentParser
import Foundation
import PeerCA
import TokenKit

struct Keygen: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Generate a signing key (rsa, ec, ed25519, hmac) or Ditto's shared key (shared-key).",
        discussion: """
            Private keys and secrets go to --out (created with mode 0600; an existing file is never \
            overwritten) or, without --out, to standard output. --public-out writes the public key \
            (PEM or JWK, mode 0644).

            shared-key makes the P-256 key every device of a Ditto SharedKey identity holds, in the \
            form Ditto documents (PKCS#8 DER in base64 on one line, what `openssl genpkey -algorithm \
            ec -pkeyopt ec_paramgen_curve:P-256 | openssl pkcs8 -topk8 -nocrypt -outform der | \
            base64 -w 0` prints); --format pem writes it as PEM.

            Examples:
              tokentool keygen ec --out issuer.key --public-out issuer.pub
              tokentool keygen ec --curve P-384 --format jwk --kid k1 --out issuer.jwk
              tokentool keygen rsa --bits 3072 --out rsa.key
              tokentool keygen ed25519 --format jwk
              tokentool keygen hmac --alg HS512 --out hs512.bin
              tokentool keygen shared-key --out ditto-shared.key
            """)

    enum KeyKind: String, ExpressibleByArgument, CaseIterable {
        case rsa, ec, ed25519, hmac
        case sharedKey = "shared-key"
    }
    enum Format: String, ExpressibleByArgument, CaseIterable { case pem, jwk, raw, base64 }

    @Argument(help: "Key type: rsa, ec, ed25519, hmac or shared-key.")
    var type: KeyKind

    @Option(help: "RSA modulus size in bits (2048 to 16384).")
    var bits: Int = 2048

    @Option(help: "EC curve: P-256, P-384 or P-521.")
    var curve: String = "P-256"

    @Option(help: "HMAC algorithm (sets the secret length): HS256, HS384 or HS512.")
    var alg: JWTAlgorithm = .hs256

    @Option(help: "Key ID to record in a JWK.")
    var kid: String?

    @Option(help: "Output format: pem (PKCS#8), jwk, raw (HMAC secrets only) or base64 (PKCS#8 DER, shared keys only). Default: raw for hmac, base64 for shared-key, pem for the others.")
    var format: Format?

    @Option(help: "File for the private key or secret (mode 0600, never overwritten).")
    var out: String?

    @Option(help: "File for the public key (not for hmac).")
    var publicOut: String?

    func run() throws {
        let spec: JWTKey.Spec
        switch type {
        case .rsa: spec = .rsa(bits: bits)
        case .ec:
            guard let c = ECCurve(rawValue: curve) else { throw CLIExit.usage("unknown curve \(curve); use P-256, P-384 or P-521") }
            spec = .ec(c)
        case .ed25519: spec = .ed25519
        case .hmac: spec = .hmac(alg)
        case .sharedKey:
            guard curve == "P-256" else { throw CLIExit.usage("a Ditto shared key is P-256; --curve does not apply") }
            spec = .ec(.p256)
        }
        // The format that fits the key type unless one is asked for: HMAC secrets have no PEM form.
        let format = self.format ?? (type == .hmac ? .raw : type == .sharedKey ? .base64 : .pem)
        if format == .base64, type != .sharedKey { throw CLIExit.usage("--format base64 is for shared-key only") }
        if type == .sharedKey, format != .base64, format != .pem { throw CLIExit.usage("a shared key is written as base64 (Ditto's form) or pem") }
        if format == .raw, type != .hmac { throw CLIExit.usage("--format raw is for hmac secrets only") }
        if format == .pem, type == .hmac { throw CLIExit.usage("HMAC secrets have no PEM form; use --format jwk or raw") }
        if format == .raw, out == nil, isatty(STDOUT_FILENO) != 0 {
            throw CLIExit.usage("a raw secret is binary: write it to a file with --out FILE, or use --format jwk")
        }
        if publicOut != nil, type == .hmac { throw CLIExit.usage("HMAC secrets have no public half") }
        let key = try JWTKey.generate(spec, kid: kid)
        let privateBytes: [UInt8]
        switch format {
        case .pem: privateBytes = Array(try key.privatePEM().utf8)
        case .base64:
            // The PEM's body is the PKCS#8 DER in base64: joined on one line, it is Ditto's form.
            let body = try key.privatePEM().split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
            privateBytes = Array((body + "\n").utf8)
        case .jwk: privateBytes = Array((try key.jwkText(includePrivate: true) + "\n").utf8)
        case .raw:
            guard case .string(let k)? = try key.jwk(includePrivate: true)["k"], let secret = Base64URL.decode(k) else {
                throw CLIExit.usage("cannot export the secret")
            }
            privateBytes = secret
        }
        let publicFile = try publicOut.map { path in
            SecureFile.NewFile(path: path, contents: Array((format == .jwk ? try key.publicKey.jwkText() + "\n" : try key.publicPEM()).utf8), mode: 0o644)
        }
        // Both halves or neither: a private key whose public half could not be written goes again.
        if let out {
            try Output.writeAllNew([SecureFile.NewFile(path: out, contents: privateBytes, mode: 0o600)] + (publicFile.map { [$0] } ?? []))
        } else {
            Output.raw(privateBytes)
            if let publicFile { try Output.writeAllNew([publicFile]) }
        }
        if let out { printError("wrote \(key.isPrivate ? "private " : "")\(key.type) key to \(out) (mode 0600)") }
        if let publicOut { printError("wrote public key to \(publicOut); thumbprint \(try key.thumbprint())") }
    }
}
