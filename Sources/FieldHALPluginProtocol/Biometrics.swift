import FieldHAL

/// Biometrics on the channel (docs/plugin-protocol.md, "Biometrics", protocol 1.2):
/// `biometrics.availability`, `biometrics.verify` and `biometrics.enroll`, whose stages
/// come as `$/progress` notifications before its answer. Fingers, results and retry
/// reasons carry fprintd's names, as the API does.
extension PluginProtocol {
    public enum BiometricsMethod {
        public static let availability = "biometrics.availability"
        public static let verify = "biometrics.verify"
        public static let enroll = "biometrics.enroll"
    }

    /// How long the host gives a plugin to say whether it has a sensor and which fingers
    /// are enrolled (fprintd answers over D-Bus in milliseconds; a hung one is a timeout).
    public static let availabilityBound = Duration.seconds(10)

    /// `{"hasSensor": true, "enrolledFingers": ["right-index-finger"]}`.
    public static func value(of availability: BiometricAvailability) -> JSONValue {
        .object(["hasSensor": .bool(availability.hasSensor),
                 "enrolledFingers": .array(availability.enrolledFingers.map { .string($0.rawValue) })])
    }

    public static func availability(from value: JSONValue, plugin: String) throws(FieldHALError) -> BiometricAvailability {
        guard let hasSensor = value["hasSensor"]?.bool, let names = value["enrolledFingers"]?.array else {
            throw wrongBiometrics(plugin, "an availability without hasSensor and enrolledFingers")
        }
        var fingers: [Finger] = []
        for name in names {
            guard let finger = name.string.flatMap(Finger.init(rawValue:)) else {
                throw wrongBiometrics(plugin, "an enrolled finger fprintd does not name: \(name)")
            }
            fingers.append(finger)
        }
        return BiometricAvailability(hasSensor: hasSensor, enrolledFingers: fingers)
    }

    /// `{"result": "match"}`, `{"result": "no-match"}` or `{"result": "retry", "reason": "swipe-too-short"}`.
    public static func value(of result: BiometricResult) -> JSONValue {
        switch result {
        case .match: return .object(["result": .string("match")])
        case .noMatch: return .object(["result": .string("no-match")])
        case .retry(let reason): return .object(["result": .string("retry"), "reason": .string(reason.rawValue)])
        }
    }

    public static func result(from value: JSONValue, plugin: String) throws(FieldHALError) -> BiometricResult {
        switch value["result"]?.string {
        case "match": return .match
        case "no-match": return .noMatch
        case "retry": return .retry(try reason(in: value, plugin: plugin))
        default: throw wrongBiometrics(plugin, "a verification result that is not match, no-match or retry")
        }
    }

    /// `{"stage": "passed", "number": 2}`, `{"stage": "retry", "reason": …}` or `{"stage": "completed"}`.
    public static func value(of stage: EnrollStage) -> JSONValue {
        switch stage {
        case .stagePassed(let number): return .object(["stage": .string("passed"), "number": .integer(Int64(number))])
        case .retry(let reason): return .object(["stage": .string("retry"), "reason": .string(reason.rawValue)])
        case .completed: return .object(["stage": .string("completed")])
        }
    }

    public static func stage(from value: JSONValue, plugin: String) throws(FieldHALError) -> EnrollStage {
        switch value["stage"]?.string {
        case "passed":
            guard let number = value["number"]?.integer, (1...100).contains(number) else {
                throw wrongBiometrics(plugin, "an enrollment stage passed without its number (1 to 100)")
            }
            return .stagePassed(Int(number))
        case "retry": return .retry(try reason(in: value, plugin: plugin))
        case "completed": return .completed
        default: throw wrongBiometrics(plugin, "an enrollment stage that is not passed, retry or completed")
        }
    }

    /// `{"timeoutMs": N}` for `biometrics.verify`: 1 ms to a day.
    public static func verifyParameters(timeout: Duration) -> JSONValue {
        .object(["timeoutMs": .integer(Int64(min(max(timeout.milliseconds, 1), longestWait.milliseconds)))])
    }

    /// `{"finger": "right-index-finger"}`: the finger a `biometrics.enroll` names.
    public static func finger(in parameters: JSONValue, subject: String) throws(FieldHALError) -> Finger {
        guard let finger = parameters["finger"]?.string.flatMap(Finger.init(rawValue:)) else {
            throw FieldHALError(.invalidArgument, subject: subject,
                                detail: "finger must be one of \(Finger.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return finger
    }

    private static func reason(in value: JSONValue, plugin: String) throws(FieldHALError) -> BiometricRetryReason {
        guard let reason = value["reason"]?.string.flatMap(BiometricRetryReason.init(rawValue:)) else {
            throw wrongBiometrics(plugin, "a retry without a reason fprintd names (retry-scan, swipe-too-short, finger-not-centered, remove-and-retry)")
        }
        return reason
    }

    private static func wrongBiometrics(_ plugin: String, _ detail: String) -> FieldHALError {
        FieldHALError(.protocolError, subject: "plugin \(plugin)", detail: "sent " + detail,
                      advice: "docs/plugin-protocol.md gives the biometrics values")
    }
}
