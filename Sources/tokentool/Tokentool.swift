import ArgumentParser
import CStandardStreams
import Foundation
import PDAKeys
import PeerCA
import TokenKit

@main
struct Tokentool: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tokentool",
        abstract: "Verify, sign and inspect JSON Web Tokens; fetch issuers' keys; issue and check peer certificates.",
        discussion: """
            tokentool is the command-line face of TokenKit. Every verification is strict: the key fixes \
            the algorithm (a token's "alg" must equal it exactly; "none" is never accepted), an unknown \
            "kid" is an error, "exp" is required unless you say otherwise, and every failure names the \
            rule that failed.

            Exit status: 0 success (for verify: the token is valid), 1 the token is invalid, \
            2 usage error or unusable key/input.

            Try it:
              tokentool demo
              tokentool keygen ec --out device.key --public-out device.pub
              tokentool sign --key device.key --sub user-1 --iss me \\
                  --expires-in 3600 > token.jwt
              tokentool verify --key device.pub --iss me token.jwt
            """,
        subcommands: [
            Decode.self, Verify.self, Sign.self, Keygen.self, JWKCommand.self, FetchKey.self, CACommand.self, CSRCommand.self, PeerCommand.self,
            Serve.self, WebhookCommand.self, IssuerCommand.self, Exchange.self, Demo.self,
        ]
    )

    static func main() async {
        unblockShutdownSignals()
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
            try Output.finish()
        } catch let exit as CLIExit {
            if !exit.message.isEmpty { printError(exit.message) }
            Foundation.exit(exit.code)
        } catch let error as TokenError {
            printError("tokentool: \(error)")
            Foundation.exit(2)
        } catch let error as PeerCAError {
            printError("tokentool: \(error)")
            Foundation.exit(2)
        } catch let error as KeySourceError {
            printError("tokentool: \(error)")
            Foundation.exit(2)
        } catch {
            // ArgumentParser's own errors: help and version exit 0, usage errors exit 2.
            let code = exitCode(for: error)
            if code == .validationFailure {
                printError(fullMessage(for: error))
                Foundation.exit(2)
            }
            exit(withError: error)
        }
    }
}

/// Ends the process with a status and a message for standard error.
struct CLIExit: Error {
    let code: Int32
    let message: String
    static func usage(_ message: String) -> CLIExit { CLIExit(code: 2, message: "tokentool: \(message)") }
}

/// A line to standard error; a failure to write it is ignored (FileHandle's write trapped on one:
/// `tokentool … 2>/dev/full`).
func printError(_ message: String) {
    tt_stderr_write(message + "\n")
}

/// A parent may start us with SIGTERM and SIGINT blocked (a test runner's mask is inherited);
/// `serve` shuts down gracefully on them, so unblock both before any thread starts.
func unblockShutdownSignals() {
    var signals = sigset_t()
    sigemptyset(&signals)
    sigaddset(&signals, SIGTERM)
    sigaddset(&signals, SIGINT)
    pthread_sigmask(SIG_UNBLOCK, &signals, nil)
}
