import FieldHAL
import FieldHALAPI
@testable import FieldHALMQTT
import Foundation
import Logging
import Synchronization
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The MQTT bridge (issue 46) against Debian's real mosquitto broker, read by its real
/// `mosquitto_sub`: the birth, retained states and discovery; nothing lost through a broker
/// outage or a restart of the kit; the queue's bound; a broker that answers garbage.
@Suite("MQTT bridge", .serialized, .timeLimit(.minutes(3)), .enabled(if: MosquittoBroker.isInstalled, "needs Debian's mosquitto (lab/packages test)"))
struct FleetBridgeTests {
    /// Log lines, kept for the test to read.
    final class Journal: LogHandler, @unchecked Sendable {
        let lines = Mutex<[String]>([])
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            lines.withLock { $0.append("\(event.level) \(event.message)") }
        }
        var all: [String] { lines.withLock { $0 } }
    }

    static func spool() -> String {
        let directory = NSTemporaryDirectory() + "fieldhal-mqtt-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory + "/queue"
    }

    static func bridge(_ settings: MQTTSettings, spool: String = spool(), journal: Journal = Journal()) throws -> FleetBridge {
        try FleetBridge(settings: settings, spoolDirectory: spool, version: "9.9.9", logger: Logger(label: "test") { _ in journal })
    }

    static func fix(_ index: Int) -> Fix {
        Fix(mode: .threeD, latitude: 52.5, longitude: 13.4, altitude: Double(index), horizontalAccuracy: 4,
            time: Date(timeIntervalSince1970: 1_800_000_000 + Double(index)), satellitesUsed: 9)
    }

    /// The altitudes of the fixes among `lines`, in the order they came (each fix's index).
    static func altitudes(_ lines: [String]) -> [Int] {
        lines.compactMap { line -> Int? in
            guard let range = line.range(of: "\"altitude\":") else { return nil }
            return Int(line[range.upperBound...].prefix { $0.isNumber })
        }
    }

    static let camera = CapabilityStatus(capability: .camera, plugin: "fake", device: "/dev/video7", state: .available, reason: nil, name: "front")

    @Test func announcesItselfItsDevicesAndHealthAndSaysOfflineWhenItStops() async throws {
        let broker = try await MosquittoBroker.start()
        let subscriber = try await MQTTSubscriber.start(port: broker.port, topics: ["fieldhal/kit-a/#", "homeassistant/#"])
        let bridge = try Self.bridge(MQTTSettings(port: broker.port, clientID: "kit-a"))
        bridge.device(Self.camera, changed: false)
        bridge.health(APIHealth(version: "9.9.9", devices: [.init(capability: .camera, name: "front", available: true)]))

        let running = Task { try await bridge.run() }
        defer { running.cancel() }
        #expect(await subscriber.waitForLine(containing: "fieldhal/kit-a/status|0|online") != nil, "\(subscriber.lines)")
        let state = try #require(await subscriber.waitForLine(containing: "fieldhal/kit-a/device/camera/front|0|"), "\(subscriber.lines)")
        #expect(state.contains("\"state\":\"available\"") && !state.contains("/dev/video7"), "the state, not where the device is: \(state)")
        let discovery = try #require(await subscriber.waitForLine(containing: "homeassistant/binary_sensor/kit-a/camera_front/config|0|"))
        #expect(discovery.contains("\"state_topic\":\"fieldhal/kit-a/device/camera/front\"") && discovery.contains("\"availability_topic\":\"fieldhal/kit-a/status\""),
                "\(discovery)")
        #expect(await subscriber.waitForLine(containing: "fieldhal/kit-a/health|0|{\"devices\"") != nil, "\(subscriber.lines)")
        // Kept by the broker: a client that subscribes later gets them, marked retained.
        let late = try await MQTTSubscriber.start(port: broker.port, topics: ["fieldhal/kit-a/#"])
        #expect(await late.waitForLine(containing: "fieldhal/kit-a/status|1|online") != nil, "\(late.lines)")
        #expect(await late.waitForLine(containing: "fieldhal/kit-a/device/camera/front|1|") != nil, "\(late.lines)")
        await late.stop()

        // Unplugged: the retained state changes and an event says when.
        var gone = Self.camera
        gone.state = .unavailable
        gone.reason = "unplugged"
        bridge.device(gone, changed: true)
        let event = try #require(await subscriber.waitForLine(containing: "fieldhal/kit-a/events/device|0|"), "\(subscriber.lines)")
        #expect(event.contains("\"state\":\"unavailable\"") && event.contains("\"reason\":\"unplugged\"") && event.contains("\"at\":"), "\(event)")
        #expect(await subscriber.waitForLines(containing: "\"state\":\"unavailable\"", count: 2))

        running.cancel()
        try await running.value
        #expect(await subscriber.waitForLine(containing: "fieldhal/kit-a/status|0|offline") != nil, "a clean stop says offline itself: \(subscriber.lines)")
        #expect(bridge.figures.delivered == 1 && bridge.figures.dropped == 0, "\(bridge.figures)")
        await subscriber.stop()
    }

    @Test func aBrokerOutageLosesNoQueuedMessageAndDeliversEachOnce() async throws {
        let broker = try await MosquittoBroker.start()
        let subscriber = try await MQTTSubscriber.start(port: broker.port, topics: ["fieldhal/kit-b/location/#"], id: "fleet-b")
        let journal = Journal()
        let bridge = try Self.bridge(MQTTSettings(port: broker.port, clientID: "kit-b", discoveryPrefix: nil), journal: journal)
        let running = Task { try await bridge.run() }
        #expect(await eventually(within: .seconds(20)) { bridge.figures.connected })
        for index in 0..<5 { bridge.fix(Self.fix(index), device: "default") }
        #expect(await subscriber.waitForLines(containing: "fieldhal/kit-b/location/default|0|", count: 5), "\(subscriber.lines)")
        // Acknowledged on both legs before the broker goes: QoS 1 sends again what it has no
        // PUBACK for, so a message in flight at the moment of an outage may arrive twice
        // (docs/fleet.md); the queued ones below must arrive once.
        #expect(await eventually { bridge.figures.delivered == 5 }, "\(bridge.figures)")
        #expect(await eventually { broker.log.components(separatedBy: "Received PUBACK from fleet-b").count == 6 }, "\(broker.log)")

        broker.stop()
        #expect(await eventually(within: .seconds(20)) { !bridge.figures.connected })
        for index in 5..<45 { bridge.fix(Self.fix(index), device: "default") }
        #expect(await eventually { bridge.figures.queued == 40 }, "kept on disk while the broker is away: \(bridge.figures)")
        try await broker.start()

        #expect(await subscriber.waitForLines(containing: "fieldhal/kit-b/location/default|0|", count: 45), "\(subscriber.lines)")
        #expect(await eventually { bridge.figures.queued == 0 }, "\(bridge.figures)")
        try? await Task.sleep(for: .milliseconds(300))  // a duplicate would arrive by now
        let altitudes = Self.altitudes(subscriber.lines)
        #expect(altitudes == Array(0..<45), "each fix once, in order: \(altitudes)")
        #expect(bridge.figures.connections == 2 && bridge.figures.dropped == 0, "\(bridge.figures)")
        #expect(journal.all.contains { $0.hasPrefix("warning mqtt: lost mqtt://127.0.0.1:\(broker.port)") }, "\(journal.all)")
        running.cancel()
        try await running.value
        await subscriber.stop()
    }

    @Test func whatWaitedOnDiskSurvivesTheKitsRestartWithinTheQueuesBound() async throws {
        let broker = try MosquittoBroker(port: try GPSFake.freePort())  // not started: the kit finds no broker
        let spool = Self.spool()
        let settings = MQTTSettings(port: broker.port, clientID: "kit-c", discoveryPrefix: nil, queueLimit: 6)
        let journal = Journal()
        let first = try Self.bridge(settings, spool: spool, journal: journal)
        let running = Task { try await first.run() }
        for index in 0..<10 { first.fix(Self.fix(index), device: "rear") }
        #expect(await eventually { first.figures.queued == 6 && first.figures.dropped == 4 }, "the oldest go past the bound: \(first.figures)")
        #expect(await eventually { journal.all.contains { $0.contains("mqtt: mqtt://127.0.0.1:\(broker.port): cannot reach it") } }, "\(journal.all)")
        running.cancel()
        try await running.value
        let files = try FileManager.default.contentsOfDirectory(atPath: spool).filter { $0.hasSuffix(".msg") }
        #expect(files.count == 6, "\(files)")

        try await broker.start()
        let subscriber = try await MQTTSubscriber.start(port: broker.port, topics: ["fieldhal/kit-c/location/#"])
        let second = try Self.bridge(settings, spool: spool)
        let again = Task { try await second.run() }
        #expect(await subscriber.waitForLines(containing: "fieldhal/kit-c/location/rear|0|", count: 6), "\(subscriber.lines)")
        #expect(await eventually { second.figures.queued == 0 })
        let altitudes = Self.altitudes(subscriber.lines)
        #expect(altitudes == Array(4..<10), "\(altitudes)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool).isEmpty)
        again.cancel()
        try await again.value
        await subscriber.stop()
    }

    @Test func tenKitsOnOneBrokerKeepTheirTopicsApart() async throws {
        let broker = try await MosquittoBroker.start()
        let subscriber = try await MQTTSubscriber.start(port: broker.port, topics: ["fieldhal/#"])
        let bridges = try (0..<10).map { try Self.bridge(MQTTSettings(port: broker.port, clientID: "kit-\($0)", discoveryPrefix: nil)) }
        let running = bridges.map { bridge in Task { try await bridge.run() } }
        for (index, bridge) in bridges.enumerated() { bridge.fix(Self.fix(index), device: "default") }
        #expect(await subscriber.waitForLines(containing: "/location/default|0|", count: 10), "\(subscriber.lines)")
        for index in 0..<10 {
            let line = subscriber.lines.first { $0.hasPrefix("fieldhal/kit-\(index)/location/default|") }
            #expect(line?.contains("\"altitude\":\(index),") == true, "kit-\(index)'s fix under its own prefix: \(line ?? "none")")
        }
        for task in running { task.cancel() }
        for task in running { try await task.value }
        await subscriber.stop()
    }

    @Test func aBrokerThatAnswersGarbageCostsOnlyAReconnection() async throws {
        // A "broker" that answers every CONNECT with bytes no MQTT packet starts with.
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var one: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) } }
        listen(listener, 8)
        let port = Int(UInt16(bigEndian: address.sin_port))
        let answered = Mutex(0)
        Thread {
            while true {
                let connection = accept(listener, nil, nil)
                if connection < 0 { return }
                var request = [UInt8](repeating: 0, count: 256)
                _ = recv(connection, &request, request.count, 0)
                let garbage: [UInt8] = [0xF0, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F] + [UInt8](repeating: 0xAA, count: 64)
                _ = garbage.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                answered.withLock { $0 += 1 }
                usleep(50_000)
                close(connection)
            }
        }.start()
        defer { shutdown(listener, Int32(SHUT_RDWR)); close(listener) }

        let journal = Journal()
        let bridge = try Self.bridge(MQTTSettings(port: port, clientID: "kit-d", discoveryPrefix: nil), journal: journal)
        let running = Task { try await bridge.run() }
        bridge.fix(Self.fix(1), device: "default")
        #expect(await eventually(within: .seconds(20)) { answered.withLock { $0 } >= 2 }, "it tries again: \(journal.all)")
        #expect(!bridge.figures.connected && bridge.figures.queued == 1, "nothing taken from the queue for garbage: \(bridge.figures)")
        #expect(journal.all.filter { $0.contains("mqtt:") }.count <= 2, "said once, not per try: \(journal.all)")
        running.cancel()
        try await running.value  // and it stops at once
    }

    /// A CA, a server certificate for localhost and client certificates, made by openssl.
    static func certificates() throws -> String {
        let directory = NSTemporaryDirectory() + "fieldhal-mqtt-tls-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let script = """
            set -e
            cd '\(directory)'
            key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1.key" 2>/dev/null; }
            key ca
            openssl req -x509 -new -key ca.key -out ca.pem -days 1 -subj /CN=fieldhal-test-ca 2>/dev/null
            printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' >server.ext
            for name in server kit-t fleet; do
              key $name
              openssl req -new -key $name.key -out $name.csr -subj /CN=$name 2>/dev/null
              if [ $name = server ]; then extra='-extfile server.ext'; else extra=''; fi
              openssl x509 -req -in $name.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $name.pem -days 1 $extra 2>/dev/null
            done
            chmod 0644 *.key
            """
        let result = try CLI.runBlocking(["-c", script], executable: URL(fileURLWithPath: "/bin/sh"))
        guard result.status == 0 else { throw GPSFakeError("openssl: \(result.stderr)") }
        return directory
    }

    @Test func overTLSWithAClientCertificateAndNotWithout() async throws {
        let tls = try Self.certificates()
        defer { try? FileManager.default.removeItem(atPath: tls) }
        let broker = try await MosquittoBroker.start(listener: """
            cafile \(tls)/ca.pem
            certfile \(tls)/server.pem
            keyfile \(tls)/server.key
            require_certificate true
            use_identity_as_username true
            """)
        let subscriber = try await MQTTSubscriber.start(port: broker.port, topics: ["fieldhal/kit-t/#"], options: [
            "-h", "localhost", "--cafile", tls + "/ca.pem", "--cert", tls + "/fleet.pem", "--key", tls + "/fleet.key"])
        func settings(_ extra: [String: ConfigValue]) throws -> MQTTSettings {
            try #require(try MQTTSettings(settings: PluginParameters(["broker": .string("mqtts://localhost:\(broker.port)"), "client_id": .string("kit-t"),
                                                                      "ca_file": .string(tls + "/ca.pem")].merging(extra) { $1 }),
                                          file: "kit.toml"))
        }
        let bridge = try Self.bridge(try settings(["cert_file": .string(tls + "/kit-t.pem"), "key_file": .string(tls + "/kit-t.key")]))
        let running = Task { try await bridge.run() }
        defer { running.cancel() }
        bridge.device(Self.camera, changed: false)
        #expect(await subscriber.waitForLine(containing: "fieldhal/kit-t/status|0|online") != nil, "\(subscriber.lines) \(broker.log)")
        #expect(await subscriber.waitForLine(containing: "fieldhal/kit-t/device/camera/front|0|") != nil, "\(subscriber.lines)")
        running.cancel()
        try await running.value

        // Without a certificate the broker refuses the handshake: a journal line, no connection.
        let journal = Journal()
        let refused = try Self.bridge(try settings(["client_id": .string("kit-u")]), journal: journal)
        let trying = Task { try await refused.run() }
        #expect(await eventually(within: .seconds(20)) { journal.all.contains { $0.contains("mqtt: mqtts://localhost:\(broker.port)") } },
                "\(journal.all)")
        #expect(!refused.figures.connected && refused.figures.connections == 0, "\(refused.figures)")
        trying.cancel()
        try await trying.value
        await subscriber.stop()
    }

    @Test func aUserNameAndAPasswordFromAFileOnlyTheDaemonMayRead() async throws {
        let directory = NSTemporaryDirectory() + "fieldhal-mqtt-pw-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let made = try CLI.runBlocking(["-b", "-c", directory + "/passwords", "rig-9", "s3cret horse"], executable: URL(fileURLWithPath: "/usr/bin/mosquitto_passwd"))
        #expect(made.status == 0, "\(made.stderr)")
        let broker = try await MosquittoBroker.start(listener: "allow_anonymous true\npassword_file \(directory)/passwords")
        func settings(_ file: String) throws -> MQTTSettings {
            try #require(try MQTTSettings(settings: PluginParameters(["broker": .string("mqtt://127.0.0.1:\(broker.port)"), "client_id": .string("rig-9"),
                                                                      "username": .string("rig-9"), "password_file": .string(file)]), file: "kit.toml"))
        }
        _ = FileManager.default.createFile(atPath: directory + "/right", contents: Data("s3cret horse\n".utf8), attributes: [.posixPermissions: 0o600])
        _ = FileManager.default.createFile(atPath: directory + "/wrong", contents: Data("guess\n".utf8), attributes: [.posixPermissions: 0o600])
        _ = FileManager.default.createFile(atPath: directory + "/open", contents: Data("s3cret horse\n".utf8), attributes: [.posixPermissions: 0o644])

        // A password file others may read is refused at the start, before any connection.
        #expect(throws: FieldHALError.self) { _ = try Self.bridge(try settings(directory + "/open")) }

        let bridge = try Self.bridge(try settings(directory + "/right"))
        let running = Task { try await bridge.run() }
        #expect(await eventually(within: .seconds(20)) { bridge.figures.connected }, "\(broker.log)")
        running.cancel()
        try await running.value

        let journal = Journal()
        let wrong = try Self.bridge(try settings(directory + "/wrong"), journal: journal)
        let refused = Task { try await wrong.run() }
        #expect(await eventually(within: .seconds(20)) { journal.all.contains { $0.hasPrefix("error mqtt: mqtt://127.0.0.1:\(broker.port) refused the kit") } },
                "\(journal.all)")
        #expect(!wrong.figures.connected)
        refused.cancel()
        try await refused.value
        #expect(journal.all.filter { $0.contains("refused the kit") }.count == 1, "said once, not per try: \(journal.all)")
    }

    @Test func settingsRefusePlainMQTTOffThisMachineAndHalfACertificate() throws {
        func parse(_ values: [String: ConfigValue]) throws -> MQTTSettings? {
            try MQTTSettings(settings: PluginParameters(values), file: "kit.toml", hostName: "rig7.example")
        }
        let local = try #require(try parse(["broker": .string("mqtt://127.0.0.1")]))
        #expect(local.port == 1883 && local.clientID == "fieldhal-rig7" && local.topicPrefix == "fieldhal/fieldhal-rig7" && local.fixInterval == .seconds(10))
        let remote = try #require(try parse(["broker": .string("mqtts://broker.example"), "ca_file": .string("/etc/fleet/ca.pem")]))
        #expect(remote.usesTLS && remote.port == 8883)
        #expect(throws: ConfigError.self) { try parse(["broker": .string("mqtt://10.0.0.5:1883")]) }
        #expect(throws: ConfigError.self) { try parse(["broker": .string("mqtts://broker.example"), "cert_file": .string("/etc/kit.pem")]) }
        #expect(throws: ConfigError.self) { try parse(["broker": .string("http://broker.example")]) }
        #expect(throws: ConfigError.self) { try parse(["broker": .string("mqtt://127.0.0.1"), "topic_prefix": .string("fleet/+/kits")]) }
        #expect(throws: ConfigError.self) { try parse(["broker": .string("mqtt://127.0.0.1"), "password_file": .string("/etc/pw")]) }
        let quiet = try #require(try parse(["broker": .string("mqtt://[::1]:1884"), "fixes": .boolean(false), "discovery_prefix": .string("")]))
        #expect(quiet.host == "::1" && quiet.port == 1884 && quiet.fixInterval == nil && quiet.discoveryPrefix == nil)
        #expect(local.commands.isEmpty && !local.tags, "no commands and no tags unless asked for")
        let commanded = try #require(try parse(["broker": .string("mqtt://127.0.0.1"), "commands": .array([.string("status"), .string("nfc.read")]),
                                                "tags": .boolean(true)]))
        #expect(commanded.commands == [.status, .nfcRead] && commanded.tags)
        let unknown = #expect(throws: ConfigError.self) { try parse(["broker": .string("mqtt://127.0.0.1"), "commands": .array([.string("everything")])]) }
        #expect(unknown?.key == "mqtt.commands" && unknown?.message.contains("nfc.read") == true, "\(String(describing: unknown))")
    }

    @Test func aCommandIsAJSONObjectOfKnownFieldsAndItsAnswerCarriesItsID() throws {
        let parsed = MQTTCommand.parse(Array(#"{"id": "7", "method": "POST", "path": "/v1/haptics/play", "body": {"pattern": "confirm"}}"#.utf8))
        let command = try parsed.get()
        #expect(command.id == "7" && command.method == "POST" && command.path == "/v1/haptics/play")
        #expect(String(decoding: command.body, as: UTF8.self) == #"{"pattern":"confirm"}"#)
        for (payload, says) in [("[1, 2]", "not a JSON object"), (#"{"id": 7, "method": "GET", "path": "/v1/status"}"#, "\"id\""),
                                (#"{"id": "8", "path": "/v1/status"}"#, "\"method\""), (#"{"id": "9", "method": "GET", "path": "v1 status"}"#, "\"path\""),
                                (#"{"id": "10", "method": "GET", "path": "/v1/status", "body": [1]}"#, "\"body\"")] {
            guard case .failure(let answer) = MQTTCommand.parse(Array(payload.utf8)) else {
                Issue.record("\(payload) was taken")
                continue
            }
            let text = String(decoding: answer.payload, as: UTF8.self)
            #expect(answer.status == 400 && text.contains(says.replacingOccurrences(of: "\"", with: "\\\"")), "\(payload): \(text)")
            #expect(try JSONSerialization.jsonObject(with: Data(answer.payload)) is [String: Any], "\(text)")
        }
        let answer = MQTTAnswer(id: "q\"uote", status: 200, body: Array(#"{"ok":true}"#.utf8))
        #expect(String(decoding: answer.payload, as: UTF8.self) == #"{"id":"q\"uote","status":200,"body":{"ok":true}}"#)
    }

    @Test func aQueueThatIsALinkOrOthersToEnterIsRefused() throws {
        let base = NSTemporaryDirectory() + "fieldhal-mqtt-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: base + "/elsewhere", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: base) }
        symlink(base + "/elsewhere", base + "/queue")
        #expect(throws: FieldHALError.self) { _ = try MQTTSpool(directory: base + "/queue", limit: 10) }
        mkdir(base + "/open", 0o755)
        chmod(base + "/open", 0o755)
        #expect(throws: FieldHALError.self) { _ = try MQTTSpool(directory: base + "/open", limit: 10) }
        // A write a kill cut short is cleared; whole messages are kept, in order.
        let spool = try MQTTSpool(directory: base + "/kept", limit: 10)
        try spool.append(topic: "a/b", payload: Array("one".utf8))
        try spool.append(topic: "a/b", payload: Array("two".utf8))
        _ = FileManager.default.createFile(atPath: base + "/kept/0000000000000003.msg.tmp", contents: Data("a/b\nhal".utf8))
        let reopened = try MQTTSpool(directory: base + "/kept", limit: 10)
        #expect(reopened.count == 2 && reopened.takeOldest()?.payload == Array("one".utf8))
        #expect(!FileManager.default.fileExists(atPath: base + "/kept/0000000000000003.msg.tmp"))
    }
}
