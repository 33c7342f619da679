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

    /// The pattern as steps. Named patterns are data, the same on every backend.
    public var steps: [HapticStep] {
        switch self {
        case .success:
            [HapticStep(.rumble(strong: 0.4, weak: 0.6), durationMilliseconds: 60, pauseMilliseconds: 80),
             HapticStep(.rumble(strong: 0.6, weak: 0.8), durationMilliseconds: 80)]
        case .warning:
            [HapticStep(.rumble(strong: 0.8, weak: 0.5), durationMilliseconds: 150, pauseMilliseconds: 100),
             HapticStep(.rumble(strong: 0.8, weak: 0.5), durationMilliseconds: 150)]
        case .error:
            [HapticStep(.rumble(strong: 1.0, weak: 0.7), durationMilliseconds: 100, pauseMilliseconds: 60),
             HapticStep(.rumble(strong: 1.0, weak: 0.7), durationMilliseconds: 100, pauseMilliseconds: 60),
             HapticStep(.rumble(strong: 1.0, weak: 0.7), durationMilliseconds: 250)]
        case .light: [HapticStep(.rumble(strong: 0.0, weak: 0.4), durationMilliseconds: 30)]
        case .medium: [HapticStep(.rumble(strong: 0.5, weak: 0.5), durationMilliseconds: 40)]
        case .heavy: [HapticStep(.rumble(strong: 1.0, weak: 0.6), durationMilliseconds: 60)]
        case .custom(let steps): steps
        }
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
    /// Plays the pattern and returns when it has finished. Cancelling stops the effect.
    func play(_ pattern: HapticPattern) async throws
}
