import Foundation
import Testing
@testable import TokenKit

/// Refusals that say how to fix them: whitespace left around a token, an algorithm the keys do not
/// accept.
@Suite("Error hints")
struct ErrorHintTests {
    let verifier: JWTVerifier
    let token: String

    init() throws {
        verifier = try JWTVerifier(key: hs256Key, clock: .fixed(referenceTime))
        token = try forge(header: #"{"alg":"HS256","typ":"JWT"}"#, payload: #"{"exp":4102444800}"#)
    }

    func error(_ body: () throws -> Void) -> TokenError? {
        do {
            try body()
            return nil
        } catch let error as TokenError {
            return error
        } catch {
            return TokenError(.cryptoFailure, "not a TokenError: \(error)")
        }
    }

    @Test func whitespaceAroundATokenIsNamed() throws {
        #expect(try verifier.verify(token).header.algorithm == .hs256)
        let cases: [(String, String)] = [
            (token + "\n", "ends with whitespace"), (token + " ", "ends with whitespace"), (token + "\r\n", "ends with whitespace"),
            (" " + token, "starts with whitespace"), ("\n" + token, "starts with whitespace"),
        ]
        for (input, hint) in cases {
            for failure in [error { _ = try verifier.verify(input) }, error { _ = try UnverifiedToken(input) }] {
                #expect(failure?.code == .invalidBase64, "\(input.debugDescription)")
                #expect(failure?.message.contains(hint) == true, "\(input.debugDescription): \(failure?.message ?? "-")")
                #expect(failure?.message.contains("trim") == true)
            }
        }
        // A line break inside a segment (a token wrapped over lines): the header, which the
        // verifier decodes first; the payload, which UnverifiedToken decodes.
        let parts = token.split(separator: ".")
        let inHeader = "\(parts[0].prefix(4))\n\(parts[0].dropFirst(4)).\(parts[1]).\(parts[2])"
        let inPayload = "\(parts[0]).\(parts[1].prefix(4))\n\(parts[1].dropFirst(4)).\(parts[2])"
        for inside in [error { _ = try verifier.verify(inHeader) }, error { _ = try UnverifiedToken(inPayload) }] {
            #expect(inside?.code == .invalidBase64)
            #expect(inside?.message.contains("contains whitespace") == true, "\(inside?.message ?? "-")")
        }
        // Other bad base64url gets no whitespace hint.
        let padded = error { _ = try verifier.verify(token + "=") }
        #expect(padded?.code == .invalidBase64)
        #expect(padded?.message.contains("whitespace") == false, "\(padded?.message ?? "-")")
    }

    @Test func algorithmNotAllowedNamesWhatTheKeysAccept() throws {
        let rsa = try JWTKey.generate(.rsa(bits: 2048))
        let rs256 = try JWTSigner(key: rsa).sign(claims: ["exp": .integer(4_102_444_800)])
        let pinned = try JWTVerifier(key: rsa.publicKey.with(algorithms: [.ps256]))
        let one = error { _ = try pinned.verify(rs256) }
        #expect(one?.code == .algorithmNotAllowed)
        #expect(one?.message == "no key accepts RS256 (the key accepts PS256)")
        let ec = try JWTKey.generate(.ec(.p256))
        let two = try JWTVerifier(keys: [ec.publicKey.with(kid: "e"), rsa.publicKey.with(algorithms: [.ps256, .ps384]).with(kid: "r")])
        let several = error { _ = try two.verify(rs256) }
        #expect(several?.message == "no key accepts RS256 (the keys accept ES256, PS256, PS384)")
    }
}
