import Foundation
@_exported import TestSupport
import Testing
@testable import TokenKit

func hex(_ text: String) -> [UInt8] {
    var out: [UInt8] = []
    var chars = Array(text.utf8)
    if chars.count % 2 == 1 { chars.insert(UInt8(ascii: "0"), at: 0) }
    var i = 0
    while i + 1 < chars.count {
        out.append(UInt8(String(decoding: chars[i...i + 1], as: UTF8.self), radix: 16) ?? 0)
        i += 2
    }
    return out
}

/// A fixed time for claims tests: 2026-01-01T00:00:00Z.
let referenceTime: NumericDate = 1_767_225_600
