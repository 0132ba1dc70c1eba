import ArgumentParser
import Foundation
import TokenKit

struct Sign: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Sign a JWT with a private key or HMAC secret and print it.",
        discussion: """
            Claims come from --claims (a JSON object) or --claims-file, and from the flags, which win. \
            "iat" is set to now and "exp" to now + --expires-in (default 3600 s) unless given.

            Examples:
              tokentool sign --key issuer.key --iss https://issuer.example \\
                  --sub user-1 --aud my-api
              tokentool sign --key rsa.key --alg PS256 --claims \\
                  '{"sub":"u1","role":"admin"}'
              tokentool sign --secret-file hs256.bin --sub svc --expires-in 300
            """)

    @Option(name: .long, help: "Private key file: PEM, DER or JWK (with private members).")
    var key: String?

    @Option(name: .long, help: "HMAC secret file.")
    var secretFile: String?

    @Option(help: "How the secret file is encoded: raw or base64url.")
    var secretEncoding: SecretEncoding = .raw

    @Option(help: "Algorithm. Default: the key type's usual one (RS256, ES256/384/512, EdDSA, HS256).")
    var alg: JWTAlgorithm?

    @Option(help: "Key ID to put in the header.")
    var kid: String?

    @Option(help: "Claims as a JSON object.")
    var claims: String?

    @Option(help: "File holding the claims as a JSON object.")
    var claimsFile: String?

    @Option(help: "Issuer (\"iss\").")
    var iss: String?

    @Option(help: "Subject (\"sub\").")
    var sub: String?

    @Option(help: "Audience (\"aud\", repeatable).")
    var aud: [String] = []

    @Option(help: "JWT ID (\"jti\"). Use --jti random for a random UUID.")
    var jti: String?

    // Unconditional: a negative value (an already expired token, for tests) is a value, not an option.
    @Option(parsing: .unconditional, help: "Seconds from now until \"exp\"; negative for a token that has already expired (ignored if the claims set exp).")
    var expiresIn: Int = 3600

    @Flag(help: "Do not add \"iat\".")
    var noIat = false

    @Flag(help: "Read a private key or secret file even if group or others can read it.")
    var allowInsecureKeyFile = false

    func validate() throws {
        if (key == nil) == (secretFile == nil) { throw ValidationError("give exactly one of --key FILE or --secret-file FILE") }
        if claims != nil && claimsFile != nil { throw ValidationError("give --claims or --claims-file, not both") }
        // Further than a NumericDate reaches, "exp" could not be verified (and now + it overflowed).
        let span = Int(RegisteredClaims.maximumDate)
        guard (-span...span).contains(expiresIn) else { throw ValidationError("--expires-in must be from -\(span) to \(span) seconds") }
    }

    func run() throws {
        var payload: [String: JSONValue] = [:]
        if let source = try claims ?? claimsFile.map({ String(decoding: try Input.read($0), as: UTF8.self) }) {
            guard case .object(let members) = try JSONValue.parse(source) else { throw CLIExit.usage("the claims must be a JSON object") }
            payload = members
        }
        let now = Int(Date().timeIntervalSince1970)
        if let iss { payload["iss"] = .string(iss) }
        if let sub { payload["sub"] = .string(sub) }
        if aud.count == 1 { payload["aud"] = .string(aud[0]) } else if aud.count > 1 { payload["aud"] = .array(aud.map { .string($0) }) }
        if let jti { payload["jti"] = .string(jti == "random" ? UUID().uuidString.lowercased() : jti) }
        if !noIat, payload["iat"] == nil { payload["iat"] = .integer(now) }
        if payload["exp"] == nil { payload["exp"] = .integer(now + expiresIn) }

        let signingKey: JWTKey
        if let key {
            guard let first = try Input.keys(path: key, algorithms: alg.map { [$0] }, kid: kid, allowInsecure: allowInsecureKeyFile).first else {
                throw CLIExit.usage("\(key) holds no key")
            }
            signingKey = first
        } else if let secretFile {
            let secret = try Input.secret(path: secretFile, encoding: secretEncoding, allowInsecure: allowInsecureKeyFile)
            signingKey = try JWTKey.hmac(secret: secret, algorithms: [alg ?? .hs256], kid: kid)
        } else {
            throw CLIExit.usage("no key")
        }
        let signer = try JWTSigner(key: signingKey, algorithm: alg)
        print(try signer.sign(claims: payload))
    }
}
