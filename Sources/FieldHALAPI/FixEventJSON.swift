import FieldHAL
import Foundation

/// A fix event's data, written and read by hand: the same bytes as `FieldHALAPI.encoder`
/// writes and the same `Fix` as `FieldHALAPI.decoder` reads.
///
/// Why: a fix is the event that comes often and is measured against the in-process watch
/// (issue 20), and on an idle daemon or client each one is handled cold. `JSONEncoder` took
/// some 10 µs hot and 50–100 µs cold for one fix, `JSONDecoder` 15 µs hot and 65–100 µs
/// cold (its generic containers, the date strategy's closure): more, on each side, than the
/// socket between them. By hand with `JSONValue`'s reader, a few microseconds.
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
        guard let value = try? JSONValue(parsing: data), case .object(let object) = value,
              let modeName = object["mode"]?.string, let mode = FixMode(rawValue: modeName),
              let timeText = object["time"]?.string, let time = InternetTime.date(timeText) else { return nil }
        var malformed = false
        func number(_ name: String) -> Double? {
            switch object[name] {
            case nil, .null?: return nil
            case .integer(let whole)?: return Double(whole)
            case .number(let real)?: return real
            default:
                malformed = true
                return nil
            }
        }
        var fix = Fix(mode: mode, latitude: number("latitude"), longitude: number("longitude"), altitude: number("altitude"),
                      horizontalAccuracy: number("horizontalAccuracy"), verticalAccuracy: number("verticalAccuracy"),
                      speed: number("speed"), course: number("course"), time: time)
        switch object["satellitesUsed"] {
        case nil, .null?: break
        case .integer(let whole)? where Int(exactly: whole) != nil: fix.satellitesUsed = Int(whole)
        default: malformed = true
        }
        switch object["sourceProblem"] {
        case nil, .null?: break
        case .string(let text)?: fix.sourceProblem = text
        default: malformed = true
        }
        var device: String?
        switch object["device"] {
        case nil, .null?: break
        case .string(let text)?: device = text
        default: malformed = true
        }
        // Only the daemon's own form, byte for byte: a repeated key (Foundation takes the
        // first, `JSONValue` the last), spaces, another spelling of a number or a time — all
        // go to Foundation. Writing the fix again costs a few microseconds.
        guard !malformed, let written = fix.handWritten(device: device), written.utf8.elementsEqual(data) else { return nil }
        return (fix, device)
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
