import ArgumentParser
import Foundation
import TokenServer

struct WebhookCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "webhook",
        abstract: "Tools for the authentication webhook (Ditto's signed calls).",
        subcommands: [WebhookSign.self])
}

struct WebhookSign: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sign",
        abstract: "Print the ditto-signature header Ditto would send with a body.",
        discussion: """
            The value is t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">, keyed by the \
            base64-decoded shared secret: what `tokentool serve` checks when webhook.signature is \
            configured. The body is signed byte for byte, so send exactly the bytes signed.

            Examples:
              tokentool webhook sign --secret-file s.secret --body-file call.json
              printf '%s' "$BODY" | tokentool webhook sign --secret-file s.secret
              SIG=$(tokentool webhook sign --secret-file s.secret --body-file call.json)
              curl -H "ditto-signature: $SIG" --data-binary @call.json $BASE/v1/auth
            """)

    @Option(help: "File holding the shared secret in base64, as Ditto shows it (mode 0600).")
    var secretFile: String

    @Option(help: "The request body to sign; - (the default) for standard input.")
    var bodyFile: String = "-"

    @Option(help: "The time to sign at, in unix seconds (default now).")
    var time: Int?

    @Flag(help: "Read the secret file even if group or others can read it.")
    var allowInsecureKeyFile = false

    func run() throws {
        try Input.checkPrivate(secretFile, allowInsecure: allowInsecureKeyFile)
        let text = String(decoding: try Input.read(secretFile), as: UTF8.self)
        guard let secret = DittoWebhookSignature.secret(base64: text), secret.count >= 16 else {
            throw CLIExit.usage("\(secretFile) must hold a shared secret in base64 (16 bytes or more once decoded)")
        }
        if let time, time < 0 { throw ValidationError("--time must be a unix time in seconds") }
        let body = try Input.read(bodyFile)
        print(DittoWebhookSignature.header(for: body, secret: secret, time: time ?? Int(Date().timeIntervalSince1970)))
    }
}
