public import Foundation

/// Dates as ISO 8601 / RFC 3339 text in UTC, whole seconds (`2026-11-24T23:45:47Z`): the same
/// text as Foundation's `Date.ISO8601FormatStyle()` with its defaults (fractions of a second
/// dropped, not rounded), computed with integer arithmetic. The format style takes ≈ 0.35–0.55 µs
/// a date here, and a certificate reply shows five or six; this takes a few dozen nanoseconds.
package enum ISO8601Text {
    /// `date` as `yyyy-MM-ddTHH:mm:ssZ`. Years outside 1600…9999 go through the format style
    /// (its calendar is Julian before the 1582 reform; this one is Gregorian throughout).
    package static func string(_ date: Date) -> String {
        let interval = date.timeIntervalSince1970
        // 1600-01-01T00:00:00Z and 10000-01-01T00:00:00Z; NaN fails both comparisons.
        guard interval >= -11_676_096_000, interval < 253_402_300_800 else {
            return Date.ISO8601FormatStyle().format(date)
        }
        let time = fields(secondsSince1970: Int(interval.rounded(.down)))
        var bytes = [UInt8](repeating: 0, count: 20)
        func put(_ value: Int, at offset: Int, digits: Int) {
            var rest = value
            for i in stride(from: offset + digits - 1, through: offset, by: -1) {
                bytes[i] = UInt8(truncatingIfNeeded: 0x30 + rest % 10)
                rest /= 10
            }
        }
        put(time.year, at: 0, digits: 4)
        bytes[4] = 0x2d
        put(time.month, at: 5, digits: 2)
        bytes[7] = 0x2d
        put(time.day, at: 8, digits: 2)
        bytes[10] = 0x54  // T
        put(time.hour, at: 11, digits: 2)
        bytes[13] = 0x3a
        put(time.minute, at: 14, digits: 2)
        bytes[16] = 0x3a
        put(time.second, at: 17, digits: 2)
        bytes[19] = 0x5a  // Z
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The UTC date and time `seconds` after 1970-01-01T00:00:00Z (negative: before it), in the
    /// proleptic Gregorian calendar: this text's fields, and PeerCA's certificate times (UTCTime,
    /// GeneralizedTime).
    package static func fields(secondsSince1970 seconds: Int) -> (year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) {
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let secondOfDay = seconds - days * 86_400
        let (year, month, day) = civil(daysSinceEpoch: days)
        return (year, month, day, secondOfDay / 3600, secondOfDay / 60 % 60, secondOfDay % 60)
    }

    /// The proleptic Gregorian date `days` after 1970-01-01 (H. Hinnant's `civil_from_days`).
    private static func civil(daysSinceEpoch days: Int) -> (year: Int, month: Int, day: Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
