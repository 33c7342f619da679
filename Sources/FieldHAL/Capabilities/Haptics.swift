/// One step of a haptic pattern, in the terms evdev force feedback offers.
public struct HapticStep: Sendable, Equatable, Codable {
    public enum Effect: Sendable, Equatable, Codable {
        /// `FF_RUMBLE`: two motors, magnitudes 0…1.
        case rumble(strong: Double, weak: Double)
        /// `FF_PERIODIC` sine wave: magnitude 0…1, period in milliseconds.
        case periodic(magnitude: Double, periodMilliseconds: Int)
    }

    public var effect: Effect
    public var durationMilliseconds: Int
    /// Silence after the step, before the next one.
    public var pauseMilliseconds: Int

    public init(_ effect: Effect, durationMilliseconds: Int, pauseMilliseconds: Int = 0) {
        self.effect = effect
        self.durationMilliseconds = durationMilliseconds
        self.pauseMilliseconds = pauseMilliseconds
    }
}

/// expo-haptics' vocabulary: notification feedback (success, warning, error) and impact
/// feedback (light, medium, heavy), plus custom sequences.
public enum HapticPattern: Sendable, Equatable, Codable {
    case success, warning, error
    case light, medium, heavy
    case custom([HapticStep])

    public static let namedPatterns: [String: HapticPattern] = [
        "success": .success, "warning": .warning, "error": .error,
        "light": .light, "medium": .medium, "heavy": .heavy,
    ]

    public var name: String {
        switch self {
        case .success: "success"
        case .warning: "warning"
        case .error: "error"
        case .light: "light"
        case .medium: "medium"
        case .heavy: "heavy"
        case .custom: "custom"
        }
    }

    /// The pattern as steps, named patterns from the built-in theme (`HapticTheme.builtIn`).
    public var steps: [HapticStep] {
        // A custom pattern must not touch the built-in theme: decoding that theme validates
        // its steps as custom patterns.
        if case .custom(let steps) = self { return steps }
        return HapticTheme.builtIn.steps(for: self)
    }

    /// Rejects custom steps with magnitudes outside 0…1 or durations outside 1 ms…10 s.
    public func validate(subject: String) throws {
        guard !steps.isEmpty else { throw FieldHALError(.invalidArgument, subject: subject, detail: "a pattern needs at least one step") }
        for (index, step) in steps.enumerated() {
            let magnitudes: [Double] = switch step.effect {
            case .rumble(let strong, let weak): [strong, weak]
            case .periodic(let magnitude, let period): period > 0 ? [magnitude] : [-1]
            }
            guard magnitudes.allSatisfy({ (0...1).contains($0) }),
                  (1...10_000).contains(step.durationMilliseconds),
                  (0...10_000).contains(step.pauseMilliseconds) else {
                throw FieldHALError(.invalidArgument, subject: subject,
                                    detail: "step \(index + 1): magnitudes must be 0…1, duration 1–10000 ms, pause 0–10000 ms")
            }
        }
    }
}

public protocol HapticsEngine: Device {
    /// Plays the pattern and returns when it has finished, saying what was played: a named
    /// pattern as the device's theme has it, which need not be FieldHAL's built-in theme.
    /// Cancelling stops the effect.
    @discardableResult
    func play(_ pattern: HapticPattern) async throws -> HapticsPlayed
}

/// What a haptics device played: how many steps and how long, pauses included.
public struct HapticsPlayed: Sendable, Equatable, Codable {
    public var steps: Int
    public var milliseconds: Int

    public init(steps: Int, milliseconds: Int) {
        self.steps = steps
        self.milliseconds = milliseconds
    }

    /// `steps`, played as they are.
    public init(_ steps: [HapticStep]) {
        self.init(steps: steps.count, milliseconds: steps.reduce(0) { $0 + $1.durationMilliseconds + $1.pauseMilliseconds })
    }
}
