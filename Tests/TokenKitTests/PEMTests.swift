import Foundation
import Testing
@_spi(Testing) @testable import TokenKit

/// `PEM.parse` reads ASCII text on its bytes; the Character-based reading it replaced for such
/// text (`PEM.parseCharacters`, still used for other text) must give the same blocks, or the same
/// error, for every input.
@Suite("PEM parsing")
struct PEMTests {
    /// The outcome as comparable text: the blocks, or the error.
    private func outcome(_ parse: () throws(TokenError) -> [PEM.Block]) -> String {
        do {
            return try parse().map { "\($0.label):\($0.der)" }.joined(separator: "|")
        } catch {
            return "error \(error)"
        }
    }

    private func expectSameAsCharacters(_ text: String, _ comment: String) {
        let bytes = outcome { () throws(TokenError) in try PEM.parse(text) }
        let characters = outcome { () throws(TokenError) in try PEM.parseCharacters(text) }
        #expect(bytes == characters, "\(comment): \(text.debugDescription)")
    }

    /// PEM bodies are standard base64 with padding: Foundation's, for every length up to 200.
    @Test func pemBase64IsFoundations() {
        var generator = SystemRandomNumberGenerator()
        for length in 0...200 {
            let der = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            #expect(PEM.base64Bytes(der) == Array(Data(der).base64EncodedString().utf8), "\(length)")
        }
    }

    /// Blocks in many layouts — line endings, trailing blanks, text around and between, headers,
    /// wrong or missing END lines, bad bodies, odd BEGIN lines — and every truncation of two
    /// blocks: the byte reading agrees with the Character one, and finds the blocks where it should.
    @Test func theByteReadingAgreesWithTheCharacterReading() {
        var generator = SystemRandomNumberGenerator()
        var seen = 0
        for length in [1, 2, 3, 47, 48, 49, 64, 65, 91, 300] {
            let der = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            for label in ["CERTIFICATE", "PUBLIC KEY", "EC PRIVATE KEY", "X", "A-B C"] {
                let pem = PEM.encode(label: label, der: der)
                let other = PEM.encode(label: "PUBLIC KEY", der: Array(der.reversed()))
                var variants: [(String, String)] = [
                    ("plain", pem),
                    ("CRLF", pem.replacingNewlines(with: "\r\n")),
                    ("CR CRLF", pem.replacingNewlines(with: "\r\r\n")),
                    ("trailing blanks", pem.replacingNewlines(with: " \t \n")),
                    ("no final newline", String(pem.dropLast())),
                    ("text around", "Bag Attributes\n    localKeyID: 01 02\nsubject=/CN=x\n" + pem + "trailing words\n"),
                    ("two blocks", pem + "\n" + other),
                    ("two blocks, CRLF", (pem + other).replacingNewlines(with: "\r\n")),
                    ("header inside", pem.replacingFirst("-----\n", with: "-----\nProc-Type: 4,ENCRYPTED\n")),
                    ("wrong END", pem.replacingFirst("-----END \(label)", with: "-----END OTHER")),
                    ("END with blank", pem.replacingFirst("-----END \(label)-----", with: "-----END \(label) -----")),
                    ("no END", pem.replacingFirst("-----END \(label)-----", with: "")),
                    ("bad body", pem.replacingFirst("-----\n", with: "-----\n*")),
                    ("empty body", "-----BEGIN \(label)-----\n-----END \(label)-----\n"),
                    ("empty label", "-----BEGIN -----\nAAAA\n-----END -----\n" + pem),
                    ("lone CR inside", pem.replacingFirst("-----\n", with: "-----\r")),
                    ("BEGIN without dashes", "-----BEGIN \(label)\n" + pem),
                    ("blank inside body", pem.replacingFirst("-----\n", with: "-----\n \n")),
                    ("two BEGINs", "-----BEGIN A-----\n" + pem),
                ]
                let two = pem + other
                let step = max(1, two.utf8.count / 40)
                for cut in stride(from: 0, through: two.utf8.count, by: step) {
                    variants.append(("cut at \(cut)", String(decoding: two.utf8.prefix(cut), as: UTF8.self)))
                }
                for (name, text) in variants {
                    expectSameAsCharacters(text, "\(label) \(length) \(name)")
                    seen += 1
                }
                #expect(outcome { () throws(TokenError) in try PEM.parse(pem) } == "\(label):\(der)")
                #expect(outcome { () throws(TokenError) in try PEM.parse((pem + other).replacingNewlines(with: "\r\n")) }
                    == "\(label):\(der)|PUBLIC KEY:\(Array(der.reversed()))")
            }
        }
        #expect(seen > 2000)
        // Text that is not ASCII takes the Character reading, and gets its answers.
        let der: [UInt8] = [0x30, 0x03, 0x02, 0x01, 0x05]
        #expect(outcome { () throws(TokenError) in try PEM.parse("Schlüssel:\n" + PEM.encode(label: "X", der: der)) } == "X:\(der)")
        #expect(outcome { () throws(TokenError) in try PEM.parse(PEM.encode(label: "CLÉ", der: der)) } == "CLÉ:\(der)")
    }

    /// The PEM a certificate reply writes straight into its JSON is `PEM.encode`'s text as the JSON
    /// writer escapes it, for every length of DER around the line ends (48 bytes a line).
    @Test func pemWrittenIntoJSONIsTheEscapedText() {
        for count in [0, 1, 2, 3, 47, 48, 49, 95, 96, 97, 500, 767, 768, 1_000] {
            let der = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            var written: [UInt8] = [0x7b]
            PEM.appendJSONEscaped(label: "CERTIFICATE", der: der, to: &written)
            #expect(written == [0x7b] + JSONWriter.escapedStringBody(PEM.encode(label: "CERTIFICATE", der: der)), "\(count)")
        }
        var quoted: [UInt8] = []
        JSONWriter.writeString("a\"b\nc", into: &quoted)
        #expect([0x22] + JSONWriter.escapedStringBody("a\"b\nc") + [0x22] == quoted)
    }
}

extension String {
    fileprivate func replacingNewlines(with newline: String) -> String {
        split(separator: "\n", omittingEmptySubsequences: false).joined(separator: newline)
    }

    fileprivate func replacingFirst(_ target: String, with replacement: String) -> String {
        guard let range = range(of: target) else { return self }
        return replacingCharacters(in: range, with: replacement)
    }
}
