#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Times on the wire (RFC 3339, UTC, milliseconds: `2026-11-27T06:00:00.123Z`), written
/// and read with integer arithmetic.
///
/// Why not `Date.ISO8601FormatStyle`: it goes through `Calendar` and `TimeZone` for every
/// date, which costs more than the rest of a fix's encoding; a fix carries a time on every
/// hop (the plugin channel, the API's event stream), several times a second. The civil
/// calendar here is the proleptic Gregorian one, as RFC 3339 asks.
public enum InternetTime {
    /// `YYYY-MM-DDTHH:MM:SS.mmmZ`, the milliseconds truncated — after rounding to the
    /// microsecond, so that a time of whole milliseconds whose double falls a hair below
    /// (1459000000.252 is 1459000000.25199997…) keeps its millisecond, which the format
    /// style loses.
    public static func text(_ date: Date) -> String {
        // Outside the years four digits hold (0000–9999) Foundation's form is written: a time
        // far enough out (a receiver's garbage year 472918, found by fuzz/run fix-event)
        // does not fit in microseconds as an Int64, and converting it would trap.
        let seconds = date.timeIntervalSince1970
        guard seconds >= -62_167_219_200, seconds < 253_402_300_800 else { return date.formatted(.iso8601) }
        let (milliseconds, _) = floorDivision(Int64((seconds * 1_000_000).rounded()), 1000)
        let (days, inDay) = floorDivision(milliseconds, 86_400_000)
        let (year, month, day) = civil(fromDays: days)
        var out = [UInt8]()
        out.reserveCapacity(24)
        func put(_ value: Int64, width: Int) {
            let start = out.count
            out.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: width))
            var rest = value
            for index in stride(from: start + width - 1, through: start, by: -1) {
                out[index] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
            }
        }
        guard (0...9999).contains(year) else { return date.formatted(.iso8601) }  // outside what four digits hold
        put(year, width: 4); out.append(UInt8(ascii: "-"))
        put(month, width: 2); out.append(UInt8(ascii: "-"))
        put(day, width: 2); out.append(UInt8(ascii: "T"))
        put(inDay / 3_600_000, width: 2); out.append(UInt8(ascii: ":"))
        put(inDay / 60_000 % 60, width: 2); out.append(UInt8(ascii: ":"))
        put(inDay / 1000 % 60, width: 2); out.append(UInt8(ascii: "."))
        put(inDay % 1000, width: 3); out.append(UInt8(ascii: "Z"))
        return String(decoding: out, as: UTF8.self)
    }

    /// `YYYY-MM-DDTHH:MM:SS`, then optionally a fraction of any length, then `Z` or an offset
    /// `±HH:MM` (or `±HHMM`); `t` and `z` as well. Nil for anything else, or a field out of
    /// range (a 31st of April, hour 24, second 60).
    public static func date(_ text: some StringProtocol) -> Date? {
        var bytes = Array(text.utf8)[...]
        func number(_ width: Int) -> Int64? {
            guard bytes.count >= width else { return nil }
            var value: Int64 = 0
            for byte in bytes.prefix(width) {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int64(byte - UInt8(ascii: "0"))
            }
            bytes = bytes.dropFirst(width)
            return value
        }
        func take(_ characters: String) -> Bool {
            guard let byte = bytes.first, characters.utf8.contains(byte) else { return false }
            bytes = bytes.dropFirst()
            return true
        }
        guard let year = number(4), take("-"), let month = number(2), take("-"), let day = number(2), take("Tt"),
              let hour = number(2), take(":"), let minute = number(2), take(":"), let second = number(2),
              (1...12).contains(month), (1...daysIn(month: month, year: year)).contains(day),
              hour < 24, minute < 60, second < 60 else { return nil }
        var fraction = 0.0
        if take(".") {
            var scale = 0.1
            var digits = 0
            while let byte = bytes.first, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) {
                fraction += Double(byte - UInt8(ascii: "0")) * scale
                scale /= 10
                digits += 1
                bytes = bytes.dropFirst()
            }
            guard digits > 0 else { return nil }
        }
        var offset: Int64 = 0
        if take("Zz") {
            offset = 0
        } else if let sign = bytes.first, sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-") {
            bytes = bytes.dropFirst()
            guard let hours = number(2) else { return nil }
            _ = take(":")
            guard let minutes = number(2), hours < 24, minutes < 60 else { return nil }
            offset = (hours * 3600 + minutes * 60) * (sign == UInt8(ascii: "-") ? -1 : 1)
        } else {
            return nil
        }
        guard bytes.isEmpty else { return nil }
        let seconds = days(year: year, month: month, day: day) * 86_400 + hour * 3600 + minute * 60 + second - offset
        return Date(timeIntervalSince1970: Double(seconds) + fraction)
    }

    private static func floorDivision(_ value: Int64, _ divisor: Int64) -> (Int64, Int64) {
        let remainder = value % divisor
        return remainder < 0 ? (value / divisor - 1, remainder + divisor) : (value / divisor, remainder)
    }

    private static func isLeap(_ year: Int64) -> Bool { year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) }

    private static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: return isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    /// Days since 1970-01-01 of a civil date (the usual era arithmetic: 400-year eras of
    /// 146 097 days, years counted from March so that the leap day comes last).
    private static func days(year: Int64, month: Int64, day: Int64) -> Int64 {
        let shifted = month <= 2 ? year - 1 : year
        let era = (shifted >= 0 ? shifted : shifted - 399) / 400
        let yearOfEra = shifted - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The civil date of a day counted from 1970-01-01: the inverse of `days`.
    private static func civil(fromDays count: Int64) -> (Int64, Int64, Int64) {
        let shifted = count + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthFromMarch = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthFromMarch + 2) / 5 + 1
        let month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
