import FakePlugin
import FieldHAL
import FieldHALFlows
import Testing

/// The lock's fingerprint on a kit with several sensors (issue 43): the first scan on any of
/// them is the answer and the other waits end; what they have enrolled is one list; a
/// device's failure is said over a timeout.
@Suite("A finger on any sensor")
struct AnySensorTests {
    func sensor(_ parameters: [String: ConfigValue]) async throws -> any BiometricAuthenticator {
        let context = PluginContext(configDirectory: "/tmp", stateDirectory: "/tmp")
        guard case .biometrics(let sensor) = try await FakePlugin.descriptor.open(.biometrics, PluginParameters(parameters), context) else {
            throw FieldHALError(.unavailable, subject: "biometrics", detail: "the fake plugin opened no sensor")
        }
        return sensor
    }

    func outcomes(_ names: String...) -> ConfigValue { .array(names.map { .string($0) }) }

    @Test func theFirstScanOnAnySensorIsTheAnswerAndTheOtherWaitEnds() async throws {
        // Nobody touches the door's sensor; a finger on the handset's matches.
        let door = try await sensor(["outcomes": outcomes("no-finger"), "enrolled": .array([.string("left-thumb")])])
        let handset = try await sensor(["outcomes": outcomes("match"), "scan_delay_ms": .integer(100)])
        let both = try #require(AnySensor.of([door, handset]))
        let clock = ContinuousClock()
        let start = clock.now
        #expect(try await both.verify(timeout: .seconds(30)) == .match)
        #expect(clock.now - start < .seconds(20), "the door's 30-second wait was cancelled")
        // The door's sensor was released: it verifies again at once (a claimed one says busy).
        await #expect { try await door.verify(timeout: .milliseconds(50)) } throws: { ($0 as? FieldHALError)?.kind == .timeout }

        // A scan that does not match is the answer too: the lock counts it.
        let stranger = try await sensor(["outcomes": outcomes("no-match"), "scan_delay_ms": .integer(50)])
        #expect(try await AnySensor([door, stranger]).verify(timeout: .seconds(30)) == .noMatch)

        let fingers = try await both.availability()
        #expect(fingers.hasSensor && fingers.enrolledFingers == [.leftThumb, .rightIndex], "\(fingers)")
        await both.close()
        await stranger.close()
    }

    @Test func noScanAnywhereSaysWhyAndOneSensorIsItself() async throws {
        let idle = try await sensor(["outcomes": outcomes("no-finger")])
        let unplugged = try await sensor(["outcomes": outcomes("gone"), "scan_delay_ms": .integer(20)])
        #expect(AnySensor.of([idle]) is AnySensor == false)
        #expect(AnySensor.of([]) == nil)
        // A sensor unplugged mid-scan says more than the other's timeout.
        await #expect { try await AnySensor([idle, unplugged]).verify(timeout: .milliseconds(300)) } throws: {
            ($0 as? FieldHALError)?.kind == .disconnected
        }
        let alsoIdle = try await sensor(["outcomes": outcomes("no-finger")])
        await #expect { try await AnySensor([idle, alsoIdle]).verify(timeout: .milliseconds(300)) } throws: {
            ($0 as? FieldHALError)?.kind == .timeout
        }
        // A sensor with no prints is left out of nothing: the other's fingers still count.
        let blank = try await sensor(["enrolled": .array([])])
        #expect(try await AnySensor([blank, idle]).availability().enrolledFingers == [.rightIndex])
        for sensor in [idle, unplugged, alsoIdle, blank] { await sensor.close() }
    }
}
