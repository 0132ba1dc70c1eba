import ArgumentParser
import Foundation
import TokenKit

struct JWKCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "jwk",
        abstract: "Convert keys between PEM/DER and JWK, and print RFC 7638 thumbprints.",
        discussion: """
            A PEM or DER key is printed as a JWK; a JWK is printed as PEM. Public members only unless \
            --private is given. Every key's RFC 7638 thumbprint (SHA-256) is printed to standard \
            error, or alone to standard output with --thumbprint.

            Examples:
              tokentool jwk issuer.pub                     # PEM → JWK
              tokentool jwk --kid k1 --alg ES256 issuer.pub
              tokentool jwk issuer.jwk                     # JWK → PEM
              tokentool jwk --thumbprint issuer.pub
            """)

    @Argument(help: "Key file: PEM, DER, JWK or JWKS; - for standard input.")
    var file: String

    @Flag(help: "Include private members (or print the private PEM).")
    var `private` = false

    @Flag(help: "Print only the thumbprint(s).")
    var thumbprint = false

    @Option(help: "kid to put in the JWK.")
    var kid: String?

    @Option(help: "alg to bind the key to (and put in the JWK).")
    var alg: JWTAlgorithm?

    @Flag(help: "Read a private key or secret file even if group or others can read it.")
    var allowInsecureKeyFile = false

    func run() throws {
        let keys = try Input.keys(path: file, algorithms: alg.map { [$0] }, kid: kid, allowInsecure: allowInsecureKeyFile)
        let bytes = try Input.read(file)
        let isJSON = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines).hasPrefix("{")
        for key in keys {
            if thumbprint {
                print(try key.thumbprint())
                continue
            }
            if isJSON {
                print(`private` ? try key.privatePEM() : try key.publicKey.publicPEM(), terminator: "")
            } else {
                print(JSONValue.object(try key.jwk(includePrivate: `private`)).prettyText)
            }
            printError("thumbprint (RFC 7638, SHA-256): \(try key.thumbprint())")
        }
    }
}
