import FieldHAL
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Location on the channel (docs/plugin-protocol.md, "Location"): a fix has the fields of
/// the HTTP API's `Fix`.
extension PluginProtocol {
    /// A fix as the protocol carries it (the API's `Fix`: `mode`, degrees, metres, an ISO
    /// 8601 `time`), checked: a plugin's nonsense is its error, never the kit's position.
    public static func fix(from value: JSONValue, plugin: String) throws(FieldHALError) -> Fix {
        func wrong(_ detail: String) -> FieldHALError {
            FieldHALError(.protocolError, subject: "plugin \(plugin)", detail: "sent a gps.fix " + detail,
                          advice: "docs/plugin-protocol.md gives a fix's fields")
        }
        guard let object = value.object else { throw wrong("that is not an object") }
        guard let modeName = object["mode"]?.string, let mode = FixMode(rawValue: modeName) else {
            throw wrong("without a mode of no-fix, 2d or 3d")
        }
        guard let timeText = object["time"]?.string, let time = Self.date(timeText) else {
            throw wrong("without an ISO 8601 time")
        }
        func number(_ key: String, _ range: ClosedRange<Double>? = nil) throws(FieldHALError) -> Double? {
            guard let field = object[key], field != .null else { return nil }
            let value: Double
            switch field {
            case .integer(let whole): value = Double(whole)
            case .number(let real): value = real
            default: throw wrong("whose \(key) is not a number")
            }
            guard value.isFinite, range.map({ $0.contains(value) }) ?? true else { throw wrong("whose \(key) is out of range: \(value)") }
            return value
        }
        var fix = Fix(mode: mode, latitude: try number("latitude", -90...90), longitude: try number("longitude", -180...180),
                      altitude: try number("altitude"), horizontalAccuracy: try number("horizontalAccuracy", 0...1e7),
                      verticalAccuracy: try number("verticalAccuracy", 0...1e7), speed: try number("speed", 0...1e4),
                      course: try number("course", 0...360), time: time)
        if let satellites = object["satellitesUsed"]?.integer, satellites >= 0, satellites < 1000 { fix.satellitesUsed = Int(satellites) }
        if let problem = object["sourceProblem"]?.string { fix.sourceProblem = "plugin \(plugin): \(problem)" }
        if mode >= .twoD && (fix.latitude == nil || fix.longitude == nil) { throw wrong("of mode \(modeName) without a position") }
        return fix
    }

    // The format styles only for what `InternetTime` does not read (it reads RFC 3339, what
    // every plugin of ours and Python's isoformat write): a style costs more per date than
    // the rest of a fix's trip between processes.
    private static let fractionalTime = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
    private static let wholeTime = Date.ISO8601FormatStyle()

    static func date(_ text: String) -> Date? {
        InternetTime.date(text) ?? (try? fractionalTime.parse(text)) ?? (try? wholeTime.parse(text))
    }

    /// A fix as a plugin sends it in `gps.fix`: what `fix(from:plugin:)` reads back.
    public static func value(of fix: Fix) -> JSONValue {
        var object: [String: JSONValue] = ["mode": .string(fix.mode.rawValue), "time": .string(timeText(fix.time))]
        func put(_ key: String, _ number: Double?) {
            if let number, number.isFinite { object[key] = .number(number) }
        }
        put("latitude", fix.latitude)
        put("longitude", fix.longitude)
        put("altitude", fix.altitude)
        put("horizontalAccuracy", fix.horizontalAccuracy)
        put("verticalAccuracy", fix.verticalAccuracy)
        put("speed", fix.speed)
        put("course", fix.course)
        if let satellites = fix.satellitesUsed { object["satellitesUsed"] = .integer(Int64(satellites)) }
        if let problem = fix.sourceProblem { object["sourceProblem"] = .string(problem) }
        return .object(object)
    }

    static func timeText(_ time: Date) -> String {
        InternetTime.text(time)
    }
}
