import ArgumentParser
import Foundation
import TokenKit

struct Decode: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show a token's header and claims WITHOUT verifying anything.",
        discussion: """
            Decoding is strict about the encoding (three segments, base64url, JSON header) but checks \
            no signature and no claim: never trust what it prints. Use `tokentool verify` for that.

            Examples:
              tokentool decode eyJhbGciOi...
              tokentool decode token.jwt
              cat token.jwt | tokentool decode --json
            """)

    @Argument(help: "The token, a file holding it, or - for standard input (the default).")
    var token: String?

    @Flag(help: "Print one JSON object: {\"verified\": false, \"header\", \"payload\"}.")
    var json = false

    func run() throws {
        let decoded: UnverifiedToken
        do {
            decoded = try UnverifiedToken(try Input.token(token))
        } catch let error as TokenError {
            throw CLIExit(code: 1, message: "tokentool: not a decodable token: \(error)")
        }
        let payload = decoded.payload ?? .string(String(decoding: decoded.payloadBytes, as: UTF8.self))
        if json {
            Output.json(.object(["verified": .bool(false), "header": .object(decoded.header), "payload": payload]))
            return
        }
        print("NOT VERIFIED: nothing below has been checked; anyone could have written it.")
        print("Header:")
        print(JSONValue.object(decoded.header).prettyText)
        print("Payload:")
        print(payload.prettyText)
        if case .object(let members)? = decoded.payload, let claims = try? RegisteredClaims(payload: members), !claims.summary.isEmpty {
            print("Claims:")
            for line in claims.summary { print("  " + line) }
        }
        print("Signature: \(decoded.signature.count) bytes")
    }
}
