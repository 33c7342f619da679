import FieldHAL
import Foundation
import Testing
import TestSupport

/// The wire's times by integer arithmetic, against Foundation's ISO 8601 format style.
@Suite struct InternetTimeTests {
    static let style = Date.ISO8601FormatStyle(includingFractionalSeconds: true)

    /// The same text as the format style, but for the style's floating-point slips: a time
    /// of whole milliseconds keeps its millisecond here, where the style can print one less.
    @Test func writesWhatTheFormatStyleWritesAndKeepsWholeMilliseconds() throws {
        var generator = SplitMix64(state: 1127)
        var slips = 0
        // 1900 to 2200, whole milliseconds and not, before and after 1970.
        for _ in 0..<3000 {
            let milliseconds = Int64.random(in: -2_208_988_800_000...7_258_118_400_000, using: &generator)
            let whole = Date(timeIntervalSince1970: Double(milliseconds) / 1000)
            let text = InternetTime.text(whole)
            #expect(text.hasSuffix(String(format: ".%03dZ", Int((milliseconds % 1000 + 1000) % 1000))), "\(milliseconds): \(text)")
            let reread = try #require(InternetTime.date(text))
            #expect(Int64((reread.timeIntervalSince1970 * 1000).rounded()) == milliseconds, "\(text)")
            let style = Self.style.format(whole)
            if style != text {
                slips += 1
                let theirs = try Self.style.parse(style)
                #expect(abs(theirs.timeIntervalSince1970 - reread.timeIntervalSince1970 + 0.001) < 1e-6, "\(text) against \(style)")
            }
            let any = Date(timeIntervalSince1970: Double(milliseconds) / 1000 + Double.random(in: 0.0001...0.0009, using: &generator))
            #expect(InternetTime.text(any) == text, "a time between milliseconds is truncated")
        }
        #expect(slips < 3000 / 2, "the style and this differ only by its slips: \(slips)")
        #expect(InternetTime.text(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00.000Z")
        #expect(InternetTime.text(Date(timeIntervalSince1970: -0.001)) == "1969-12-31T23:59:59.999Z")
        #expect(InternetTime.text(Date(timeIntervalSince1970: 951_782_400)) == "2000-02-29T00:00:00.000Z")
        #expect(InternetTime.text(Date(timeIntervalSince1970: 1_459_000_000.252)) == "2016-03-26T13:46:40.252Z")
    }

    @Test func readsWhatTheFormatStyleReads() throws {
        var generator = SplitMix64(state: 2711)
        for _ in 0..<3000 {
            let date = Date(timeIntervalSince1970: (Double.random(in: -2_208_988_800...7_258_118_400, using: &generator) * 1000).rounded() / 1000)
            let text = Self.style.format(date)
            let ours = try #require(InternetTime.date(text), "\(text)")
            let theirs = try Self.style.parse(text)
            #expect(abs(ours.timeIntervalSince1970 - theirs.timeIntervalSince1970) < 1e-6, "\(text)")
        }
        // Without a fraction, with a long one, with offsets, in lower case.
        let noon = 1_764_244_800.0  // 2025-11-27T12:00:00Z
        for (text, expected) in [("2025-11-27T12:00:00Z", noon), ("2025-11-27T12:00:00.5Z", noon + 0.5),
                                 ("2025-11-27T12:00:00.123456789Z", noon + 0.123456789), ("2025-11-27T17:30:00+05:30", noon),
                                 ("2025-11-27T04:00:00-0800", noon), ("2025-11-27t12:00:00z", noon)] {
            let date = try #require(InternetTime.date(text), "\(text)")
            #expect(abs(date.timeIntervalSince1970 - expected) < 1e-6, "\(text): \(date.timeIntervalSince1970)")
        }
    }

    @Test func refusesWhatIsNotATime() {
        for text in ["", "2025-11-27", "2025-11-27T12:00:00", "2025-11-27 12:00:00Z", "2025-13-01T00:00:00Z", "2025-04-31T00:00:00Z",
                     "2025-02-29T00:00:00Z", "2100-02-29T00:00:00Z", "2025-11-27T24:00:00Z", "2025-11-27T12:60:00Z",
                     "2025-11-27T12:00:60Z", "2025-11-27T12:00:00.Z", "2025-11-27T12:00:00+5:30", "2025-11-27T12:00:00Zjunk",
                     "+2025-11-27T12:00:00Z", "２０２５-11-27T12:00:00Z"] {
            #expect(InternetTime.date(text) == nil, "\(text)")
        }
        #expect(InternetTime.date("2024-02-29T00:00:00Z") != nil && InternetTime.date("2000-02-29T00:00:00Z") != nil)
    }

    /// Years four digits do not hold are Foundation's to write — including ones so far out
    /// that microseconds overflow an Int64 (a garbage year from a receiver: found by fuzz/run
    /// fix-event, where writing it trapped).
    @Test func writesTimesOutsideFourDigitYearsWithoutTrapping() {
        let edges: [(Date, String)] = [
            (Date(timeIntervalSince1970: 253_402_300_799.5), "9999-12-31T23:59:59.500Z"),
            (Date(timeIntervalSince1970: -62_167_219_200), "0000-01-01T00:00:00.000Z"),
        ]
        for (date, text) in edges { #expect(InternetTime.text(date) == text) }
        for seconds in [253_402_300_800.0, 1.49e13, 9.3e12, 1e18, -62_167_219_201, -1e15] {
            let date = Date(timeIntervalSince1970: seconds)
            #expect(InternetTime.text(date) == date.formatted(.iso8601), "\(seconds)")
        }
    }
}
