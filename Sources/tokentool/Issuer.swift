import ArgumentParser
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import TokenKit
import TokenServer

struct IssuerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "issuer",
        abstract: "Manage the signing keys of tokentool serve's token issuer (token exchange).",
        discussion: """
            The keys live in one directory that every server instance reads (by default \
            tokentool-state/issuer): keys.json and one PEM file per key (mode 0600). A current key \
            signs; the next key is already published, so verifiers have it cached when a \
            rotation makes it current; a retired key stays published until the last token it \
            signed has expired. Servers re-read the directory every issuer.reloadSeconds.

            Examples:
              tokentool issuer init --dir tokentool-state/issuer
              tokentool issuer rotate --dir tokentool-state/issuer --retire-after 300
              tokentool issuer list --dir tokentool-state/issuer
            """,
        subcommands: [IssuerInit.self, IssuerRotate.self, IssuerList.self])
}

struct IssuerInit: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "init", abstract: "Make a key directory with a current and a next ES256 key.")

    @Option(help: "The key directory (created, mode 0700).")
    var dir: String

    func run() throws {
        try IssuerKeyRing.initialize(directory: dir)
        try IssuerList.show(dir)
    }
}

struct IssuerRotate: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rotate",
        abstract: "Rotate: the next key signs, the current one retires, a new next key is made.",
        discussion: """
            --retire-after is how long the retired key stays published: at least the longest \
            lifetime of a token it signed (issuer.lifetimeSeconds) plus issuer.reloadSeconds, \
            since each instance goes on signing with it until its next reload of the keys. \
            Retired keys past their time are removed. Run it where the key directory lives, \
            e.g. from a daily timer.
            """)

    @Option(help: "The key directory.")
    var dir: String

    @Option(help: "Seconds the retired key stays published (at least the tokens' lifetime plus issuer.reloadSeconds).")
    var retireAfter: Double = 3600

    func validate() throws {
        guard retireAfter >= 0, retireAfter.isFinite else { throw ValidationError("--retire-after must be 0 or more seconds") }
    }

    func run() throws {
        try IssuerKeyRing.rotate(directory: dir, retiredKeyLifetime: retireAfter)
        try IssuerList.show(dir)
    }
}

struct IssuerList: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List the keys and their state.")

    @Option(help: "The key directory.")
    var dir: String

    func run() throws { try IssuerList.show(dir) }

    static func show(_ dir: String) throws {
        for entry in try IssuerKeyRing.entries(directory: dir) {
            let until = entry.publishUntil.map { " (published until \(ISO8601Text.string($0)))" } ?? ""
            print("\(entry.kid)  \(entry.state.rawValue)\(until)")
        }
    }
}

struct Exchange: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Exchange a token for one signed by a tokentool serve issuer (RFC 8693).",
        discussion: """
            Sends the token (the subject token) to URL/v1/token with the provider that verifies \
            it and the audience wanted, and prints the issued token. Exit status: 0 issued, 1 \
            refused (the server's error is printed), 2 usage or connection error.

            Example:
              tokentool exchange --url http://127.0.0.1:8080 --provider dev \\
                  --audience partner-api user.jwt
            """)

    @Option(help: "The tokentool serve base URL.")
    var url: String

    @Option(help: "The configured provider that verifies the subject token.")
    var provider: String

    @Option(help: "The audience of the new token (one the issuer allows).")
    var audience: String

    @Flag(help: "Print the whole JSON answer instead of the token.")
    var json = false

    @Option(help: "Seconds allowed for the whole exchange: connecting, the answer and all of its body.")
    var timeout: Double = 20

    @Argument(help: "The subject token, a file holding it, or - for standard input.")
    var token: String?

    func validate() throws {
        guard timeout > 0, timeout <= 300 else { throw ValidationError("--timeout must be more than 0 and at most 300 seconds") }
    }

    func run() async throws {
        let subject = try Input.token(token)
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        func encode(_ value: String) -> String { value.addingPercentEncoding(withAllowedCharacters: allowed) ?? "" }
        let fields = [
            ("grant_type", "urn:ietf:params:oauth:grant-type:token-exchange"), ("subject_token", subject),
            ("subject_token_type", "urn:ietf:params:oauth:token-type:jwt"), ("audience", audience), ("provider", provider),
        ]
        let base = url.hasSuffix("/") ? String(url.dropLast()) : url
        var request = HTTPClientRequest(url: base + "/v1/token")
        request.method = .POST
        request.headers.add(name: "content-type", value: "application/x-www-form-urlencoded")
        request.body = .bytes(ByteBuffer(string: fields.map { "\($0.0)=\(encode($0.1))" }.joined(separator: "&")))
        let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup)
        // The whole exchange within the limit: AsyncHTTPClient's deadline covers the answer's
        // head only, and a server that sent one byte of its body and then nothing held this
        // command past it, for good.
        let limit = Duration.milliseconds(Int64(timeout * 1000))
        let prepared = request
        let outcome: Result<(status: UInt, text: String), CLIExit> = await TimeLimit.race(
            limit, fallback: .failure(CLIExit.usage("the exchange with \(base) was cancelled"))
        ) {
            do {
                let response = try await client.execute(prepared, timeout: TimeAmount(limit))
                return .success((response.status.code, String(buffer: try await response.body.collect(upTo: 1 << 20))))
            } catch {
                return .failure(CLIExit.usage("cannot reach \(base): \(error)"))
            }
        } timedOut: {
            .failure(CLIExit.usage("\(base) did not answer in full within \(timeout.rounded() == timeout ? String(Int(timeout)) : String(timeout)) s"))
        }
        if case .success = outcome {
            try? await client.shutdown()
        } else {
            // Failed or out of time: the process ends now, and does not wait for the client to
            // close a connection on which a server may still be trickling its answer.
            Task { try? await client.shutdown() }
        }
        let (status, text) = try outcome.get()
        try Self.report(status: status, text: text, json: json)
    }

    /// Prints the issued token (or the whole answer), or refuses with the server's error.
    private static func report(status: UInt, text: String, json: Bool) throws {
        let answer = (try? JSONValue.parse(Array(text.utf8)))?.objectValue ?? [:]
        guard status == 200, let issued = answer["access_token"]?.stringValue else {
            let error = answer["error"]?.stringValue ?? "HTTP \(status)"
            throw CLIExit(code: 1, message: "REFUSED \(error): \(answer["error_description"]?.stringValue ?? text.prefix(200).description)")
        }
        print(json ? text : issued)
    }
}
