import FieldHAL
import FieldHALPluginHost
import Foundation
import TestSupport
import Testing

/// Biometrics from an external plugin process (the Python fixture), through the kit as
/// any configuration loads it: the values carried, an enrollment's `$/progress` stages in
/// order before its answer (and one for another request ignored), a stage the plugin gets
/// wrong. The real sensor out of process is `FprintdPluginTests`, against fprintd.
@Suite(.timeLimit(.minutes(1))) struct ExternalBiometricsTests {
    static let manifest = PluginFixtures.manifest(
        name: "prints", minor: 2, capabilities: #"{"biometrics": {"parameters": [{"name": "device", "type": "string", "required": true, "help": "the sensor"}]}}"#)

    func load(_ mode: String) async throws -> (Kit, PluginFixtures) {
        let fixtures = try PluginFixtures()
        try fixtures.plugin("prints", mode: mode, manifest: Self.manifest)
        return (try await fixtures.kit("[biometrics]\nplugin = \"prints\"\ndevice = \"/dev/fp0\"\n"), fixtures)
    }

    @Test func availabilityVerifyAndEnrollStagesComeThroughInOrder() async throws {
        let (kit, fixtures) = try await load("good")
        let sensor = try kit.biometrics()
        #expect(sensor.deviceName == "fixture /dev/fp0 (plugin prints)")
        #expect(try await sensor.availability() == BiometricAvailability(hasSensor: true, enrolledFingers: [.rightIndex]))
        #expect(try await sensor.verify(timeout: .seconds(2)) == .match)
        let stages = LockedValue<[EnrollStage]>([])
        try await sensor.enroll(.rightIndex) { stage in stages.withLock { $0.append(stage) } }
        // The fixture's step for request id + 1000 is not among them.
        #expect(stages.value == [.stagePassed(1), .retry(.swipeTooShort), .stagePassed(2), .completed])
        await kit.close()
        #expect(fixtures.leftovers().isEmpty)
    }

    @Test func aRetryCarriesItsReason() async throws {
        let (kit, _) = try await load("retry")
        #expect(try await kit.biometrics().verify(timeout: .seconds(2)) == .retry(.fingerNotCentered))
        await kit.close()
    }

    @Test func aStageThePluginGetsWrongEndsTheEnrollmentAsItsProtocolError() async throws {
        let (kit, fixtures) = try await load("bad-stage")
        let sensor = try kit.biometrics()
        let stages = LockedValue<[EnrollStage]>([])
        let started = ContinuousClock.now
        do {
            try await sensor.enroll(.leftThumb) { stage in stages.withLock { $0.append(stage) } }
            Issue.record("expected the plugin's protocolError")
        } catch let error as FieldHALError {
            #expect(error.kind == .protocolError && error.subject == "plugin prints", "\(error)")
            #expect(error.detail.contains("passed, retry or completed"), "\(error)")
        }
        #expect(ContinuousClock.now - started < .seconds(10), "ended at the bad stage, not at the enrolment's bound")
        #expect(stages.value == [.stagePassed(1), .retry(.swipeTooShort)])
        // The plugin was told to stop the enrollment it never finished.
        let cancels = fixtures.root + "/prints/cancels"
        // (A loaded machine can keep the fixture's interpreter from the line for seconds.)
        let deadline = ContinuousClock.now + .seconds(20)
        while (try? String(contentsOfFile: cancels, encoding: .utf8))?.isEmpty != false, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect((try? String(contentsOfFile: cancels, encoding: .utf8))?.isEmpty == false, "no $/cancel reached the plugin")
        await kit.close()
    }
}
