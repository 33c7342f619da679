import FieldHAL
import FieldHALAPI
import FieldHALClient
import Foundation
import TestSupport
import Testing

/// `GET /v1/health` (issue 46): the verdict an updater's health check acts on, with no scope
/// needed and nothing private in it; `fieldhal daemon health` exits by it.
@Suite("Health", .serialized)
struct HealthTests {
    /// A kit whose camera is a V4L2 node that is not there: the daemon serves, degraded.
    static let degradedKit = """
        [gps]
        plugin = "fake"
        [camera.rear]
        plugin = "v4l2"
        device = "/dev/fieldhal-no-such-camera"
        """

    @Test func aMissingDeviceMakesTheDaemonDegradedAndAnyCallerMaySeeIt() async throws {
        let port = try LoopbackHTTP.freePort()
        let kit = try await DaemonServiceTests.Running.start(configuration: Self.degradedKit + "\n[web]\nlisten = \"127.0.0.1:\(port)\"\n")
        defer { Task { try? await kit.stop() } }
        let health = try await kit.client.health()
        let version = try await kit.client.status().version
        #expect(health.verdict == .degraded && health.version == version, "\(health)")
        #expect(health.devices == [APIHealth.Device(capability: .location, name: "default", available: true),
                                   APIHealth.Device(capability: .camera, name: "rear", available: false)], "\(health.devices)")

        // Nothing private: no path, reason or identity, whoever asks.
        let bearer = ["Authorization": "Bearer \(try await Self.token(kit, allow: ["haptics"]))"]
        let raw = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/v1/health", headers: bearer))
        #expect(raw.status == 200, "a token with no status scope may ask: \(raw)")
        #expect(!raw.body.contains("/dev/") && !raw.body.contains("reason"), "\(raw.body)")
        #expect(try FieldHALAPI.decoder.decode(APIHealth.self, from: Data(raw.body.utf8)) == health)
        let status = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/v1/status", headers: bearer))
        #expect(status.status == 403, "the same token may not read the status: \(status)")
        let asked = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/v1/health?verbose=1", headers: bearer))
        #expect(asked.status == 400, "\(asked)")

        // The command an updater runs: 69 while degraded, 0 when told a missing device may pass.
        let options = ["--config", kit.state + "/kit.toml", "--state-dir", kit.state]
        let degraded = try await CLI.run(["daemon", "health"] + options)
        #expect(degraded.status == 69 && degraded.stdout.contains("degraded") && degraded.stdout.contains("camera.rear  UNAVAILABLE"), "\(degraded)")
        let allowed = try await CLI.run(["daemon", "health", "--allow-degraded", "--json"] + options)
        #expect(allowed.status == 0, "\(allowed)")
        #expect(try FieldHALAPI.decoder.decode(APIHealth.self, from: Data(allowed.stdout.utf8)) == health)
    }

    @Test func aKitWithEveryDeviceThereIsHealthyAndNoDaemonIsUnavailable() async throws {
        let kit = try await DaemonServiceTests.Running.start()
        let health = try await kit.client.health()
        #expect(health.verdict == .healthy && !health.devices.isEmpty && health.devices.allSatisfy(\.available), "\(health)")
        let options = ["--config", "fake", "--state-dir", kit.state]
        let healthy = try await CLI.run(["daemon", "health"] + options)
        #expect(healthy.status == 0 && healthy.stdout.hasPrefix("fieldhal \(health.version): healthy"), "\(healthy)")
        try await kit.stop()
        let gone = try await CLI.run(["daemon", "health"] + options)
        #expect(gone.status == 69 && gone.stderr.contains("no fieldhal daemon listens"), "\(gone)")
    }

    static func token(_ kit: DaemonServiceTests.Running, allow: [String]) async throws -> String {
        try #require(try await kit.client.issueWebToken(APIWebTokenRequest(origin: "http://localhost:1", allow: allow)).token)
    }
}
