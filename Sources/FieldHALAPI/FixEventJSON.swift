import FieldHAL
import Foundation

/// A fix event's data, written and read by hand: the same bytes as `FieldHALAPI.encoder`
/// writes and the same `Fix` as `FieldHALAPI.decoder` reads.
///
/// Why: a fix is the event that comes often and is measured against the in-process watch
/// (issue 20), and on an idle daemon or client each one is handled cold. `JSONEncoder` took
/// some 10 µs hot and 50–100 µs cold for one fix, `JSONDecoder` 15 µs hot and 65–100 µs
/// cold (its generic containers, the date strategy's closure): more, on each side, than the
/// socket between them. Read by hand in one pass over the bytes (`FixEventScanner`): on an
/// idle client, where each fix is read cold, the event's decoding takes about 30 µs, where
/// parsing it into a `JSONValue` and writing it again to compare took about 60 (2026-12-06).
///
/// Only the form the daemon writes takes this way — a text read by hand must be, byte for
/// byte, what writing its fix gives — and anything else (a repeated key, a control
/// character in a string, a time in another ISO 8601 form, a field of another type) goes to
/// Foundation's coder, so what is accepted, refused, and said about it does not change.
extension Fix {
    /// The fix as an event's JSON text, with the name of the receiver it came from
    /// (`device`, beside the fix's own fields): `FieldHALAPI.encoder`'s bytes.
    public func apiJSON(device: String? = nil, encoder: JSONEncoder = FieldHALAPI.encoder) throws -> String {
        if let text = handWritten(device: device) { return text }
        return String(decoding: try encoder.encode(FixEventData(fix: self, device: device)), as: UTF8.self)
    }

    /// A fix from an event's JSON text, as `FieldHALAPI.decoder` reads it (its `device`,
    /// if any, left aside as Foundation's decoder of a `Fix` leaves it).
    public init(apiJSON data: Data, decoder: JSONDecoder = FieldHALAPI.decoder) throws {
        if let read = Self.handRead(data) {
            self = read.fix
        } else {
            self = try decoder.decode(Fix.self, from: data)
        }
    }

    /// A fix event's data: the fix and the receiver it came from (nil from a daemon older
    /// than named devices).
    public static func apiEvent(_ data: Data, decoder: JSONDecoder = FieldHALAPI.decoder) throws -> (fix: Fix, device: String?) {
        if let read = handRead(data) { return read }
        let event = try decoder.decode(FixEventData.self, from: data)
        return (event.fix, event.device)
    }

    /// Sorted keys, nil fields left out, numbers as `JSONEncoder` spells them; nil for a
    /// string that `JSONEncoder` escapes in a way of its own (control characters).
    func handWritten(device: String? = nil) -> String? {
        var out = "{"
        out.reserveCapacity(256)
        var first = true
        func key(_ name: String) {
            if !first { out += "," }
            first = false
            out += "\""
            out += name
            out += "\":"
        }
        func number(_ name: String, _ value: Double?) -> Bool {
            guard let value else { return true }
            guard value.isFinite else { return false }
            key(name)
            // `JSONEncoder`'s spelling: the shortest that reads back, without a ".0".
            var text = value.description
            if text.hasSuffix(".0") { text.removeLast(2) }
            out += text
            return true
        }
        func string(_ name: String, _ value: String?) -> Bool {
            guard let value else { return true }
            // `JSONValue`'s writer escapes quotes, backslashes, \n, \r and \t as `JSONEncoder`
            // does; other control characters each spell their own way.
            guard !value.unicodeScalars.contains(where: { $0.value < 0x20 && !"\n\r\t".unicodeScalars.contains($0) }) else { return false }
            key(name)
            out += String(decoding: JSONValue.string(value).jsonText, as: UTF8.self)
            return true
        }
        guard number("altitude", altitude), number("course", course), string("device", device),
              number("horizontalAccuracy", horizontalAccuracy),
              number("latitude", latitude), number("longitude", longitude), string("mode", mode.rawValue) else { return nil }
        if let satellitesUsed {
            key("satellitesUsed")
            out += String(satellitesUsed)
        }
        guard string("sourceProblem", sourceProblem), number("speed", speed), string("time", InternetTime.text(time)),
              number("verticalAccuracy", verticalAccuracy) else { return nil }
        out += "}"
        return out
    }

    /// The fix and its device when `data` is exactly the daemon's form of them, else nil
    /// (Foundation decides).
    static func handRead(_ data: Data) -> (fix: Fix, device: String?)? {
        data.withUnsafeBytes { bytes in
            var scanner = FixEventScanner(bytes: bytes)
            return scanner.scan()
        }
    }
}

/// A fix event's data as Foundation's coder writes and reads it: the fix's own fields and
/// `device` in one object (the hand-written form's fallback, and its reference in the tests
/// and the fuzzer).
public struct FixEventData: Codable, Sendable {
    public var fix: Fix
    public var device: String?

    private enum CodingKeys: String, CodingKey { case device }

    public init(fix: Fix, device: String?) {
        self.fix = fix
        self.device = device
    }

    public init(from decoder: any Decoder) throws {
        fix = try Fix(from: decoder)
        device = try decoder.container(keyedBy: CodingKeys.self).decodeIfPresent(String.self, forKey: .device)
    }

    public func encode(to encoder: any Encoder) throws {
        try fix.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(device, forKey: .device)
    }
}

/// One pass over a fix event's bytes that accepts only the daemon's spelling of it — what
/// `Fix.handWritten(device:)` writes — so that what it reads is what Foundation's decoder
/// would: the keys in the writer's (sorted) order, each at most once, no space; each number
/// the shortest that reads back, without ".0"; each string escaped only where the writer
/// escapes; the time in `InternetTime`'s form. Anything else is nil, and Foundation decides.
///
/// Why not `JSONValue` and a comparison with the fix written again, as before: that builds a
/// dictionary and a string for every fix, and on an idle client it was most of a fix's time
/// between the socket and the caller (`bench api-gps`).
private struct FixEventScanner {
    let bytes: UnsafeRawBufferPointer
    var at = 0

    /// The writer's keys, in its order.
    static let keys: [[UInt8]] = ["altitude", "course", "device", "horizontalAccuracy", "latitude", "longitude", "mode",
                                  "satellitesUsed", "sourceProblem", "speed", "time", "verticalAccuracy"].map { Array($0.utf8) }
    static let quote = UInt8(ascii: "\""), backslash = UInt8(ascii: "\\")

    mutating func scan() -> (fix: Fix, device: String?)? {
        guard take(UInt8(ascii: "{")) else { return nil }
        var numbers = [Double?](repeating: nil, count: Self.keys.count)
        var device: String?, mode: FixMode?, time: Date?, satellitesUsed: Int?, sourceProblem: String?
        var next = 0  // the first key still allowed: each after the one before, once
        while !take(UInt8(ascii: "}")) {
            if next > 0 { guard take(UInt8(ascii: ",")) else { return nil } }
            guard let index = key(from: next), take(UInt8(ascii: ":")) else { return nil }
            next = index + 1
            switch index {
            case 2: guard let text = string() else { return nil }; device = text
            case 6: guard let text = string(), let value = FixMode(rawValue: text) else { return nil }; mode = value
            case 7: guard let value = integer() else { return nil }; satellitesUsed = value
            case 8: guard let text = string() else { return nil }; sourceProblem = text
            case 10:
                guard let text = string(), let value = InternetTime.date(text), InternetTime.text(value) == text else { return nil }
                time = value
            default: guard let value = number() else { return nil }; numbers[index] = value
            }
        }
        guard at == bytes.count, let mode, let time else { return nil }
        let fix = Fix(mode: mode, latitude: numbers[4], longitude: numbers[5], altitude: numbers[0], horizontalAccuracy: numbers[3],
                      verticalAccuracy: numbers[11], speed: numbers[9], course: numbers[1], time: time,
                      satellitesUsed: satellitesUsed, sourceProblem: sourceProblem)
        return (fix, device)
    }

    mutating func take(_ byte: UInt8) -> Bool {
        guard at < bytes.count, bytes[at] == byte else { return false }
        at += 1
        return true
    }

    /// A key, quotes and all, when it is one of `keys[from...]`.
    mutating func key(from: Int) -> Int? {
        guard take(Self.quote) else { return nil }
        let start = at
        while at < bytes.count, bytes[at] != Self.quote { at += 1 }
        guard at < bytes.count else { return nil }
        let name = UnsafeRawBufferPointer(rebasing: bytes[start..<at])
        at += 1
        return (from..<Self.keys.count).first { Self.keys[$0].elementsEqual(name) }
    }

    /// The bytes a number may be spelled with, up to the next delimiter.
    mutating func token() -> String {
        let start = at
        while at < bytes.count, case let byte = bytes[at],
              (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || "-+.eE".utf8.contains(byte) { at += 1 }
        return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<at]), as: UTF8.self)
    }

    /// A finite number in the writer's spelling. "-0" is Foundation's: it reads it as the
    /// integer 0, a positive zero.
    mutating func number() -> Double? {
        let text = token()
        guard text != "-0", let value = Double(text), value.isFinite else { return nil }
        // `description` ends a whole number in ".0", which the writer leaves out.
        let written = value.description
        let matches = written.hasSuffix(".0") ? written.utf8.dropLast(2).elementsEqual(text.utf8) : written == text
        return matches ? value : nil
    }

    mutating func integer() -> Int? {
        let text = token()
        guard let value = Int(text), String(value) == text else { return nil }
        return value
    }

    /// A string escaped as the writer escapes (`"`, `\`, `\n`, `\r`, `\t`; no other control
    /// character, no other escape), valid UTF-8.
    mutating func string() -> String? {
        guard take(Self.quote) else { return nil }
        let start = at
        var unescaped: [UInt8]?  // only once an escape is met
        while at < bytes.count {
            let byte = bytes[at]
            if byte == Self.quote {
                defer { at += 1 }
                if let unescaped { return String(validating: unescaped, as: UTF8.self) }
                return String(validating: UnsafeRawBufferPointer(rebasing: bytes[start..<at]), as: UTF8.self)
            }
            guard byte >= 0x20 else { return nil }
            if byte == Self.backslash {
                guard at + 1 < bytes.count else { return nil }
                if unescaped == nil { unescaped = Array(UnsafeRawBufferPointer(rebasing: bytes[start..<at])) }
                switch bytes[at + 1] {
                case Self.quote: unescaped!.append(Self.quote)
                case Self.backslash: unescaped!.append(Self.backslash)
                case UInt8(ascii: "n"): unescaped!.append(0x0A)
                case UInt8(ascii: "r"): unescaped!.append(0x0D)
                case UInt8(ascii: "t"): unescaped!.append(0x09)
                default: return nil
                }
                at += 2
                continue
            }
            unescaped?.append(byte)
            at += 1
        }
        return nil
    }
}
