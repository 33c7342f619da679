import FieldHAL
import FieldHALAPI
@testable import FieldHALDaemon
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The daemon on a fleet's MQTT broker (`[mqtt]`, issue 46), against Debian's mosquitto:
/// what a subscriber sees of a running kit, the metrics of the bridge, and the broker's
/// last will when the kit is killed.
@Suite("Daemon on an MQTT broker", .serialized, .timeLimit(.minutes(3)), .enabled(if: MosquittoBroker.isInstalled, "needs Debian's mosquitto (lab/packages test)"))
struct FleetBrokerTests {
    /// A kit whose camera is not there, its receiver on a track of 10 fixes a second.
    static func kit(port: Int, id: String) -> String {
        """
        [gps]
        plugin = "fake"
        interval_ms = 100
        track = [{ lat = 52.52, lon = 13.40 }, { lat = 52.53, lon = 13.41 }]
        [camera.rear]
        plugin = "v4l2"
        device = "/dev/fieldhal-no-such-camera"
        [mqtt]
        broker = "mqtt://127.0.0.1:\(port)"
        client_id = "\(id)"
        fix_interval_s = 0.5
        """
    }

    @Test func aSubscriberSeesTheKitsDevicesHealthAndFixesAtTheSetPace() async throws {
        let broker = try await MosquittoBroker.start()
        let subscriber = try await MQTTSubscriber.start(port: broker.port, topics: ["fieldhal/rig-1/#", "homeassistant/#"])
        let kit = try await DaemonServiceTests.Running.start(configuration: Self.kit(port: broker.port, id: "rig-1"))
        defer { Task { try? await kit.stop() } }

        #expect(await subscriber.waitForLine(containing: "fieldhal/rig-1/status|0|online") != nil, "\(subscriber.lines)")
        let gps = try #require(await subscriber.waitForLine(containing: "fieldhal/rig-1/device/gps/default|"), "\(subscriber.lines)")
        #expect(gps.contains("\"state\":\"available\""), "\(gps)")
        let camera = try #require(await subscriber.waitForLine(containing: "fieldhal/rig-1/device/camera/rear|"), "\(subscriber.lines)")
        #expect(camera.contains("\"state\":\"unavailable\"") && camera.contains("\"reason\":"), "\(camera)")
        #expect(await subscriber.waitForLine(containing: "fieldhal/rig-1/health|0|{\"devices\"")?.contains("\"verdict\":\"degraded\"") == true)
        #expect(await subscriber.waitForLine(containing: "homeassistant/device_tracker/rig-1/default/config|") != nil)

        // The fake receiver reports 10 fixes a second; at most 2 a second go to the broker.
        #expect(await subscriber.waitForLines(containing: "fieldhal/rig-1/location/default|0|{", count: 2))
        let first = ContinuousClock.now
        #expect(await subscriber.waitForLines(containing: "fieldhal/rig-1/location/default|0|{", count: 6))
        let fixes = subscriber.lines.filter { $0.contains("/location/default|") }
        let took = ContinuousClock.now - first
        #expect(took >= .seconds(1.5), "4 fixes at one per 0.5 s take 1.5 s at least, not \(took): \(fixes)")
        #expect(fixes.allSatisfy { $0.contains("\"latitude\":") && $0.contains("\"device\":\"default\"") }, "\(fixes)")

        let metrics = try await MetricsTests.overSocket(kit, "/v1/metrics")
        #expect(metrics.contains("fieldhal_mqtt_connected 1") && metrics.contains("fieldhal_mqtt_dropped_total 0"), "\(metrics)")
        await subscriber.stop()
    }

    @Test func aKilledKitIsAnnouncedOfflineByItsLastWill() async throws {
        let broker = try await MosquittoBroker.start()
        let subscriber = try await MQTTSubscriber.start(port: broker.port, topics: ["fieldhal/rig-2/status"])
        let state = NSTemporaryDirectory() + "fieldhal-daemon-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: state) }
        try Self.kit(port: broker.port, id: "rig-2").write(toFile: state + "/kit.toml", atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(["--config", state + "/kit.toml", "--state-dir", state])
        #expect(await daemon.waitForLine(containing: "mqtt: connected to mqtt://127.0.0.1:\(broker.port) as rig-2", timeout: .seconds(60)) != nil, "\(daemon.output)")
        #expect(await subscriber.waitForLine(containing: "fieldhal/rig-2/status|0|online") != nil, "\(subscriber.lines)")

        _ = await daemon.stop(SIGKILL)
        #expect(await subscriber.waitForLine(containing: "fieldhal/rig-2/status|0|offline") != nil,
                "the broker says it for the kit, which could not: \(subscriber.lines)")
        await subscriber.stop()
    }
}
