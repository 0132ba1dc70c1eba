import Crypto
import Foundation
import SwiftASN1
import TokenKit
public import X509

/// Random certificate serial numbers.
enum SerialNumbers {
    /// 16 random bytes (127 bits of randomness): positive, never starting with a zero byte, so the
    /// DER INTEGER is always 16 bytes long.
    static func random() -> Certificate.SerialNumber {
        var generator = SystemRandomNumberGenerator()
        var bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
        bytes[0] = (bytes[0] & 0x7f) | 0x01
        return Certificate.SerialNumber(bytes: bytes)
    }

    static func hex(_ serial: Certificate.SerialNumber) -> String {
        serial.bytes.map { String(format: "%02x", $0) }.joined()
    }

    static func parse(_ hex: String) -> Certificate.SerialNumber? {
        let text = hex.lowercased().replacingOccurrences(of: ":", with: "")
        guard !text.isEmpty, text.count % 2 == 0, text.count <= 40 else { return nil }
        var bytes: [UInt8] = []
        var index = text.startIndex
        while index < text.endIndex {
            let next = text.index(index, offsetBy: 2)
            guard let byte = UInt8(text[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        return Certificate.SerialNumber(bytes: bytes)
    }
}

extension Certificate {
    /// The certificate's DER encoding.
    public var derBytes: [UInt8] {
        var serializer = DER.Serializer()
        return (try? serializer.serialize(self)).map { serializer.serializedBytes } ?? []
    }

    /// The certificate as PEM text.
    public var pemString: String {
        (try? serializeAsPEM().pemString).map { $0 + "\n" } ?? ""
    }
}
