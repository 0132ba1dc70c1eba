import ArgumentParser
import Foundation
import Logging
import PDAKeys
import TokenKit

/// Options shared by every command that fetches an issuer's keys.
struct RemoteOptions: ParsableArguments {
    @Option(name: .customLong("ca-file"), help: "PEM file of the CA certificates that issuers' HTTPS certificates must chain to (private PKI). Default: the system's trust store.")
    var caFile: String?

    @Option(name: .customLong("allow-domain"), help: "PDA host suffix to accept instead of the HAT defaults (.hubat.net, .hubofallthings.net, .hat.direct); repeatable.")
    var allowDomain: [String] = []

    @Option(name: .customLong("resolve"), help: "HOST=ADDRESS: connect to ADDRESS for HOST (TLS still checks HOST); repeatable. For tests and split-horizon DNS.")
    var resolve: [String] = []

    @Option(name: .customLong("pda-port"), help: "Port of PDA /publickey requests.")
    var pdaPort: Int = 443

    @Flag(name: .customLong("allow-http-loopback"), help: "Allow plain http:// URLs to localhost/127.0.0.1/::1 (never to anything else).")
    var allowHTTPLoopback = false

    @Option(name: .customLong("timeout"), help: "Seconds allowed for each HTTP request.")
    var timeout: Double = 10

    func validate() throws {
        for entry in resolve where entry.split(separator: "=").count != 2 {
            throw ValidationError("--resolve takes HOST=ADDRESS, not \"\(entry)\"")
        }
        guard (1...65535).contains(pdaPort) else { throw ValidationError("--pda-port must be 1-65535") }
        guard timeout > 0, timeout <= 300 else { throw ValidationError("--timeout must be between 0 and 300 seconds") }
    }

    var allowList: IssuerAllowList {
        get throws {
            guard !allowDomain.isEmpty else { return .hat }
            do { return try IssuerAllowList(suffixes: allowDomain) } catch { throw CLIExit.usage(error.description) }
        }
    }

    /// A fetcher for these options; the caller shuts it down.
    func fetcher() throws -> HTTPKeyFetcher {
        var configuration = KeyFetchConfiguration()
        if let caFile { configuration.trustRoots = .pemFile(caFile) }
        for entry in resolve {
            let parts = entry.split(separator: "=", maxSplits: 1).map(String.init)
            configuration.hostOverrides[parts[0].lowercased()] = parts[1]
        }
        configuration.pdaPort = pdaPort
        configuration.allowPlainHTTPForLoopback = allowHTTPLoopback
        configuration.totalTimeout = .milliseconds(Int64(timeout * 1000))
        configuration.connectTimeout = min(configuration.connectTimeout, configuration.totalTimeout)
        do { return try HTTPKeyFetcher(configuration: configuration) } catch { throw CLIExit.usage(error.description) }
    }

    /// A store that logs nothing: every command reports a failed fetch itself (exit 2 and one
    /// message), and a one-shot process has no stale keys to warn about.
    func store(_ fetcher: HTTPKeyFetcher, clock: VerificationClock = .system) -> RemoteKeyStore {
        let logger = Logger(label: "tokentool") { _ in SwiftLogNoOpLogHandler() }
        return RemoteKeyStore(fetcher: fetcher, clock: clock, logger: logger)
    }
}

/// Runs `body` with a fetcher, shutting it down afterwards whatever happens.
func withFetcher<T>(_ options: RemoteOptions, _ body: (HTTPKeyFetcher) async throws -> T) async throws -> T {
    let fetcher = try options.fetcher()
    do {
        let result = try await body(fetcher)
        await fetcher.shutdown()
        return result
    } catch {
        await fetcher.shutdown()
        throw error
    }
}

struct FetchKey: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fetch-key",
        abstract: "Fetch an issuer's public keys: a HAT PDA's /publickey, a JWKS URL, or OpenID Connect discovery.",
        discussion: """
            The source is a PDA host name (fetched as https://HOST/publickey; the host must be under an \
            allowed domain), an https:// URL of a JWK Set, or, with --oidc, an issuer URL whose \
            /.well-known/openid-configuration names the JWK Set (its "issuer" must equal yours).

            Keys go to standard output (PEM by default, or one JWK Set with --format jwks); a line per \
            key with its kid, type, algorithms and RFC 7638 thumbprint goes to standard error. Only \
            HTTPS; no redirects are followed; bodies over 64 KiB are refused.

            Exit status: 0 keys fetched, 2 the keys could not be had (the message says why).

            Examples:
              tokentool fetch-key postman.hubat.net
              tokentool fetch-key --format jwks \\
                  https://tenant.eu.auth0.com/.well-known/jwks.json
              tokentool fetch-key --oidc https://accounts.google.com
              tokentool fetch-key --ca-file private-ca.pem \\
                  --allow-domain .pda.example.org alice.pda.example.org
            """)

    @Argument(help: "A PDA host name, or a JWKS https:// URL (with --oidc: the issuer URL).")
    var source: String

    @Flag(help: "Treat the argument as an OpenID Connect issuer and use discovery.")
    var oidc = false

    @Option(help: "Output format: pem or jwks.")
    var format: KeyFormat = .pem

    @OptionGroup var remote: RemoteOptions

    enum KeyFormat: String, ExpressibleByArgument, CaseIterable { case pem, jwks }

    func run() async throws {
        let source = try remoteSource(source, oidc: oidc, allowList: try remote.allowList)
        let set: RemoteKeySet = try await withFetcher(remote) { fetcher in
            do throws(KeySourceError) { return try await remote.store(fetcher).keys(for: source) } catch { throw CLIExit.usage(error.description) }
        }
        for line in set.skipped { printError("tokentool: skipped \(line)") }
        for key in set.keys {
            let algorithms = key.algorithms.map(\.rawValue).sorted().joined(separator: ",")
            printError("\(key.kid.map { "kid=\($0) " } ?? "")\(key.type) \(algorithms) thumbprint=\(try key.thumbprint())")
        }
        switch format {
        case .pem:
            for key in set.keys { print(try key.publicPEM(), terminator: "") }
        case .jwks:
            print(try JWKSet(keys: set.keys).jsonText())
        }
    }
}

/// The key source an argument names: a PDA host (checked against the allow-list), a JWKS URL, or
/// an OIDC issuer.
func remoteSource(_ argument: String, oidc: Bool, allowList: IssuerAllowList) throws -> KeySource {
    if oidc { return .oidc(issuer: argument) }
    if argument.contains("://") { return .jwks(url: argument) }
    do { return .pda(host: try allowList.host(forIssuer: argument)) } catch { throw CLIExit.usage(error.description) }
}
