#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Named haptic patterns as data, in the spirit of feedbackd's themes: a JSON file maps each
/// name (success, warning, …) to its steps, so a kit with a weak motor or a strong one gets
/// its own feel without code. Plugins take a `theme` file; the built-in one is below.
///
/// ```json
/// { "name": "gentle",
///   "patterns": { "warning": [ { "effect": "rumble", "strong": 0.5, "weak": 0.3, "duration-ms": 120, "pause-ms": 80 },
///                              { "effect": "periodic", "magnitude": 0.4, "period-ms": 20, "duration-ms": 120 } ] } }
/// ```
/// A theme may leave names out; they fall back to the built-in theme.
public struct HapticTheme: Sendable, Equatable {
    public var name: String
    public var patterns: [String: [HapticStep]]

    public init(name: String, patterns: [String: [HapticStep]]) {
        self.name = name
        self.patterns = patterns
    }

    /// The steps for `pattern`: a custom pattern's own, else this theme's, else the built-in.
    public func steps(for pattern: HapticPattern) -> [HapticStep] {
        if case .custom(let steps) = pattern { return steps }
        return patterns[pattern.name] ?? Self.builtIn.patterns[pattern.name] ?? []
    }

    /// Reads and checks a theme file: every step within the limits `HapticPattern.validate` sets.
    public static func load(path: String) throws -> HapticTheme {
        guard let bytes = try RegularFile.read(path, limit: 1 << 20, what: "haptic theme") else {
            throw FieldHALError(.deviceNotFound, subject: "haptic theme \(path)", detail: "no such file")
        }
        return try decode(bytes, source: path)
    }

    public static func decode(_ bytes: [UInt8], source: String) throws -> HapticTheme {
        struct File: Decodable { var name: String?; var patterns: [String: [Step]] }
        struct Step: Decodable {
            var effect: String
            var strong, weak, magnitude: Double?
            var periodMilliseconds: Int?
            var durationMilliseconds: Int
            var pauseMilliseconds: Int?
            enum CodingKeys: String, CodingKey {
                case effect, strong, weak, magnitude
                case periodMilliseconds = "period-ms", durationMilliseconds = "duration-ms", pauseMilliseconds = "pause-ms"
            }
        }
        let subject = "haptic theme \(source)"
        let file: File
        do {
            file = try JSONDecoder().decode(File.self, from: Data(bytes))
        } catch {
            throw FieldHALError(.malformedData, subject: subject, detail: "not a theme: \(error.shortDescription)",
                                advice: "see HapticTheme's documentation for the format")
        }
        var patterns: [String: [HapticStep]] = [:]
        for (name, records) in file.patterns {
            guard HapticPattern.namedPatterns[name] != nil else {
                throw FieldHALError(.malformedData, subject: subject, detail: "unknown pattern \"\(name)\"",
                                    advice: "themes define \(HapticPattern.namedPatterns.keys.sorted().joined(separator: ", "))")
            }
            let steps = try records.enumerated().map { index, record -> HapticStep in
                let effect: HapticStep.Effect
                switch record.effect {
                case "rumble": effect = .rumble(strong: record.strong ?? 0, weak: record.weak ?? 0)
                case "periodic": effect = .periodic(magnitude: record.magnitude ?? 0, periodMilliseconds: record.periodMilliseconds ?? 0)
                default:
                    throw FieldHALError(.malformedData, subject: subject,
                                        detail: "\(name) step \(index + 1): effect must be \"rumble\" or \"periodic\"")
                }
                return HapticStep(effect, durationMilliseconds: record.durationMilliseconds, pauseMilliseconds: record.pauseMilliseconds ?? 0)
            }
            try HapticPattern.custom(steps).validate(subject: "\(subject): \(name)")
            patterns[name] = steps
        }
        return HapticTheme(name: file.name ?? source, patterns: patterns)
    }

    /// FieldHAL's own theme: short, distinct patterns that read well on a small rumble motor.
    public static let builtIn: HapticTheme = {
        // Force-unwrapped on purpose: the built-in theme is a constant, checked by the tests.
        try! decode(Array(builtInJSON.utf8), source: "built-in")
    }()

    static let builtInJSON = """
    {
      "name": "fieldhal-default",
      "patterns": {
        "success": [
          { "effect": "rumble", "strong": 0.4, "weak": 0.6, "duration-ms": 60, "pause-ms": 80 },
          { "effect": "rumble", "strong": 0.6, "weak": 0.8, "duration-ms": 80 }
        ],
        "warning": [
          { "effect": "rumble", "strong": 0.8, "weak": 0.5, "duration-ms": 150, "pause-ms": 100 },
          { "effect": "rumble", "strong": 0.8, "weak": 0.5, "duration-ms": 150 }
        ],
        "error": [
          { "effect": "rumble", "strong": 1.0, "weak": 0.7, "duration-ms": 100, "pause-ms": 60 },
          { "effect": "rumble", "strong": 1.0, "weak": 0.7, "duration-ms": 100, "pause-ms": 60 },
          { "effect": "rumble", "strong": 1.0, "weak": 0.7, "duration-ms": 250 }
        ],
        "light": [ { "effect": "rumble", "strong": 0.0, "weak": 0.4, "duration-ms": 30 } ],
        "medium": [ { "effect": "rumble", "strong": 0.5, "weak": 0.5, "duration-ms": 40 } ],
        "heavy": [ { "effect": "rumble", "strong": 1.0, "weak": 0.6, "duration-ms": 60 } ]
      }
    }
    """
}

extension Error {
    /// A decoding error's gist, without Swift's full coding path dump.
    var shortDescription: String {
        if let decoding = self as? DecodingError {
            switch decoding {
            case .dataCorrupted(let context), .keyNotFound(_, let context), .typeMismatch(_, let context), .valueNotFound(_, let context):
                let path = context.codingPath.map(\.stringValue).joined(separator: ".")
                return path.isEmpty ? context.debugDescription : "\(path): \(context.debugDescription)"
            @unknown default: return "\(decoding)"
            }
        }
        return "\(self)"
    }
}
