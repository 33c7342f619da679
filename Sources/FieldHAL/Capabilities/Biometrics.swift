/// Fingers as fprintd names them.
public enum Finger: String, Sendable, Codable, CaseIterable {
    case leftThumb = "left-thumb", leftIndex = "left-index-finger", leftMiddle = "left-middle-finger"
    case leftRing = "left-ring-finger", leftLittle = "left-little-finger"
    case rightThumb = "right-thumb", rightIndex = "right-index-finger", rightMiddle = "right-middle-finger"
    case rightRing = "right-ring-finger", rightLittle = "right-little-finger"
}

/// expo-local-authentication's `hasHardwareAsync` and `isEnrolledAsync` in one answer.
public struct BiometricAvailability: Sendable, Equatable, Codable {
    public var hasSensor: Bool
    public var enrolledFingers: [Finger]

    public init(hasSensor: Bool, enrolledFingers: [Finger]) {
        self.hasSensor = hasSensor
        self.enrolledFingers = enrolledFingers
    }

    public var isEnrolled: Bool { hasSensor && !enrolledFingers.isEmpty }
}

/// Why a scan must be repeated (fprintd's `verify-retry-*` results).
public enum BiometricRetryReason: String, Sendable, Codable {
    case retryScan = "retry-scan"
    case swipeTooShort = "swipe-too-short"
    case fingerNotCentered = "finger-not-centered"
    case removeAndRetry = "remove-and-retry"
}

/// The outcome of one verification. A device that vanished or failed throws instead.
public enum BiometricResult: Sendable, Equatable, Codable {
    case match
    case noMatch
    case retry(BiometricRetryReason)
}

/// One step of an enrollment (fprintd's `enroll-*` results).
public enum EnrollStage: Sendable, Equatable, Codable {
    case stagePassed(Int)
    case retry(BiometricRetryReason)
    case completed
}

public protocol BiometricAuthenticator: Device {
    func availability() async throws -> BiometricAvailability

    /// Waits for one scan and compares it with the enrolled prints. The sensor is always
    /// released afterwards, also on timeout, error and cancellation.
    func verify(timeout: Duration) async throws -> BiometricResult

    /// Enrolls `finger`, reporting each stage; returns when enrollment completes.
    func enroll(_ finger: Finger, progress: @Sendable (EnrollStage) -> Void) async throws
}
