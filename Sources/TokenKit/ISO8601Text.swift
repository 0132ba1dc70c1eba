package import Foundation

/// Dates as ISO 8601 / RFC 3339 text in UTC, whole seconds (`2026-11-24T23:45:47Z`): the same
/// text as Foundation's `Date.ISO8601FormatStyle()` with its defaults (fractions of a second
/// dropped, not rounded), computed with integer arithmetic. The format style takes ≈ 0.35–0.55 µs
/// a date here, and a certificate reply shows five or six; this takes a few dozen nanoseconds.
package enum ISO8601Text {
    /// `date` as `yyyy-MM-ddTHH:mm:ssZ`. Years outside 1600…9999 go through the format style
    /// (its calendar is Julian before the 1582 reform; this one is Gregorian throughout).
    package static func string(_ date: Date) -> String {
        guard let fields = gregorianFields(date) else { return Date.ISO8601FormatStyle().format(date) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(20)
        fields.appendDigits(to: &bytes, yearDigits: 4, separated: true)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// ``string(_:)``'s text appended to `out` as bytes (no `String` made), as a JSON string holds
    /// it between its quotes: digits, `-`, `:`, `T`, `Z`, nothing to escape (the format style's
    /// text, for years outside 1600…9999, goes through the JSON writer's escaping all the same).
    package static func append(_ date: Date, to out: inout [UInt8]) {
        guard let fields = gregorianFields(date) else { return JSONWriter.appendEscaped(string(date), into: &out) }
        fields.appendDigits(to: &out, yearDigits: 4, separated: true)
    }

    /// `date`'s fields, whole seconds toward the past, when its year is within 1600…9999 (the
    /// years this computes as the format style does); nil otherwise.
    private static func gregorianFields(_ date: Date) -> Fields? {
        let interval = date.timeIntervalSince1970
        // 1600-01-01T00:00:00Z and 10000-01-01T00:00:00Z; NaN fails both comparisons.
        guard interval >= -11_676_096_000, interval < 253_402_300_800 else { return nil }
        return fields(secondsSince1970: Int(interval.rounded(.down)))
    }

    /// A UTC date and time, whole seconds, proleptic Gregorian.
    package struct Fields: Sendable, Equatable {
        package var year, month, day, hour, minute, second: Int

        /// Appends the fields as digits, then `Z`: the year's last `yearDigits` digits (4 or 2),
        /// two for each other field; with `separated`, `-`, `-`, `T`, `:`, `:` between them
        /// (ISO 8601 text), without, none (UTCTime, GeneralizedTime).
        package func appendDigits(to out: inout [UInt8], yearDigits: Int, separated: Bool) {
            func digits(_ value: Int, _ count: Int) {
                var divisor = 1
                for _ in 1..<count { divisor *= 10 }
                while divisor > 0 {
                    out.append(0x30 + UInt8(truncatingIfNeeded: value / divisor % 10))
                    divisor /= 10
                }
            }
            func separator(_ byte: UInt8) { if separated { out.append(byte) } }
            // Written out, not looped over an array of the fields: that array was a heap
            // allocation a date (a third of writing one, in a certificate reply's five).
            digits(year, yearDigits)
            separator(UInt8(ascii: "-"))
            digits(month, 2)
            separator(UInt8(ascii: "-"))
            digits(day, 2)
            separator(UInt8(ascii: "T"))
            digits(hour, 2)
            separator(UInt8(ascii: ":"))
            digits(minute, 2)
            separator(UInt8(ascii: ":"))
            digits(second, 2)
            out.append(UInt8(ascii: "Z"))
        }
    }

    /// The UTC date and time `seconds` after 1970-01-01T00:00:00Z (negative: before it), in the
    /// proleptic Gregorian calendar: this text's fields, and PeerCA's certificate times (UTCTime,
    /// GeneralizedTime).
    package static func fields(secondsSince1970 seconds: Int) -> Fields {
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let secondOfDay = seconds - days * 86_400
        let (year, month, day) = civil(daysSinceEpoch: days)
        return Fields(year: year, month: month, day: day, hour: secondOfDay / 3600, minute: secondOfDay / 60 % 60, second: secondOfDay % 60)
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
