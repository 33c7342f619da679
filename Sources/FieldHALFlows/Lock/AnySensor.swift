import FieldHAL

/// Several fingerprint sensors as one, for the lock's fingerprint unlock on a kit with more
/// than one (a door panel and a handset, a bench of them): every sensor waits for a finger at
/// once, and the first scan made on any of them is the answer — a match, no match, or a scan
/// to repeat — the other waits cancelled (fprintd releases each sensor when its verify ends).
///
/// fprintd keeps prints per sensor, so a finger enrolled on one is no match on another: the
/// lock counts that as the failed scan it is.
public struct AnySensor: BiometricAuthenticator {
    public let sensors: [any BiometricAuthenticator]

    /// `sensors` must not be empty.
    public init(_ sensors: [any BiometricAuthenticator]) {
        precondition(!sensors.isEmpty, "AnySensor needs a sensor")
        self.sensors = sensors
    }

    /// One sensor as itself, several as the first scan on any of them; nil for none.
    public static func of(_ sensors: [any BiometricAuthenticator]) -> (any BiometricAuthenticator)? {
        sensors.count > 1 ? AnySensor(sensors) : sensors.first
    }

    public var deviceName: String { sensors.map(\.deviceName).joined(separator: " + ") }

    /// A sensor if any has one; the fingers enrolled on any, each once. A sensor that cannot
    /// say is left out while another can; when none can, the first one's failure.
    public func availability() async throws -> BiometricAvailability {
        var answers: [BiometricAvailability] = []
        var failures: [any Error] = []
        for sensor in sensors {
            do { answers.append(try await sensor.availability()) } catch { failures.append(error) }
        }
        guard !answers.isEmpty else { throw failures[0] }
        var fingers: [Finger] = []
        for finger in answers.flatMap(\.enrolledFingers) where !fingers.contains(finger) { fingers.append(finger) }
        return BiometricAvailability(hasSensor: answers.contains { $0.hasSensor }, enrolledFingers: fingers)
    }

    /// The first scan any sensor makes within `timeout`. When none does: the first failure
    /// of a device (a sensor unplugged, one with no prints), which says more than the
    /// others' timeouts; else the timeout.
    public func verify(timeout: Duration) async throws -> BiometricResult {
        try await firstAnswer(sensors.map { sensor in { try await sensor.verify(timeout: timeout) } })
    }

    /// Enrollment is not raced (a finger on two sensors would enroll twice): the first
    /// sensor enrolls; `fieldhal bio enroll --device NAME` picks another.
    public func enroll(_ finger: Finger, progress: @Sendable (EnrollStage) -> Void) async throws {
        try await sensors[0].enroll(finger, progress: progress)
    }

    public func close() async {
        for sensor in sensors { await sensor.close() }
    }
}
