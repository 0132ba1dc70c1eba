import ArgumentParser
import Foundation
import PDAKeys
import PeerCA
import TokenKit

struct Verify: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Verify a token's signature and claims.",
        discussion: """
            The key decides the algorithm: an RSA key accepts RS256 unless --alg says otherwise (e.g. \
            --alg PS256), an EC key its curve's ES algorithm, an Ed25519 key EdDSA, an HMAC secret \
            HS256. The token's "alg" must be exactly one of those.

            Claims: "exp" is required (--no-exp to allow tokens without it) and checked with --leeway; \
            "nbf" and "iat" are checked when present; --iss and --aud make those claims required. A \
            token carrying "aud" is refused unless --aud names one of its audiences (or --any-aud).

            Remote keys: --pda verifies a HAT PDA application token with the key of the PDA named by \
            its "iss" (a host under an allowed domain; RS256; "iat" at most 30 days old unless \
            --max-age says otherwise; --application restricts "application"). --jwks URL and --oidc \
            ISSUER fetch the issuer's JWK Set (with --oidc, "iss" must equal ISSUER). An unknown "kid" \
            causes one refetch. --ca-file trusts a private CA for the HTTPS requests.

            Identity: a valid token's identity is derived as tokentool serve and tokentool ca issue \
            derive it (account UID, provider, providerUID, issuer, SPIFFE ID, profile, factors from \
            "amr" with "auth_time", "acr", times): an "identity:" line, and "identity" beside \
            "header" and "payload" with --json. The account UID is the "sub" (--account-claim) after \
            --account-prefix — none unless given, so the bare sub (tokentool serve's providers put \
            "<provider>:" before it); the provider is --provider (default token); the SPIFFE ID is \
            spiffe://tokentool/<issuer>/<sub> (trust domain "tokentool", as the ca commands use \
            without a ca.json). --require-factor, --acr and --max-sign-in-age refuse a sign-in that \
            does not meet them (exit 1: factor_required, acr_not_accepted, sign_in_too_old). \
            Without any of these options a token whose identity cannot be derived (no "iss", "sub" \
            or "exp") is still VALID, shown without one; with any of them it is refused (exit 1, \
            policy_violation or token_expired).

            Exit status: 0 valid, 1 invalid (the message names the rule that failed), 2 usage or key \
            error (including keys that could not be fetched).

            Examples:
              tokentool verify --key issuer.pub token.jwt
              tokentool verify --key jwks.json --iss https://issuer.example \\
                  --aud my-api token.jwt
              tokentool verify --secret-file hs256.bin --alg HS256 \\
                  --max-age 2592000 token.jwt
              tokentool verify --key issuer.pub --json - < token.jwt
              tokentool verify --pda --application my-app hat-token.jwt
              tokentool verify --oidc https://tenant.eu.auth0.com/ --aud my-api token.jwt
              tokentool verify --jwks https://idp.example/jwks.json \\
                  --ca-file private-ca.pem token.jwt
              tokentool verify --oidc https://tenant.eu.auth0.com/ --aud my-api \\
                  --require-factor mfa --max-sign-in-age 900 \\
                  --provider auth0 --account-prefix auth0: --json token.jwt
            """)

    @Argument(help: "The token, a file holding it, or - for standard input (the default).")
    var token: String?

    @Flag(help: "Print one JSON object with the verdict, header and claims (or the error code).")
    var json = false

    @OptionGroup var options: VerificationOptions

    func run() async throws {
        let text = try Input.token(token)
        let (outcome, hat) = try await options.verify(text, json: json)
        var identity: PeerIdentity?
        if case .success(let verified) = outcome {
            do throws(PeerCAError) {
                identity = try options.identity.rules().identity(for: verified, now: options.now)
            } catch {
                // Without identity options, a token that verifies stays VALID (shown without an identity).
                if options.identity.isGiven { try refuse(code: error.code.rawValue, message: error.message) }
            }
        }
        try report(outcome, hat: hat, identity: identity)
    }

    /// Prints the verdict; throws the exit status for an invalid token.
    func report(_ result: Result<VerifiedToken, TokenError>, hat: HATIdentity? = nil, identity: PeerIdentity? = nil) throws {
        switch result {
        case .success(let verified):
            if json {
                var object: [String: JSONValue] = [
                    "valid": .bool(true), "header": .object(verified.header.members), "payload": .object(verified.payload),
                ]
                if let identity { object["identity"] = identity.jsonValue }
                Output.json(.object(object))
            } else {
                print("VALID \(verified.header.algorithm)\(verified.key.kid.map { " kid=\($0)" } ?? "") (engine: \(options.engine.rawValue))")
                for line in verified.claims.summary { print("  " + line) }
                if let hat {
                    print("  HAT PDA: \(hat.pdaHost)")
                    if let application = hat.application { print("  application: \(application) \(hat.applicationVersion ?? "")") }
                }
                if let identity { print("  identity: " + Self.summary(identity)) }
            }
        case .failure(let error):
            try refuse(code: error.code.rawValue, message: error.message)
        }
    }

    /// Reports a refusal (`INVALID code: message`, or the JSON error object) and exits 1.
    func refuse(code: String, message: String) throws -> Never {
        if json {
            Output.json(.object(["valid": .bool(false), "error": .object(["code": .string(code), "message": .string(message)])]))
            throw CLIExit(code: 1, message: "")
        }
        throw CLIExit(code: 1, message: "INVALID \(code): \(message)")
    }

    /// `auth0:user-1 (provider auth0; factors mfa, pwd; acr …)`: the identity in one line.
    static func summary(_ identity: PeerIdentity) -> String {
        var parts = ["provider \(identity.provider)", "factors \(identity.factors.map(\.method).joined(separator: ", "))"]
        if let acr = identity.authenticationContext { parts.append("acr \(acr)") }
        return "\(identity.accountUID) (\(parts.joined(separator: "; ")))"
    }
}

/// How a verified token becomes an identity, and what its sign-in must show: shared by `verify`
/// and `ca issue` (through ``VerificationOptions``), applied over the same ``IssuancePolicy`` the
/// server's providers use.
struct IdentityOptions: ParsableArguments {
    @Option(
        name: .customLong("require-factor"),
        help: ArgumentHelp(
            "A factor (an \"amr\" value such as mfa, otp, hwk) the sign-in must show; repeatable, every one is required (else factor_required).",
            valueName: "value"))
    var requireFactor: [String] = []

    @Option(
        name: .customLong("acr"),
        help: ArgumentHelp(
            "An accepted authentication context class (\"acr\"); repeatable. Any other, or none, is refused (acr_not_accepted).",
            valueName: "value"))
    var acr: [String] = []

    @Option(
        help: ArgumentHelp(
            "The latest sign-in (\"auth_time\", else \"iat\") must be at most this many seconds old (else sign_in_too_old).",
            valueName: "seconds"))
    var maxSignInAge: Double?

    @Option(
        help: ArgumentHelp(
            "Provider name recorded in the identity. Default: token (ca issue: the provider in the CA's ca.json).",
            valueName: "name"))
    var provider: String?

    @Option(help: ArgumentHelp("Claim holding the account's user ID. Default: sub.", valueName: "claim"))
    var accountClaim: String?

    @Option(
        help: ArgumentHelp(
            "Put before the account claim's value to make the account UID (the certificate's CN), e.g. \"auth0:\". Default: none, so verify shows the bare sub (tokentool serve's providers use <provider>:).",
            valueName: "prefix"))
    var accountPrefix: String?

    /// The trust domain of identities `verify` derives (`spiffe://tokentool/<issuer>/<sub>`): the
    /// app ID the `ca` commands fall back to without a `ca.json`.
    static let verifyAppID = "tokentool"

    func validate() throws {
        if let maxSignInAge, !(maxSignInAge > 0 && maxSignInAge.isFinite) {
            throw ValidationError("--max-sign-in-age must be a number of seconds greater than 0")
        }
        if requireFactor.contains(where: \.isEmpty) { throw ValidationError("--require-factor needs a factor name (an amr value such as mfa)") }
        if acr.contains(where: \.isEmpty) { throw ValidationError("--acr needs an acr value") }
        for (name, value) in [("--provider", provider), ("--account-claim", accountClaim), ("--account-prefix", accountPrefix)] {
            if value?.isEmpty == true { throw ValidationError("\(name) must not be empty") }
        }
    }

    /// Whether any identity or factor option was given (then a token without an identity is refused).
    var isGiven: Bool {
        !requireFactor.isEmpty || !acr.isEmpty || maxSignInAge != nil || provider != nil || accountClaim != nil || accountPrefix != nil
    }

    /// `base` with the options that were given applied; the others keep `base`'s values.
    func applied(to base: IssuancePolicy) -> IssuancePolicy {
        var policy = base
        if let provider { policy.provider = provider }
        if let accountClaim { policy.accountClaim = accountClaim }
        if let accountPrefix { policy.accountPrefix = accountPrefix }
        if !requireFactor.isEmpty { policy.factorPolicy.requiredFactors = Set(requireFactor) }
        if !acr.isEmpty { policy.factorPolicy.acceptedContexts = Set(acr) }
        if let maxSignInAge { policy.factorPolicy.maximumSignInAge = maxSignInAge }
        return policy
    }

    /// The rules `verify` derives identities with: trust domain `tokentool`, provider `token`,
    /// account `sub` without a prefix, then the options.
    func rules() throws(PeerCAError) -> IssuancePolicy {
        applied(to: try IssuancePolicy(appID: Self.verifyAppID, provider: CASettings.defaultProvider))
    }
}

/// The keys and claims policy a token is verified with: shared by `verify` and `ca issue`.
struct VerificationOptions: ParsableArguments {
    @Option(name: .long, help: "Key file: PEM (public/private key or certificate), DER, JWK or JWKS.")
    var key: String?

    @Option(name: .long, help: "HMAC secret file (its exact bytes, see --secret-encoding).")
    var secretFile: String?

    @Flag(help: "HAT PDA token: fetch the key from https://<iss>/publickey (iss must be under an allowed domain).")
    var pda = false

    @Option(help: "Fetch the keys from this JWK Set URL (https).")
    var jwks: String?

    @Option(help: "Fetch the keys by OpenID Connect discovery from this issuer URL (iss must equal it).")
    var oidc: String?

    @Option(help: "With --pda: accepted \"application\" (repeatable; makes it required).")
    var application: [String] = []

    @OptionGroup(title: "Remote keys") var remote: RemoteOptions

    @Option(help: "How the secret file is encoded: raw or base64url.")
    var secretEncoding: SecretEncoding = .raw

    @Option(name: .long, help: "Algorithm the key accepts (repeatable). Default: the key type's usual algorithm.")
    var alg: [JWTAlgorithm] = []

    @Option(help: "Key ID to give a PEM/DER key or secret (tokens naming another kid are refused).")
    var kid: String?

    @Option(help: "Accepted issuer (repeatable); makes \"iss\" required.")
    var iss: [String] = []

    @Option(help: "Accepted audience (repeatable); makes \"aud\" required.")
    var aud: [String] = []

    @Flag(help: "Accept any \"aud\" when no --aud is given.")
    var anyAud = false

    @Option(help: "Clock-skew allowance in seconds.")
    var leeway: Double = 60

    @Option(help: "Refuse tokens whose \"iat\" is older than this many seconds (makes \"iat\" required).")
    var maxAge: Double?

    @Option(help: "Claim that must be present (repeatable).")
    var require: [String] = []

    @Option(help: "Required header \"typ\", e.g. JWT.")
    var typ: String?

    @Flag(help: "Accept tokens without \"exp\".")
    var noExp = false

    @Option(help: "Verify as of this Unix time instead of now.")
    var at: Double?

    @Option(help: "Signature engine: native (OpenSSL) or libjwt.")
    var engine: JWTVerifier.Engine = .native

    @Flag(help: "Read a private key or secret file even if group or others can read it.")
    var allowInsecureKeyFile = false

    @OptionGroup(title: "Identity and sign-in factors") var identity: IdentityOptions

    /// The time tokens are checked at: --at, else now.
    var now: Date { Date(timeIntervalSince1970: at ?? Date().timeIntervalSince1970) }

    /// How many of --key, --secret-file, --pda, --jwks and --oidc were given.
    var keySources: Int { [key != nil, secretFile != nil, pda, jwks != nil, oidc != nil].filter { $0 }.count }

    func validate() throws {
        let sources = keySources
        // `ca issue --manual` verifies no token (this group cannot see the command's own flag; it
        // is the only command with a --manual, and it refuses key options then).
        if sources == 0, CommandLine.arguments.contains("--manual") { return }
        if sources != 1 {
            throw ValidationError("give exactly one of --key FILE, --secret-file FILE, --pda, --jwks URL or --oidc ISSUER")
        }
        if !application.isEmpty && !pda { throw ValidationError("--application goes with --pda") }
        // NaN would compare false with every time; infinity would accept every one.
        guard leeway.isFinite, leeway >= 0 else { throw ValidationError("--leeway must be a number of seconds, 0 or more") }
        if let maxAge, !(maxAge.isFinite && maxAge >= 0) { throw ValidationError("--max-age must be a number of seconds, 0 or more") }
        if let at, !RegisteredClaims.dates.contains(at) {
            throw ValidationError("--at must be a Unix time from 0 to \(Int(RegisteredClaims.maximumDate))")
        }
    }

    var policy: ClaimsPolicy {
        ClaimsPolicy(
            requireExpiration: !noExp, leeway: leeway, maxAge: maxAge, issuers: Set(iss), audiences: Set(aud),
            ignoresAudience: anyAud, requiredClaims: Set(require), expectedType: typ)
    }

    /// The verifier these options describe. Key files are read here (exit 2 when they cannot be).
    func description() throws -> TokenVerifierDescription {
        let keys: TokenVerifierDescription.Keys
        if pda {
            keys = .pda(allowList: try remote.allowList, applications: application.isEmpty ? nil : Set(application))
        } else if let oidc {
            keys = .oidc(issuer: oidc)
        } else if let jwks {
            keys = .jwks(url: jwks)
        } else if let key {
            keys = .local(try Input.keys(path: key, algorithms: alg.isEmpty ? nil : Set(alg), kid: kid, allowInsecure: allowInsecureKeyFile))
        } else {
            let secret = try Input.secret(path: secretFile ?? "", encoding: secretEncoding, allowInsecure: allowInsecureKeyFile)
            keys = .local([try JWTKey.hmac(secret: secret, algorithms: alg.isEmpty ? [.hs256] : Set(alg), kid: kid)])
        }
        return TokenVerifierDescription(keys: keys, policy: policy, engine: engine, clock: at.map { .fixed($0) } ?? .system)
    }

    /// Verifies `text` with the keys and policy these options name. Throws a `CLIExit` (status 2)
    /// when keys cannot be had; an invalid token is the `.failure` of the result.
    func verify(_ text: String, json: Bool = false) async throws -> (Result<VerifiedToken, TokenError>, HATIdentity?) {
        let description = try description()
        let outcome: Result<TokenSourceVerifier.Verified, RemoteVerificationError>
        if description.keys.isRemote {
            outcome = try await withFetcher(remote) { fetcher in
                let verifier = try description.makeVerifier(store: remote.store(fetcher, clock: description.clock))
                return await Self.result(verifier, text)
            }
        } else {
            outcome = await Self.result(try description.makeVerifier(), text)
        }
        switch outcome {
        case .success(let verified): return (.success(verified.token), verified.hat)
        case .failure(.token(let error)):
            guard case .local(let keys) = description.keys else { return (.failure(error), nil) }
            return (.failure(Self.explained(error, token: text, keys: keys)), nil)
        case .failure(.keys(let error)):
            if json {
                Output.json(.object(["valid": .bool(false), "error": .object(["code": .string(error.code.rawValue), "message": .string(error.message)])]))
            }
            throw CLIExit(code: 2, message: "tokentool: cannot get the issuer's keys: \(error)")
        }
    }

    static func result(_ verifier: TokenSourceVerifier, _ text: String) async -> Result<TokenSourceVerifier.Verified, RemoteVerificationError> {
        do throws(RemoteVerificationError) { return .success(try await verifier.verify(text)) } catch { return .failure(error) }
    }

    /// An `algorithm_not_allowed` refusal with what would change it: `--alg` when a key could
    /// accept the token's algorithm, else the kind of key that algorithm needs.
    static func explained(_ error: TokenError, token: String, keys: [JWTKey]) -> TokenError {
        guard error.code == .algorithmNotAllowed, let unverified = try? UnverifiedToken(token),
            let name = unverified.header["alg"]?.stringValue, let algorithm = JWTAlgorithm(rawValue: name)
        else { return error }
        var message = error.message
        let accepted = Set(keys.flatMap(\.algorithms)).map(\.rawValue).sorted().joined(separator: ", ")
        if !message.contains("accept") { message += " (\(keys.count == 1 ? "the key accepts" : "the keys accept") \(accepted))" }
        var weak: String?
        let fitting = keys.filter { key in
            do throws(TokenError) {
                _ = try key.with(algorithms: [algorithm])
                return true
            } catch {
                if error.code == .weakKey { weak = error.message }
                return false
            }
        }
        if !fitting.isEmpty {
            message += "; if the issuer does sign with \(algorithm), pass --alg \(algorithm) (the key then accepts \(algorithm) only; repeat --alg for more)"
        } else if let weak {
            message += "; --alg \(algorithm) would not help: \(weak)"
        } else {
            let types = Set(keys.map { "\($0.type)" }).sorted().joined(separator: ", ")
            let article = algorithm.family == .rsaPSS ? "a" : "an"  // a PS256, an RS256/ES256/HS256/EdDSA
            message += "; \(article) \(algorithm) token needs \(needed(algorithm)), and the key given is \(types): is it the issuer's key? (--alg cannot change a key's type)"
        }
        return TokenError(error.code, message)
    }

    /// The kind of key an algorithm needs, in words.
    static func needed(_ algorithm: JWTAlgorithm) -> String {
        switch algorithm.family {
        case .hmac: "an HMAC secret (--secret-file)"
        case .rsa, .rsaPSS: "an RSA key"
        case .ecdsa: "an EC \(ECCurve.allCases.first { $0.algorithm == algorithm }?.rawValue ?? "") key"
        case .eddsa: "an Ed25519 key"
        }
    }
}
