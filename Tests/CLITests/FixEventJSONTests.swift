import FieldHAL
@testable import FieldHALAPI
import Foundation
import Testing
import TestSupport

/// A fix event's JSON by hand (FixEventJSON.swift) against Foundation's coders: the same
/// bytes out, the same fix in, and Foundation's word on anything not in the daemon's form.
@Suite struct FixEventJSONTests {
    static func randomNumber(_ random: inout SplitMix64) -> Double? {
        switch random.next() % 9 {
        case 0: return nil
        case 1: return Double(Int(random.next() % 2000)) - 1000  // whole: written without ".0"
        case 2: return -0.0
        case 3: return Double(random.next() % 1_000_000) * 1e-12  // tiny: an exponent
        case 4: return Double(random.next() % 1000) * 1e17  // huge: an exponent
        case 5: return Double(bitPattern: random.next() & 0x7FEF_FFFF_FFFF_FFFF)  // any finite
        default: return (Double(random.next() % 360_000_000) / 1e6) - 180  // a coordinate
        }
    }

    static func randomText(_ random: inout SplitMix64) -> String? {
        let pieces = ["gpsd", " stopped", "\"", "\\", "\n", "\r", "\t", "é", "🛰", "/", "\u{7F}", "\u{2028}", "\u{01}", "\u{0C}", "\u{08}"]
        guard random.next() % 3 != 0 else { return nil }
        return (0..<Int(random.next() % 6)).map { _ in pieces[Int(random.next() % UInt64(pieces.count))] }.joined()
    }

    static func randomFix(_ random: inout SplitMix64) -> Fix {
        let modes: [FixMode] = [.noFix, .twoD, .threeD]
        // Whole seconds, milliseconds and finer, over two centuries.
        let seconds = Double(random.next() % 6_000_000_000) + [0, 0.5, 0.123, 0.000_4][Int(random.next() % 4)]
        return Fix(mode: modes[Int(random.next() % 3)], latitude: randomNumber(&random), longitude: randomNumber(&random),
                   altitude: randomNumber(&random), horizontalAccuracy: randomNumber(&random), verticalAccuracy: randomNumber(&random),
                   speed: randomNumber(&random), course: randomNumber(&random), time: Date(timeIntervalSince1970: seconds),
                   satellitesUsed: random.next() % 4 == 0 ? nil : Int(random.next() % 40), sourceProblem: randomText(&random))
    }

    @Test func theDaemonsBytesAndTheClientsFixAreFoundations() throws {
        var random = SplitMix64(state: 20)
        let encoder = FieldHALAPI.encoder, decoder = FieldHALAPI.decoder
        var byHand = 0, readByHand = 0
        for _ in 0..<5000 {
            let fix = Self.randomFix(&random)
            // The receiver's name beside the fix's fields, or none (a daemon before names).
            let device = [nil, "default", "left", "bench_4"][Int(random.next() % 4)]
            let foundation = String(decoding: try encoder.encode(FixEventData(fix: fix, device: device)), as: UTF8.self)
            #expect(try fix.apiJSON(device: device, encoder: encoder) == foundation)
            if let written = fix.handWritten(device: device) {
                byHand += 1
                #expect(written == foundation)
            } else {
                #expect(fix.sourceProblem?.unicodeScalars.contains { $0.value < 0x20 && !"\n\r\t".unicodeScalars.contains($0) } == true,
                        "only a control character sends a fix to Foundation: \(foundation)")
            }
            let data = Data(foundation.utf8)
            let expected = try decoder.decode(FixEventData.self, from: data)
            #expect(expected.device == device)
            #expect(try Fix(apiJSON: data, decoder: decoder) == expected.fix)
            let event = try Fix.apiEvent(data, decoder: decoder)
            #expect(event.fix == expected.fix && event.device == device)
            // Read by hand: what the hand writes, except a negative zero (JSON's "-0" is read
            // as the integer 0, which writes back as "0": not the same bytes, so Foundation reads it).
            let negativeZero = [fix.latitude, fix.longitude, fix.altitude, fix.horizontalAccuracy, fix.verticalAccuracy, fix.speed, fix.course]
                .contains { $0 == 0 && $0?.sign == .minus }
            if let read = Fix.handRead(data) {
                readByHand += 1
                #expect(read.fix == expected.fix && read.device == device)
            } else {
                #expect(fix.handWritten(device: device) == nil || negativeZero, "the daemon's own form is read by hand: \(foundation)")
            }
        }
        #expect(byHand > 3000 && readByHand > 1000, "written by hand \(byHand), read \(readByHand) of 5000")
    }

    /// A byte off the daemon's form is not read by hand, even where the fix would be the
    /// same: a repeated or reordered key, a space, another spelling of a number, a string or
    /// a time, "-0" (Foundation reads it as the integer 0). Foundation decides each.
    @Test(arguments: [
        #"{"latitude":1,"latitude":2,"mode":"3d","time":"2026-11-27T09:00:00.000Z"}"#,
        #"{"mode":"3d","latitude":1,"time":"2026-11-27T09:00:00.000Z"}"#,
        #"{"latitude":-0,"mode":"3d","time":"2026-11-27T09:00:00.000Z"}"#,
        #"{"latitude":52.50,"mode":"3d","time":"2026-11-27T09:00:00.000Z"}"#,
        #"{"latitude":5.0,"mode":"3d","time":"2026-11-27T09:00:00.000Z"}"#,
        #"{"latitude":+5,"mode":"3d","time":"2026-11-27T09:00:00.000Z"}"#,
        #"{"device":"a\/b","mode":"3d","time":"2026-11-27T09:00:00.000Z"}"#,
        #"{"device":"\u0061","mode":"3d","time":"2026-11-27T09:00:00.000Z"}"#,
        #"{"mode":"3d","satellitesUsed":09,"time":"2026-11-27T09:00:00.000Z"}"#,
        #"{"mode":"3d","speed":null,"time":"2026-11-27T09:00:00.000Z"}"#,
        #"{"mode":"3d","time":"2026-11-27T09:00:00Z"}"#,
        #"{"mode":"3d","time":"2026-11-27T09:00:00.000Z"} "#,
        #"{"mode":"3d", "time":"2026-11-27T09:00:00.000Z"}"#,
        #"{"mode":"3d","time":"2026-11-27T09:00:00.000Z","verticalAccuracy":1"#,
    ])
    func offTheDaemonsFormIsFoundations(_ text: String) {
        #expect(Fix.handRead(Data(text.utf8)) == nil)
    }

    @Test func theDaemonsFormWithEscapesIsReadByHand() throws {
        let text = #"{"device":"bench \"4\"\\\t","mode":"2d","satellitesUsed":7,"sourceProblem":"gpsd\nstopped é","time":"2026-11-27T09:00:00.250Z"}"#
        let read = try #require(Fix.handRead(Data(text.utf8)))
        #expect(read.device == "bench \"4\"\\\t" && read.fix.sourceProblem == "gpsd\nstopped é" && read.fix.satellitesUsed == 7)
        #expect(read.fix == (try FieldHALAPI.decoder.decode(Fix.self, from: Data(text.utf8))))
    }

    /// Not the daemon's form: whatever Foundation makes of it, the same fix or an error.
    @Test(arguments: [
        #"{"mode":"3d","time":"2026-11-27T10:00:00+01:00","latitude":52.5}"#,
        #"{"mode":"3d","time":"2026-11-27T09:00:00.5Z","satellitesUsed":9.0}"#,
        #"{"mode":"3d","time":"2026-11-27T09:00:00Z","latitude":"52.5"}"#,
        #"{"mode":"3d","time":"2026-11-27T09:00:00Z","extra":[1,2,{"a":null}],"speed":null}"#,
        #"{"mode":"4d","time":"2026-11-27T09:00:00Z"}"#,
        #"{"mode":"2d"}"#,
        #"{"mode":"2d","time":"2026-11-27T09:00:00Z","sourceProblem":7}"#,
        #"{"mode":"2d","time":"2026-11-27T09:00:00Z","latitude":1e999}"#,
        #"{"mode":"2d","time":"2026-11-27T09:00:00Z",}"#,
        #"[1]"#, "", "{",
    ])
    func anythingElseIsFoundations(_ text: String) {
        let data = Data(text.utf8)
        let foundation = Result { try FieldHALAPI.decoder.decode(Fix.self, from: data) }
        let mine = Result { try Fix(apiJSON: data) }
        switch (foundation, mine) {
        case (.success(let a), .success(let b)): #expect(a == b)
        case (.failure, .failure): break
        default: Issue.record("Foundation: \(foundation), by hand: \(mine)")
        }
    }
}
