import FieldHAL
import FieldHALAPI
import FieldHALMQTT
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

    /// The answer with `id` on the answer topic, as `(status, body)`.
    static func answer(_ subscriber: MQTTSubscriber, _ id: String, topic: String) async throws -> (status: Int, body: String) {
        let line = try #require(await subscriber.waitForLine(containing: "\(topic)|0|{\"id\":\"\(id)\","), "no answer \(id): \(subscriber.lines)")
        let payload = String(line.dropFirst("\(topic)|0|".count))
        let object = try #require(try JSONSerialization.jsonObject(with: Data(payload.utf8)) as? [String: Any], "\(payload)")
        let status = try #require(object["status"] as? Int, "\(payload)")
        let body = String(decoding: try JSONSerialization.data(withJSONObject: object["body"] ?? NSNull(), options: [.fragmentsAllowed, .withoutEscapingSlashes]),
                          as: UTF8.self)
        return (status, body)
    }

    @Test func commandsAreAnsweredAsRequestsWithTheScopesConfiguredForThem() async throws {
        let broker = try await MosquittoBroker.start()
        let subscriber = try await MQTTSubscriber.start(port: broker.port, topics: ["fieldhal/rig-3/status", "fieldhal/rig-3/answers"])
        let kit = try await DaemonServiceTests.Running.start(configuration: Self.kit(port: broker.port, id: "rig-3") + """

            commands = ["status", "location"]
            [haptics]
            plugin = "fake"
            """)
        defer { Task { try? await kit.stop() } }
        // Subscribed before the birth: the kit takes commands once it says online.
        #expect(await subscriber.waitForLine(containing: "fieldhal/rig-3/status|0|online") != nil, "\(subscriber.lines)")
        let topic = "fieldhal/rig-3/answers"
        try await publishMQTT(port: broker.port, topic: "fieldhal/rig-3/command", [
            #"{"id": "status", "method": "GET", "path": "/v1/status"}"#,
            #"{"id": "fix", "method": "GET", "path": "/v1/location?timeout_ms=5000&max_age_ms=0"}"#,
            #"{"id": "buzz", "method": "POST", "path": "/v1/haptics/play", "body": {"pattern": "confirm"}}"#,
            #"{"id": "stream", "method": "GET", "path": "/v1/events"}"#,
            #"{"id": "verb", "method": "DELETE", "path": "/v1/status"}"#,
            #"{"id": "odd", "method": "GET", "path": "/v1/status", "colour": "red"}"#,
            #"{"id": "query", "method": "GET", "path": "/v1/location?timeout_ms=forever"}"#,
            "not json at all",
        ])
        let status = try await Self.answer(subscriber, "status", topic: topic)
        #expect(status.status == 200 && status.body.contains("\"api\":\"v1\"") && status.body.contains("\"scopes\":[\"location\",\"status\"]"), "\(status)")
        let fix = try await Self.answer(subscriber, "fix", topic: topic)
        #expect(fix.status == 200 && fix.body.contains("\"latitude\":52.5"), "\(fix)")
        // A scope not given to the broker: refused as a grant's would be, saying where it is given.
        let buzz = try await Self.answer(subscriber, "buzz", topic: topic)
        #expect(buzz.status == 403 && buzz.body.contains("MQTT broker mqtt://127.0.0.1:\(broker.port) may not use haptics")
                && buzz.body.contains("[mqtt] commands"), "\(buzz)")
        let stream = try await Self.answer(subscriber, "stream", topic: topic)
        #expect(stream.status == 403 && stream.body.contains("not a command the kit takes from the broker"), "\(stream)")
        #expect(try await Self.answer(subscriber, "verb", topic: topic).status == 405)
        let odd = try await Self.answer(subscriber, "odd", topic: topic)
        #expect(odd.status == 400 && odd.body.contains("no field \\\"colour\\\""), "\(odd)")
        let query = try await Self.answer(subscriber, "query", topic: topic)
        #expect(query.status == 400 && query.body.contains("timeout_ms"), "\(query)")
        #expect(await subscriber.waitForLine(containing: "\(topic)|0|{\"id\":null,\"status\":400,") != nil, "\(subscriber.lines)")

        let metrics = try await MetricsTests.overSocket(kit, "/v1/metrics")
        #expect(metrics.contains("fieldhal_mqtt_commands_total 8") && metrics.contains("fieldhal_mqtt_commands_dropped_total 0"), "\(metrics)")
        #expect(metrics.contains("fieldhal_api_requests_total{door=\"mqtt\",route=\"/v1/status\",status=\"200\"} 1"), "\(metrics)")

        // A command longer than any request: dropped unread and counted; the next is answered.
        let long = #"{"id": "long", "method": "GET", "path": "/v1/status", "body": {"pad": ""# + String(repeating: "x", count: 80 * 1024) + #""}}"#
        try await publishMQTT(port: broker.port, topic: "fieldhal/rig-3/command", [long], whole: true)
        try await publishMQTT(port: broker.port, topic: "fieldhal/rig-3/command", [#"{"id": "after", "method": "GET", "path": "/v1/health"}"#])
        #expect(try await Self.answer(subscriber, "after", topic: topic).status == 200)
        #expect(!subscriber.lines.contains { $0.contains("{\"id\":\"long\"") }, "the long one is not answered")
        #expect(try await MetricsTests.overSocket(kit, "/v1/metrics").contains("fieldhal_mqtt_commands_dropped_total 1"))
        await subscriber.stop()
    }

    /// A flood on the command topic: the kit answers what its bounded queue holds, drops and
    /// counts the rest, says so once, and its own API answers meanwhile.
    @Test func aFloodOfCommandsIsBoundedAndTheKitAnswersMeanwhile() async throws {
        let broker = try await MosquittoBroker.start()
        let subscriber = try await MQTTSubscriber.start(port: broker.port, topics: ["fieldhal/rig-4/status", "fieldhal/rig-4/answers"])
        let log = CapturedLines()
        let kit = try await DaemonServiceTests.Running.start(configuration: Self.kit(port: broker.port, id: "rig-4") + """

            commands = ["nfc.read"]
            [nfc]
            plugin = "fake"
            tags = []
            """, log: log)
        defer { Task { try? await kit.stop() } }
        #expect(await subscriber.waitForLine(containing: "fieldhal/rig-4/status|0|online") != nil, "\(subscriber.lines)")
        // Reads of an empty field, each waiting 300 ms for a tag, one at a time on the chip:
        // 4 are answered at once, 16 wait, the rest are dropped.
        let sent = 200
        try await publishMQTT(port: broker.port, topic: "fieldhal/rig-4/command", (0..<sent).map {
            #"{"id": "read-\#($0)", "method": "POST", "path": "/v1/nfc/read", "body": {"timeoutMs": 300}}"#
        })
        let status = try await MetricsTests.overSocket(kit, "/v1/status")
        #expect(status.hasPrefix("HTTP/1.1 200"), "the socket answers during the flood: \(status)")
        var taken = 0, dropped = 0
        #expect(await eventually(within: .seconds(60)) {
            let figures = kit.daemon.fleetBridge.value?.figures
            (taken, dropped) = (figures?.commands ?? 0, figures?.commandsDropped ?? 0)
            return taken + dropped == sent
        }, "\(taken) taken and \(dropped) dropped of \(sent)")
        #expect(dropped >= sent - FleetBridge.commandBacklog - 4 - 4, "\(taken) taken, \(dropped) dropped")
        #expect(await subscriber.waitForLines(containing: "fieldhal/rig-4/answers|0|{\"id\":\"read-", count: taken, timeout: .seconds(60)))
        let answers = subscriber.lines.filter { $0.contains("/answers|") }
        // Each read ends with no tag (504), or busy (409) when the reads before it held the
        // chip for all of its time, as requests on the socket would.
        #expect(answers.count == taken && answers.allSatisfy { $0.contains("\"status\":504") || $0.contains("\"status\":409") }, "\(answers)")
        #expect(log.lines.filter { $0.contains("commands arrive faster than the kit answers them") }.count == 1, "\(log.lines)")
        await subscriber.stop()
    }

    /// `tags = true`: what clients read and see come and go goes to the broker, and the
    /// metrics count clients' reads, failed reads and recordings (never the kit's own).
    @Test func tagsClientsReadAndSeeArePublishedAndTheirUsesCounted() async throws {
        let broker = try await MosquittoBroker.start()
        let subscriber = try await MQTTSubscriber.start(port: broker.port, topics: ["fieldhal/rig-5/status", "fieldhal/rig-5/events/tag"])
        let kit = try await DaemonServiceTests.Running.start(configuration: Self.kit(port: broker.port, id: "rig-5") + """

            tags = true
            [nfc.crates]
            plugin = "fake"
            tags = [{ type = "ntag213", uid = "04:01:02:03:04:05:06", text = "crate 7" }]
            [nfc.empty]
            plugin = "fake"
            tags = []
            [camera.front]
            plugin = "fake"
            """)
        defer { Task { try? await kit.stop() } }
        #expect(await subscriber.waitForLine(containing: "fieldhal/rig-5/status|0|online") != nil, "\(subscriber.lines)")
        let client = kit.client
        #expect(try await client.readTag(timeout: .seconds(5), device: "crates").uid == "04:01:02:03:04:05:06")
        let read = try #require(await subscriber.waitForLine(containing: "fieldhal/rig-5/events/tag|0|"), "\(subscriber.lines)")
        #expect(read.contains("\"event\":\"read\"") && read.contains("\"device\":\"crates\"") && read.contains("04:01:02:03:04:05:06"), "\(read)")
        await #expect(throws: (any Error).self) { try await client.readTag(timeout: .milliseconds(200), device: "empty") }
        // A client following tag events: the tag in the field is found, and published.
        let following = Task {
            for try await event in client.events([.tag], devices: ["crates"]) { if case .tag = event { return true } }
            return false
        }
        #expect(try await following.value)
        let found = try #require(await subscriber.waitForLine(containing: "\"event\":\"found\""), "\(subscriber.lines)")
        #expect(found.contains("fieldhal/rig-5/events/tag|0|") && found.contains("\"value\":\"crate 7\""), "\(found)")
        let video = try await client.recordVideo(APIVideoRecord(durationMs: 300), to: kit.state + "/clip.avi", device: "front")
        #expect(video.frames > 0)

        let metrics = try await MetricsTests.overSocket(kit, "/v1/metrics")
        #expect(metrics.contains("fieldhal_nfc_tags_read_total{device=\"crates\"} 1"), "\(metrics)")
        #expect(metrics.contains("fieldhal_nfc_reads_failed_total{device=\"empty\",kind=\"timeout\"} 1"), "\(metrics)")
        #expect(metrics.contains("fieldhal_api_device_uses_total{request=\"camera.record\",device=\"front\",outcome=\"ok\"} 1"), "\(metrics)")
        await subscriber.stop()
    }

    /// SIGHUP with a new `[mqtt]` and a receiver more: the bridge starts again with the new
    /// settings (the old client id says offline) and publishes the new receiver's fixes; a
    /// broken `[mqtt]` refuses the reload and the bridge goes on.
    @Test func aReloadThatChangesMQTTStartsTheBridgeAgainAndFollowsANewReceiver() async throws {
        let broker = try await MosquittoBroker.start()
        let subscriber = try await MQTTSubscriber.start(port: broker.port, topics: ["fieldhal/rig-6/#", "fieldhal/rig-7/#"])
        let state = NSTemporaryDirectory() + "fieldhal-daemon-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: state) }
        func kit(_ id: String, receivers: [String], mqtt: String = "") -> String {
            receivers.map { "[gps.\($0)]\nplugin = \"fake\"\ninterval_ms = 100\n" }.joined()
                + "[mqtt]\nbroker = \"mqtt://127.0.0.1:\(broker.port)\"\nclient_id = \"\(id)\"\nfix_interval_s = 0.2\ndiscovery_prefix = \"\"\n\(mqtt)"
        }
        let config = state + "/kit.toml"
        try kit("rig-6", receivers: ["first"]).write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(["--config", config, "--state-dir", state])
        #expect(await subscriber.waitForLine(containing: "fieldhal/rig-6/location/first|0|") != nil, "\(subscriber.lines) \(daemon.output)")

        try kit("rig-7", receivers: ["first", "second"]).write(toFile: config, atomically: true, encoding: .utf8)
        kill(daemon.process.processIdentifier, SIGHUP)
        #expect(await daemon.waitForLine(containing: "mqtt: [mqtt] changed; the bridge starts again with it", timeout: .seconds(20)) != nil, "\(daemon.output)")
        #expect(await subscriber.waitForLine(containing: "fieldhal/rig-6/status|0|offline") != nil, "the old client id leaves: \(subscriber.lines.suffix(5))")
        #expect(await subscriber.waitForLine(containing: "fieldhal/rig-7/status|0|online") != nil, "\(subscriber.lines.suffix(5))")
        #expect(await subscriber.waitForLine(containing: "fieldhal/rig-7/location/second|0|") != nil, "the receiver the reload added: \(subscriber.lines.suffix(5)) \(daemon.output)")

        try kit("rig-7", receivers: ["first", "second"], mqtt: "commands = [\"everything\"]\n").write(toFile: config, atomically: true, encoding: .utf8)
        kill(daemon.process.processIdentifier, SIGHUP)
        #expect(await daemon.waitForLine(containing: "configuration not reloaded, the old one stays", timeout: .seconds(20))?.0.contains("mqtt.commands") == true,
                "\(daemon.output)")
        let before = subscriber.lines.filter { $0.contains("fieldhal/rig-7/location/first|") }.count
        #expect(await subscriber.waitForLines(containing: "fieldhal/rig-7/location/first|", count: before + 3), "the bridge goes on")
        #expect(await daemon.stop().status == 0, "\(daemon.output)")
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
