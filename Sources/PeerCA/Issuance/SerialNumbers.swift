import Crypto
package import Foundation
import SwiftASN1
import TokenKit
public import X509

/// Certificate serial numbers: unique, unpredictable, and in order of issuance.
package enum SerialNumbers {
    /// 16 bytes: `0x40`, then the milliseconds since 1970 (48 bits, big-endian), then 72 random
    /// bits from the system's CSPRNG (`SystemRandomNumberGenerator`: the kernel's `getrandom`; the
    /// CA/Browser Forum asks for at least 64). Positive and
    /// never starting with a zero byte, so the DER INTEGER is always 16 bytes long.
    ///
    /// The time prefix makes serials (and their hex, the ledger's key) grow with time, so each new
    /// row lands at the end of the serial index instead of on a random page of it: with random
    /// serials, every certificate dirtied (and wrote to the WAL) one more random index page, a cost
    /// that grew with the ledger. Unpredictability comes from the 72 random bits; a repeat is
    /// refused by the ledger and drawn again.
    package static func random(now: Date = Date()) -> Certificate.SerialNumber {
        let milliseconds = UInt64(max(0, now.timeIntervalSince1970 * 1000)) & 0xffff_ffff_ffff
        var bytes = [UInt8](repeating: 0, count: 16)
        bytes[0] = 0x40
        for i in 0..<6 { bytes[1 + i] = UInt8(truncatingIfNeeded: milliseconds >> (40 - 8 * i)) }
        // Two draws of 64 bits (each one `getrandom` call), 72 of their bits used.
        var generator = SystemRandomNumberGenerator()
        let high = generator.next() as UInt64, low = generator.next() as UInt64
        bytes[7] = UInt8(truncatingIfNeeded: high)
        for i in 0..<8 { bytes[8 + i] = UInt8(truncatingIfNeeded: low >> (56 - 8 * i)) }
        return Certificate.SerialNumber(bytes: bytes)
    }

    package static func hex(_ serial: Certificate.SerialNumber) -> String {
        Hex.encode(serial.bytes)
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

    /// The certificate as PEM text (64-character lines, each ending in `\n`).
    public var pemString: String {
        let der = derBytes
        return der.isEmpty ? "" : PEM.encode(label: "CERTIFICATE", der: der)
    }
}
