import Foundation
import Testing
@testable import TokenKit

/// The verifier's HMAC (precomputed SHA-2 states, `HMACKey`) against OpenSSL's one-shot `HMAC()`,
/// which signing uses. The Wycheproof vectors (WycheproofTests.hmacVectors) cover keys up to 65
/// bytes; these cover every key-length class: empty, shorter than the block, exactly the block,
/// and longer than the block (hashed first) for SHA-256's 64-byte and SHA-384/512's 128-byte blocks.
@Suite("HMACKey")
struct HMACKeyTests {
    static let algorithms: [JWTAlgorithm] = [.hs256, .hs384, .hs512]

    func reference(_ algorithm: JWTAlgorithm, key: [UInt8], message: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 64)
        let length = message.withUnsafeBytes { m in
            out.withUnsafeMutableBufferPointer { o in
                NativeSignatures.hmac(algorithm, secret: SecretBytes(key), message: m, into: o.baseAddress!)
            }
        }
        return Array(out.prefix(length))
    }

    func mac(_ key: HMACKey, _ message: [UInt8]) -> [UInt8]? {
        message.withUnsafeBytes { m in key.withMAC(m) { Array($0) } }
    }

    @Test(arguments: algorithms)
    func matchesOpenSSLForEveryKeyLength(algorithm: JWTAlgorithm) throws {
        var generator = SystemRandomNumberGenerator()
        let block = algorithm == .hs256 ? 64 : 128
        let keyLengths = [0, 1, algorithm.hashLength - 1, algorithm.hashLength, block - 1, block, block + 1, 2 * block + 3, 300]
        var compared = 0
        for keyLength in keyLengths {
            let secret = (0..<keyLength).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let key = try #require(HMACKey(algorithm, secret: SecretBytes(secret)))
            // Message lengths around the block boundaries, where padding changes shape.
            for messageLength in [0, 1, 55, 56, 63, 64, 65, 111, 112, 127, 128, 129, 300, 1000] {
                let message = (0..<messageLength).map { _ in UInt8.random(in: 0...255, using: &generator) }
                let expected = reference(algorithm, key: secret, message: message)
                #expect(expected.count == algorithm.hashLength)
                #expect(mac(key, message) == expected, "key \(keyLength) bytes, message \(messageLength) bytes")
                compared += 1
            }
        }
        #expect(compared == keyLengths.count * 14)
    }

    /// RFC 4231 test case 2 ("Jefe"), whose key is shorter than every output length.
    @Test func rfc4231ShortKey() throws {
        let key = try #require(HMACKey(.hs256, secret: SecretBytes(Array("Jefe".utf8))))
        let tag = mac(key, Array("what do ya want for nothing?".utf8))
        #expect(tag.map { Data($0).map { String(format: "%02x", $0) }.joined() } == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    @Test func verifyAcceptsOnlyTheExactTag() throws {
        let secret = Array("a secret of thirty-two bytes!!!!".utf8)
        let key = try #require(HMACKey(.hs256, secret: SecretBytes(secret)))
        let message = Array("header.payload".utf8)
        var tag = reference(.hs256, key: secret, message: message)
        func verify(_ tag: [UInt8]) -> Bool {
            message.withUnsafeBytes { m in tag.withUnsafeBytes { key.verify(message: m, signature: $0) } }
        }
        #expect(verify(tag))
        #expect(!verify(Array(tag.dropLast())))
        #expect(!verify(tag + [0]))
        for index in tag.indices {
            tag[index] ^= 1
            #expect(!verify(tag), "a flipped bit in byte \(index) was accepted")
            tag[index] ^= 1
        }
    }

    /// One key, read by many threads at once (the verifier shares it without a lock).
    @Test func concurrentUseGivesTheSameTags() async throws {
        let secret = Array("another secret, thirty-two bytes".utf8)
        let key = try #require(HMACKey(.hs384, secret: SecretBytes(secret)))
        let messages = (0..<64).map { i in Array("message number \(i) ".utf8) + [UInt8](repeating: UInt8(i), count: i * 7) }
        let expected = messages.map { reference(.hs384, key: secret, message: $0) }
        let mismatches = await withTaskGroup(of: Int.self) { group in
            for task in 0..<8 {
                group.addTask {
                    var bad = 0
                    for round in 0..<500 {
                        let i = (task * 31 + round) % messages.count
                        if mac(key, messages[i]) != expected[i] { bad += 1 }
                    }
                    return bad
                }
            }
            return await group.reduce(0, +)
        }
        #expect(mismatches == 0)
    }
}
