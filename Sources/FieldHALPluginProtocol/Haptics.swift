import FieldHAL

/// Haptics on the channel (docs/plugin-protocol.md, "Haptics", protocol 1.1):
/// `haptics.play` with a named pattern or custom steps; the answer comes when the pattern
/// has finished.
extension PluginProtocol {
    public enum HapticsMethod {
        public static let play = "haptics.play"
    }

    /// `{"pattern": "warning"}` for a named pattern; `{"steps": [...]}` for a custom one,
    /// each step `{"effect": "rumble", "strong": 0.8, "weak": 0.2, "durationMs": 120,
    /// "pauseMs": 80}` or `{"effect": "periodic", "magnitude": 0.5, "periodMs": 20, …}`.
    public static func value(of pattern: HapticPattern) -> JSONValue {
        guard case .custom(let steps) = pattern else { return .object(["pattern": .string(pattern.name)]) }
        return .object(["steps": .array(steps.map { step in
            var object: [String: JSONValue] = ["durationMs": .integer(Int64(step.durationMilliseconds)),
                                               "pauseMs": .integer(Int64(step.pauseMilliseconds))]
            switch step.effect {
            case .rumble(let strong, let weak):
                object["effect"] = .string("rumble")
                object["strong"] = .number(strong)
                object["weak"] = .number(weak)
            case .periodic(let magnitude, let period):
                object["effect"] = .string("periodic")
                object["magnitude"] = .number(magnitude)
                object["periodMs"] = .integer(Int64(period))
            }
            return .object(object)
        })])
    }

    /// `haptics.play`'s answer: what was played (`{"steps": 3, "milliseconds": 1500}`).
    public static func value(of played: HapticsPlayed) -> JSONValue {
        .object(["steps": .integer(Int64(played.steps)), "milliseconds": .integer(Int64(played.milliseconds))])
    }

    /// What a `haptics.play` answer says was played: nil for `null` (a plugin that does not
    /// say); a `protocolError` for anything else that is not a count of at least one step
    /// and a length of at least none.
    public static func played(from answer: JSONValue, plugin: String) throws(FieldHALError) -> HapticsPlayed? {
        if case .null = answer { return nil }
        guard let steps = answer["steps"]?.integer, (1...Int64(Int32.max)).contains(steps),
              let milliseconds = answer["milliseconds"]?.integer, (0...Int64(Int32.max)).contains(milliseconds) else {
            throw FieldHALError(.protocolError, subject: "plugin \(plugin)",
                                detail: "its haptics.play answer is neither null nor {\"steps\": 1 or more, \"milliseconds\": 0 or more}",
                                advice: "docs/plugin-protocol.md, Haptics")
        }
        return HapticsPlayed(steps: Int(steps), milliseconds: Int(milliseconds))
    }

    /// The pattern a request names, checked as any custom pattern is (magnitudes 0…1,
    /// durations 1 ms…10 s, at most 64 steps).
    public static func pattern(from parameters: JSONValue, subject: String) throws(FieldHALError) -> HapticPattern {
        func wrong(_ detail: String) -> FieldHALError {
            FieldHALError(.invalidArgument, subject: subject, detail: detail, advice: "docs/plugin-protocol.md gives a pattern's fields")
        }
        if let name = parameters["pattern"]?.string {
            guard let pattern = HapticPattern.namedPatterns[name] else {
                throw wrong("no pattern named \(name); the named ones are \(HapticPattern.namedPatterns.keys.sorted().joined(separator: ", "))")
            }
            return pattern
        }
        guard let steps = parameters["steps"]?.array, (1...64).contains(steps.count) else {
            throw wrong("give a pattern by name or 1 to 64 steps")
        }
        func number(_ step: JSONValue, _ key: String) throws(FieldHALError) -> Double {
            switch step[key] {
            case .integer(let whole)?: return Double(whole)
            case .number(let real)?: return real
            default: throw wrong("a step without \(key) as a number")
            }
        }
        func whole(_ step: JSONValue, _ key: String, default fallback: Int64? = nil) throws(FieldHALError) -> Int {
            guard let value = step[key]?.integer ?? fallback, value >= 0, value <= 1_000_000 else {
                throw wrong("a step without \(key) as a whole number of milliseconds")
            }
            return Int(value)
        }
        var parsed: [HapticStep] = []
        for step in steps {
            let effect: HapticStep.Effect
            switch step["effect"]?.string {
            case "rumble": effect = .rumble(strong: try number(step, "strong"), weak: try number(step, "weak"))
            case "periodic": effect = .periodic(magnitude: try number(step, "magnitude"), periodMilliseconds: try whole(step, "periodMs"))
            default: throw wrong("a step whose effect is not rumble or periodic")
            }
            parsed.append(HapticStep(effect, durationMilliseconds: try whole(step, "durationMs"), pauseMilliseconds: try whole(step, "pauseMs", default: 0)))
        }
        let pattern = HapticPattern.custom(parsed)
        do {
            try pattern.validate(subject: subject)
        } catch let error as FieldHALError {
            throw error
        } catch {
            throw wrong("\(error)")
        }
        return pattern
    }

    /// How long a pattern plays: its steps' durations and pauses.
    /// How long the host waits for `haptics.play` before the plugin's own grace: a custom
    /// pattern's length, which the host knows; a named one is the plugin's theme, whose
    /// length only the plugin knows, so it may take up to `namedPatternBound`.
    public static func bound(of pattern: HapticPattern) -> Duration {
        guard case .custom = pattern else { return max(namedPatternBound, length(of: pattern)) }
        return length(of: pattern)
    }

    /// The longest a named pattern may play in a plugin's theme (docs/plugin-protocol.md).
    public static let namedPatternBound = Duration.seconds(30)

    public static func length(of pattern: HapticPattern) -> Duration {
        .milliseconds(pattern.steps.reduce(0) { $0 + $1.durationMilliseconds + $1.pauseMilliseconds })
    }
}
