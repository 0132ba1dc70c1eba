import Foundation
import Testing
@testable import TokenKit

/// Strict base64url: the hot path's decoder against Foundation's, and every way to be invalid.
@Suite("Base64URL")
struct Base64Tests {
    /// Foundation's encoding made unpadded base64url.
    func reference(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    @Test func roundTripsEveryLengthAgainstFoundation() {
        var generator = SystemRandomNumberGenerator()
        for length in 0..<300 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let text = reference(bytes)
            #expect(Base64URL.encode(bytes) == text)
            #expect(Base64URL.decode(text) == bytes, "length \(length)")
        }
    }

    @Test func refusesEveryByteOutsideTheAlphabetAtEveryPosition() {
        let alphabet = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        let valid = Array(reference(Array(0..<30)).utf8)  // 40 characters: ten full quanta
        for byte in UInt8.min...UInt8.max where !alphabet.contains(byte) {
            for position in [0, 1, 2, 3, 17, 38, 39] {
                var text = valid
                text[position] = byte
                #expect(text.withUnsafeBytes { Base64URL.decode($0) } == nil, "byte \(byte) at \(position)")
            }
            // In a 2- and 3-character tail.
            for tail in [2, 3] {
                var text = valid + Array(reference(Array(repeating: 0, count: tail - 1)).utf8)
                text[text.count - 1] = byte
                #expect(text.withUnsafeBytes { Base64URL.decode($0) } == nil)
            }
        }
    }

    @Test func refusesNonCanonicalEncodings() {
        #expect(Base64URL.decode("QQ") == [0x41])
        #expect(Base64URL.decode("QR") == nil)  // unused bits set
        #expect(Base64URL.decode("QUE") == [0x41, 0x41])
        #expect(Base64URL.decode("QUF") == nil)
        #expect(Base64URL.decode("QUFB") == [0x41, 0x41, 0x41])
        #expect(Base64URL.decode("QUFBQ") == nil)  // length 1 mod 4
        #expect(Base64URL.decode("QQ==") == nil)  // padding
        #expect(Base64URL.decode("Q+Q/") == nil)  // standard alphabet
        #expect(Base64URL.decode("") == [])
    }
}
