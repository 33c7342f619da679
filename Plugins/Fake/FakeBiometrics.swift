import FieldHAL

/// A fingerprint sensor with scripted outcomes: each verify takes the next outcome of the
/// script (the last one repeats), after `scan_delay_ms`.
actor FakeBiometricAuthenticator: BiometricAuthenticator {
    enum Outcome: String, CaseIterable, Sendable {
        case match
        case noMatch = "no-match"
        case retry
        /// The sensor is unplugged mid-verify.
        case gone
        /// Nobody touches the sensor: the verify runs into its timeout.
        case noFinger = "no-finger"
    }

    nonisolated let deviceName: String
    private let hasSensor: Bool
    private var enrolled: [Finger]
    private let outcomes: [Outcome]
    private var nextOutcome = 0
    private let scanDelay: Duration
    private var sensorClaimed = false

    init(deviceName: String, hasSensor: Bool, enrolled: [Finger], outcomes: [Outcome], scanDelay: Duration) {
        self.deviceName = deviceName
        self.hasSensor = hasSensor
        self.enrolled = enrolled
        self.outcomes = outcomes.isEmpty ? [.match] : outcomes
        self.scanDelay = scanDelay
    }

    /// Whether a verify or enroll holds the sensor now (tests check it is released).
    var isSensorClaimed: Bool { sensorClaimed }

    func availability() async throws -> BiometricAvailability {
        BiometricAvailability(hasSensor: hasSensor, enrolledFingers: hasSensor ? enrolled : [])
    }

    func verify(timeout: Duration) async throws -> BiometricResult {
        let subject = "biometrics \(deviceName)"
        try claimSensor(subject)
        defer { sensorClaimed = false }
        guard !enrolled.isEmpty else {
            throw FieldHALError(.unavailable, subject: subject, detail: "no fingerprints enrolled",
                                advice: "enroll one with `fieldhal bio enroll`")
        }
        let outcome = outcomes[min(nextOutcome, outcomes.count - 1)]
        nextOutcome += 1
        if outcome == .noFinger || scanDelay > timeout {
            try await sleepCancellable(for: timeout, subject: subject)
            throw FieldHALError.timeout(subject, after: timeout, waitingFor: "finger on the sensor")
        }
        try await sleepCancellable(for: scanDelay, subject: subject)
        switch outcome {
        case .match: return .match
        case .noMatch: return .noMatch
        case .retry: return .retry(.fingerNotCentered)
        case .gone, .noFinger:
            throw FieldHALError(.disconnected, subject: subject, detail: "sensor disconnected during verify",
                                advice: "check the sensor's USB cable")
        }
    }

    func enroll(_ finger: Finger, progress: @Sendable (EnrollStage) -> Void) async throws {
        let subject = "biometrics \(deviceName)"
        try claimSensor(subject)
        defer { sensorClaimed = false }
        for stage in 1...5 {
            try await sleepCancellable(for: scanDelay, subject: subject)
            progress(.stagePassed(stage))
        }
        if !enrolled.contains(finger) { enrolled.append(finger) }
        progress(.completed)
    }

    private func claimSensor(_ subject: String) throws {
        guard hasSensor else {
            throw FieldHALError(.deviceNotFound, subject: subject, detail: "no fingerprint sensor")
        }
        guard !sensorClaimed else {
            throw FieldHALError(.busy, subject: subject, detail: "sensor already in use by another verify or enroll")
        }
        sensorClaimed = true
    }

    func close() {}
}
