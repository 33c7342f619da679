#if Fprintd
import FieldHAL
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import FieldHALPluginHost
import FprintdPlugin
import TestSupport
import Testing

/// The fprintd plugin against a real fprintd with libfprint's virtual sensor on a private
/// system bus. Each test has a lab of its own, and runs twice: the plugin in process, and
/// out of process as an external plugin (`fieldhal plugin serve fprintd`, protocol 1.2)
/// that the host reaches through its manifest, as a kit's daemon would.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct FprintdPluginTests {
    enum Way: String, CaseIterable, CustomTestStringConvertible {
        case inProcess = "in process"
        case outOfProcess = "out of process"
        var testDescription: String { rawValue }
    }

    func descriptor(_ way: Way) async throws -> PluginDescriptor {
        guard way == .outOfProcess else { return try #require(FprintdPlugin.descriptor) }
        return try PluginManifest.load(try await ExternalBuiltin.install("fprintd", as: "fprintd-process")).descriptor()
    }

    func open(_ lab: FprintdLab, _ extra: [String: ConfigValue] = [:], way: Way) async throws -> any BiometricAuthenticator {
        let descriptor = try await descriptor(way)
        var values: [String: ConfigValue] = ["bus_address": .string(lab.busAddress), "user": .string("fieldhal-test")]
        values.merge(extra) { $1 }
        let context = PluginContext(configDirectory: "/tmp", stateDirectory: "/tmp")
        guard case .biometrics(let sensor) = try await descriptor.open(.biometrics, PluginParameters(values), context) else {
            throw GPSFakeError("no biometrics from the fprintd plugin")
        }
        return sensor
    }

    /// Enrolls `finger-1` as the right index finger (five touches), through the plugin.
    func enroll(_ sensor: any BiometricAuthenticator, _ lab: FprintdLab) async throws -> [EnrollStage] {
        let toucher = Task { for _ in 0..<5 { try await lab.touch("SCAN finger-1"); try await Task.sleep(for: .milliseconds(300)) } }
        let stages = LockedValue<[EnrollStage]>([])
        try await sensor.enroll(.rightIndex) { stage in stages.withLock { $0.append(stage) } }
        _ = try? await toucher.value
        return stages.value
    }

    /// Starts a verify and touches the sensor with `command` once fprintd wants a finger.
    func verify(_ sensor: any BiometricAuthenticator, _ lab: FprintdLab, touching command: String?,
                timeout: Duration = .seconds(20)) async throws -> BiometricResult {
        // A verify that was just stopped may still be winding down in fprintd; a touch sent
        // before it has would go to it. Wait for the sensor to be idle first.
        let idleBy = ContinuousClock.now + .seconds(5)
        while lab.fingerNeeded(), ContinuousClock.now < idleBy { try await Task.sleep(for: .milliseconds(50)) }
        let toucher = Task { if let command { try await lab.touch(command) } }
        defer { toucher.cancel() }
        return try await sensor.verify(timeout: timeout)
    }

    /// `fieldhal plugin test`'s checks against the fprintd backend out of process, on a real
    /// fprintd with its virtual sensor.
    @Test func theConformanceChecksPassOnARealFprintd() async throws {
        let lab = try await FprintdLab.start()
        defer { lab.stop() }
        let manifest = try PluginManifest.load(try await ExternalBuiltin.install("fprintd", as: "fprintd-conformance"))
        let report = await PluginConformance.run(manifest, parameters: [
            .biometrics: ["bus_address": .string(lab.busAddress), "user": .string("fieldhal-test")],
        ])
        #expect(report.passed, "\(report.checks.filter { $0.outcome != .passed })")
        #expect(report.checks.contains { $0.outcome == .passed && $0.name.hasPrefix("biometrics.availability") }, "\(report.checks)")
    }

    @Test(arguments: Way.allCases) func enrollThenAvailabilityListsTheFinger(way: Way) async throws {
        let lab = try await FprintdLab.start()
        // Held to the end of the test: the lab's deinit kills fprintd, and a lab whose
        // last use came early was released mid-test (fprintd "left its bus" twice in CI).
        defer { lab.stop() }
        let sensor: any BiometricAuthenticator
        do {
            sensor = try await open(lab, way: way)
        } catch {
            // fprintd left its bus once in CI right after it was ready: say how it ended.
            Issue.record("\(error); \(lab.fprintdReport)")
            return
        }
        #expect(sensor.deviceName == "fprintd /net/reactivated/Fprint/Device/0" + (way == .outOfProcess ? " (plugin fprintd-process)" : ""))
        do {
            #expect(try await sensor.availability() == BiometricAvailability(hasSensor: true, enrolledFingers: []))
            let stages = try await enroll(sensor, lab)
            #expect(stages == [.stagePassed(1), .stagePassed(2), .stagePassed(3), .stagePassed(4), .completed])
            #expect(try await sensor.availability() == BiometricAvailability(hasSensor: true, enrolledFingers: [.rightIndex]))
        } catch {
            // fprintd left its bus mid-test in CI (2026-11-29 at 0f17659): say how it ended.
            Issue.record("\(error); \(lab.fprintdReport)")
        }
        await sensor.close()
    }

    @Test(arguments: Way.allCases) func matchNoMatchAndRetry(way: Way) async throws {
        let lab = try await FprintdLab.start()
        // Held to the end of the test: the lab's deinit kills fprintd, and a lab whose
        // last use came early was released mid-test (fprintd "left its bus" twice in CI).
        defer { lab.stop() }
        let sensor = try await open(lab, way: way)
        _ = try await enroll(sensor, lab)
        #expect(try await verify(sensor, lab, touching: "SCAN finger-1") == .match)
        #expect(try await verify(sensor, lab, touching: "SCAN finger-2") == .noMatch)
        #expect(try await verify(sensor, lab, touching: "RETRY 1") == .retry(.swipeTooShort))
        #expect(try await verify(sensor, lab, touching: "RETRY 2") == .retry(.fingerNotCentered))
        // Each ended verify released the sensor: the next one claims it again.
        #expect(try await verify(sensor, lab, touching: "SCAN finger-1") == .match)
        await sensor.close()
    }

    @Test(arguments: Way.allCases) func timeoutAndCancelLeaveTheSensorFree(way: Way) async throws {
        let lab = try await FprintdLab.start()
        // Held to the end of the test: the lab's deinit kills fprintd, and a lab whose
        // last use came early was released mid-test (fprintd "left its bus" twice in CI).
        defer { lab.stop() }
        let sensor = try await open(lab, way: way)
        _ = try await enroll(sensor, lab)

        let start = ContinuousClock.now
        await #expect { try await verify(sensor, lab, touching: nil, timeout: .seconds(1)) } throws: {
            ($0 as? FieldHALError)?.kind == .timeout
        }
        #expect(ContinuousClock.now - start < .seconds(5))

        let waiting = Task { try await sensor.verify(timeout: .seconds(30)) }
        try await Task.sleep(for: .milliseconds(800))
        waiting.cancel()
        await #expect { try await waiting.value } throws: { ($0 as? FieldHALError)?.kind == .cancelled }

        #expect(try await verify(sensor, lab, touching: "SCAN finger-1") == .match, "the sensor was released")
        await sensor.close()
    }

    @Test(arguments: Way.allCases) func unplugDuringVerifyIsADisconnection(way: Way) async throws {
        let lab = try await FprintdLab.start()
        // Held to the end of the test: the lab's deinit kills fprintd, and a lab whose
        // last use came early was released mid-test (fprintd "left its bus" twice in CI).
        defer { lab.stop() }
        let sensor = try await open(lab, way: way)
        _ = try await enroll(sensor, lab)
        await #expect { try await verify(sensor, lab, touching: "UNPLUG") } throws: {
            ($0 as? FieldHALError)?.kind == .disconnected
        }
        await sensor.close()
    }

    @Test(arguments: Way.allCases) func fprintdKilledDuringVerifyFailsPromptly(way: Way) async throws {
        let lab = try await FprintdLab.start()
        // Held to the end of the test: the lab's deinit kills fprintd, and a lab whose
        // last use came early was released mid-test (fprintd "left its bus" twice in CI).
        defer { lab.stop() }
        let sensor = try await open(lab, way: way)
        _ = try await enroll(sensor, lab)
        let waiting = Task { try await sensor.verify(timeout: .seconds(30)) }
        while !lab.fingerNeeded() { try await Task.sleep(for: .milliseconds(50)) }
        let killedAt = ContinuousClock.now
        lab.killFprintd()
        await #expect { try await waiting.value } throws: { error in
            guard let error = error as? FieldHALError else { return false }
            return [.unavailable, .disconnected, .protocolError].contains(error.kind)
        }
        #expect(ContinuousClock.now - killedAt < .seconds(5))
        await sensor.close()
    }

    @Test(arguments: Way.allCases) func verifyWithoutEnrolledPrintsSaysWhatToDo(way: Way) async throws {
        let lab = try await FprintdLab.start()
        // Held to the end of the test: the lab's deinit kills fprintd, and a lab whose
        // last use came early was released mid-test (fprintd "left its bus" twice in CI).
        defer { lab.stop() }
        let sensor = try await open(lab, way: way)
        await #expect { try await sensor.verify(timeout: .seconds(5)) } throws: { error in
            guard let error = error as? FieldHALError else { return false }
            return error.kind == .unsupported && error.advice == "run fieldhal bio enroll"
        }
        await sensor.close()
    }

    @Test(arguments: Way.allCases) func sensorClaimedByAnotherClientIsBusy(way: Way) async throws {
        let lab = try await FprintdLab.start()
        // Held to the end of the test: the lab's deinit kills fprintd, and a lab whose
        // last use came early was released mid-test (fprintd "left its bus" twice in CI).
        defer { lab.stop() }
        let sensor = try await open(lab, way: way)
        _ = try await enroll(sensor, lab)
        // Another program holds the sensor: fprintd-verify run directly, waiting for a finger.
        let other = Process()
        other.executableURL = URL(fileURLWithPath: "/usr/bin/fprintd-verify")
        other.arguments = ["fieldhal-test"]
        other.environment = ProcessInfo.processInfo.environment.merging(["DBUS_SYSTEM_BUS_ADDRESS": lab.busAddress]) { $1 }
        other.standardOutput = FileHandle.nullDevice
        other.standardError = FileHandle.nullDevice
        try other.run()
        defer { kill(other.processIdentifier, SIGKILL) }
        while !lab.fingerNeeded() { try await Task.sleep(for: .milliseconds(50)) }
        await #expect { try await sensor.verify(timeout: .seconds(5)) } throws: { error in
            guard let error = error as? FieldHALError else { return false }
            return error.kind == .busy && error.advice?.contains("one client at a time") == true
        }
        await sensor.close()
    }

    @Test(arguments: Way.allCases) func polkitRefusalIsPermissionDenied(way: Way) async throws {
        let lab = try await FprintdLab.start()
        // Held to the end of the test: the lab's deinit kills fprintd, and a lab whose
        // last use came early was released mid-test (fprintd "left its bus" twice in CI).
        defer { lab.stop() }
        let sensor = try await open(lab, way: way)
        _ = try await enroll(sensor, lab)
        try lab.gdbus(["call", "--system", "-d", "org.freedesktop.PolicyKit1", "-o", "/org/freedesktop/PolicyKit1/Authority",
                       "-m", "org.freedesktop.DBus.Mock.AllowUnknown", "false"])
        try lab.gdbus(["call", "--system", "-d", "org.freedesktop.PolicyKit1", "-o", "/org/freedesktop/PolicyKit1/Authority",
                       "-m", "org.freedesktop.DBus.Mock.SetAllowed", "[]"])
        await #expect { try await sensor.verify(timeout: .seconds(5)) } throws: { error in
            guard let error = error as? FieldHALError else { return false }
            return error.kind == .permissionDenied && error.advice?.contains("polkit") == true
        }
        await sensor.close()
    }

    @Test(arguments: Way.allCases) func noFprintdOnTheBusIsUnavailable(way: Way) async throws {
        let lab = try await FprintdLab.start()
        // Held to the end of the test: the lab's deinit kills fprintd, and a lab whose
        // last use came early was released mid-test (fprintd "left its bus" twice in CI).
        defer { lab.stop() }
        lab.killFprintd()
        // Activation is not configured on the private bus, so nothing answers.
        await #expect { try await open(lab, way: way) } throws: { error in
            guard let error = error as? FieldHALError else { return false }
            return error.kind == .unavailable
        }
    }
}
#endif
