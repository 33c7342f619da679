import FieldHAL
import FieldHALPluginHost
import FieldHALPluginSDK
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import TestSupport
import Testing

/// The plugin side in Swift (FieldHALPluginSDK) on a socket pair, spoken to line by line as
/// a host does: what it answers, how it says errors, its streams, and how it ends.
@Suite(.timeLimit(.minutes(1))) struct PluginServerTests {
    /// A receiver that gives three fixes and then waits; `closed` says whether the server
    /// released it.
    final class Receiver: LocationProvider {
        let deviceName = "test receiver"
        let closed = LockedValue(false)
        func watch() -> AsyncThrowingStream<Fix, any Error> {
            AsyncThrowingStream { continuation in
                for index in 0..<3 {
                    continuation.yield(Fix(mode: .threeD, latitude: 52.5 + Double(index) / 1000, longitude: 13.4, altitude: 34.5,
                                           horizontalAccuracy: 4.5, speed: 1.25, time: Date(timeIntervalSince1970: 1_773_576_000 + Double(index)),
                                           satellitesUsed: 7))
                }
                continuation.yield(.lost("antenna cable cut", at: Date(timeIntervalSince1970: 1_773_576_010)))
            }
        }
        func lastKnownFix() async -> ReceivedFix? { nil }
        func close() async { closed.withLock { $0 = true } }
    }

    /// The server on one end of a socket pair, and the host's end to talk to it.
    final class Channel: @unchecked Sendable {
        let host: Int32
        let served: Task<Int32, Never>
        let receiver = Receiver()
        private var buffered: [UInt8] = []

        init(_ custom: PluginDescriptor? = nil) throws {
            var pair: [Int32] = [0, 0]
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
                throw POSIXError(.EMFILE)
            }
            host = pair[0]
            let plugin = pair[1]
            let receiver = receiver
            let descriptor = PluginDescriptor(
                name: "probe", summary: "a test receiver",
                capabilities: [.location: [ParameterSpec("device", .string, required: true, help: "the node"),
                                           ParameterSpec("fail", .boolean, help: "fail to open")]]
            ) { _, parameters, _ in
                if parameters.boolean("fail") == true {
                    throw FieldHALError(.deviceNotFound, subject: "gps \(parameters.string("device") ?? "")", detail: "no receiver there",
                                        advice: "plug the receiver in")
                }
                return .location(receiver)
            }
            served = Task { await PluginServer(custom ?? descriptor, version: "2.1.0", input: plugin, output: plugin).serve() }
        }

        func send(_ text: String) {
            _ = text.utf8CString.withUnsafeBufferPointer { Glibc.send(host, $0.baseAddress, $0.count - 1, Int32(MSG_NOSIGNAL)) }
        }

        /// Sends a request and waits for its answer, on a thread of its own: the server runs
        /// on the cooperative pool, which a blocking wait here would starve.
        func call(_ id: Int, _ method: String, _ parameters: String = "{}") async throws -> JSONValue {
            try await offPool { self.callBlocking(id, method, parameters) }
        }

        func next() async throws -> JSONValue? { try await offPool { self.nextBlocking() } }

        /// Sends a request that runs 30 s or more, cancels it 0.2 s later, and expects the
        /// operation's own answer, `cancelled`, well before the request's end (within 10 s).
        func expectCancelled(_ id: Int, _ method: String, _ parameters: String) async throws {
            send(#"{"jsonrpc":"2.0","id":\#(id),"method":"\#(method)","params":\#(parameters)}"# + "\n")
            try await Task.sleep(for: .milliseconds(200))
            let cancelled = ContinuousClock.now
            send(#"{"jsonrpc":"2.0","method":"$/cancel","params":{"id":\#(id)}}"# + "\n")
            let answer = try await next()
            #expect(answer?["id"] == .integer(Int64(id)) && answer?["error"]?["data"]?["kind"] == .string("cancelled"), "\(String(describing: answer))")
            #expect(ContinuousClock.now - cancelled < .seconds(10), "answered at the cancel, not at the request's end")
        }

        private func callBlocking(_ id: Int, _ method: String, _ parameters: String) -> JSONValue {
            send(#"{"jsonrpc":"2.0","id":\#(id),"method":"\#(method)","params":\#(parameters)}"# + "\n")
            while true {
                guard let message = nextBlocking() else { return .null }
                if message["id"] == .integer(Int64(id)) { return message }
            }
        }

        /// The next message, or nil after 5 s or at the end.
        private func nextBlocking() -> JSONValue? {
            var chunk = [UInt8](repeating: 0, count: 4096)
            while true {
                if let newline = buffered.firstIndex(of: 10) {
                    let line = Array(buffered[..<newline])
                    buffered.removeSubrange(...newline)
                    return PluginProtocol.message(line)
                }
                var entry = pollfd(fd: host, events: Int16(POLLIN), revents: 0)
                guard poll(&entry, 1, 5000) == 1 else { return nil }
                let count = recv(host, &chunk, chunk.count, 0)
                guard count > 0 else { return nil }
                buffered += chunk[..<count]
            }
        }

        deinit { close(host) }
    }

    @Test func aHostIsAnsweredAsTheProtocolSays() async throws {
        let channel = try Channel()
        let hello = try await channel.call(1, "initialize", #"{"protocol":{"major":1,"minor":0},"host":{"name":"test"}}"#)["result"]
        #expect(hello?["name"] == .string("probe") && hello?["version"] == .string("2.1.0"))
        #expect(hello?["capabilities"] == .array([.string("gps")]))
        #expect(hello?["protocol"]?["major"] == .integer(1))

        #expect(try await channel.call(2, "lidar.scan")["error"]?["code"] == .integer(-32601))
        #expect(try await channel.call(20, "camera.still")["error"]?["data"]?["kind"] == .string("notConfigured"))
        // The section is checked again here: the manifest may disagree with the executable.
        let unknown = try await channel.call(3, "open", #"{"capability":"gps","parameters":{"device":"/dev/x","baud":9600}}"#)
        #expect(unknown["error"]?["data"]?["kind"] == .string("invalidArgument"), "\(unknown)")
        #expect(unknown["error"]?["data"]?["detail"]?.string?.contains("baud") == true, "\(unknown)")
        let notHere = try await channel.call(4, "open", #"{"capability":"gps","parameters":{"device":"/dev/x","fail":true}}"#)
        #expect(notHere["error"]?["data"] == .object(["kind": .string("deviceNotFound"), "subject": .string("gps /dev/x"),
                                                      "detail": .string("no receiver there"), "advice": .string("plug the receiver in")]))
        let camera = try await channel.call(5, "open", #"{"capability":"camera","parameters":{}}"#)
        #expect(camera["error"]?["data"]?["kind"] == .string("unsupported"), "\(camera)")

        #expect(try await channel.call(6, "open", #"{"capability":"gps","parameters":{"device":"/dev/x"}}"#)["result"]?["device"] == .string("test receiver"))
        #expect(try await channel.call(7, "gps.watch")["result"] == .object(["stream": .integer(7)]))
        var fixes: [Fix] = []
        var lost: String?
        while lost == nil, let message = try await channel.next() {
            #expect(message["params"]?["stream"] == .integer(7))
            if message["method"] == .string("gps.fix") { fixes.append(try PluginProtocol.fix(from: message["params"]?["fix"] ?? .null, plugin: "probe")) }
            if message["method"] == .string("gps.lost") { lost = message["params"]?["reason"]?.string }
        }
        #expect(fixes.map(\.latitude) == [52.5, 52.501, 52.502])
        #expect(fixes.first == Fix(mode: .threeD, latitude: 52.5, longitude: 13.4, altitude: 34.5, horizontalAccuracy: 4.5, speed: 1.25,
                                   time: Date(timeIntervalSince1970: 1_773_576_000), satellitesUsed: 7))
        #expect(lost == "antenna cable cut")

        channel.send(#"{"jsonrpc":"2.0","method":"$/cancel","params":{"id":7}}"# + "\n")
        #expect(try await channel.call(8, "shutdown")["result"] == .null)
        #expect(channel.receiver.closed.value, "shutdown releases the device")
        channel.send(#"{"jsonrpc":"2.0","method":"exit","params":{}}"# + "\n")
        #expect(await channel.served.value == 0)
    }

    /// A reader with one tag; a read asking for more than 10 s waits until cancelled.
    final class TagReader: NFCReader {
        let deviceName = "test reader"
        static let tag = NFCTag(type: .type2, uid: [0x04, 0xA1, 0xB2, 0xC3, 0xD4, 0xE5, 0xF6], atqa: 0x0044, sak: 0x00,
                                ndef: try? NDEFMessage.text("trf:duress:alert-1"))
        func readTag(timeout: Duration) async throws -> NFCTag {
            if timeout > .seconds(10) { try await Task.sleep(for: timeout) }
            return Self.tag
        }
        func write(_ message: NDEFMessage, timeout: Duration) async throws -> NFCTag {
            var written = Self.tag
            written.ndef = message
            return written
        }
        func close() async {}
    }

    @Test func nfcRequestsCarryTagsMessagesErrorsAndCancellation() async throws {
        let descriptor = PluginDescriptor(name: "probe", summary: "a test reader", capabilities: [.nfcReader: []]) { _, _, _ in
            .nfcReader(TagReader())
        }
        let channel = try Channel(descriptor)
        let early = try await channel.call(1, "nfc.read", #"{"timeoutMs":100}"#)
        #expect(early["error"]?["data"]?["kind"] == .string("notConfigured"), "\(early)")
        #expect(try await channel.call(2, "open", #"{"capability":"nfc","parameters":{}}"#)["result"]?["device"] == .string("test reader"))

        let read = try await channel.call(3, "nfc.read", #"{"timeoutMs":1000}"#)["result"]?["tag"]
        #expect(read?["uid"] == .string("04:A1:B2:C3:D4:E5:F6") && read?["atqa"] == .string("0044") && read?["sak"] == .string("00"), "\(String(describing: read))")
        #expect(try PluginProtocol.tag(from: read, plugin: "probe") == TagReader.tag)

        let uri = NDEFMessage.uri("https://example.org/a")
        let message = try PluginProtocol.value(of: uri)
        let written = try await channel.call(4, "nfc.write", #"{"timeoutMs":1000,"message":"\#(message.string ?? "")"}"#)["result"]?["tag"]
        #expect(try PluginProtocol.tag(from: written, plugin: "probe").ndef == uri)

        let garbled = try await channel.call(5, "nfc.write", #"{"timeoutMs":1000,"message":"not base64!"}"#)
        #expect(garbled["error"]?["data"]?["kind"] == .string("malformedData"), "\(garbled)")
        let noTimeout = try await channel.call(6, "nfc.read", "{}")
        #expect(noTimeout["error"]?["data"]?["kind"] == .string("invalidArgument"), "\(noTimeout)")
        let emulate = try await channel.call(7, "nfc.emulate", #"{"timeoutMs":1000,"message":"\#(message.string ?? "")"}"#)
        #expect(emulate["error"]?["data"]?["kind"] == .string("notConfigured"), "\(emulate)")

        // A long read, cancelled: the operation itself ends (its answer says so) at once.
        try await channel.expectCancelled(8, "nfc.read", #"{"timeoutMs":60000}"#)
    }

    /// Protocol 1.2: two capabilities in one process. `close` of one cancels its running
    /// request (answered `cancelled`) before its device closes; the other serves on.
    @Test func closeEndsOneCapabilitysRequestsAndLeavesTheOtherOpen() async throws {
        let motor = Motor()
        let descriptor = PluginDescriptor(name: "probe", summary: "a reader and a motor", capabilities: [.nfcReader: [], .haptics: []]) { capability, _, _ in
            capability == .haptics ? .haptics(motor) : .nfcReader(TagReader())
        }
        let channel = try Channel(descriptor)
        #expect(try await channel.call(1, "open", #"{"capability":"nfc","parameters":{}}"#)["result"]?["device"] == .string("test reader"))
        #expect(try await channel.call(2, "open", #"{"capability":"haptics","parameters":{}}"#)["result"]?["device"] == .string("test motor"))
        let again = try await channel.call(3, "open", #"{"capability":"nfc","parameters":{}}"#)
        #expect(again["error"]?["data"]?["kind"] == .string("busy"), "\(again)")
        // A read that waits a minute, then the reader closed under it.
        channel.send(#"{"jsonrpc":"2.0","id":4,"method":"nfc.read","params":{"timeoutMs":60000}}"# + "\n")
        try await Task.sleep(for: .milliseconds(200))
        let started = ContinuousClock.now
        channel.send(#"{"jsonrpc":"2.0","id":5,"method":"close","params":{"capability":"nfc"}}"# + "\n")
        var answers: [Int64: JSONValue] = [:]
        while answers.count < 2, let message = try await channel.next() {
            if let id = message["id"]?.integer { answers[id] = message }
        }
        #expect(answers[4]?["error"]?["data"]?["kind"] == .string("cancelled"), "\(answers)")
        #expect(answers[5]?["result"] == .null && answers[5]?["error"] == nil, "\(answers)")
        // Ended by the close, not by its minute (a bound far from both: a busy machine took 1.3 s).
        #expect(ContinuousClock.now - started < .seconds(30))
        let closedRead = try await channel.call(6, "nfc.read", #"{"timeoutMs":100}"#)
        #expect(closedRead["error"]?["data"]?["kind"] == .string("notConfigured"), "\(closedRead)")
        let twice = try await channel.call(7, "close", #"{"capability":"nfc"}"#)
        #expect(twice["error"]?["data"]?["kind"] == .string("notConfigured"), "\(twice)")
        #expect(try await channel.call(8, "haptics.play", #"{"pattern":"success"}"#)["result"] == Self.played(.success))
        #expect(motor.played.value == [.success])
    }

    /// Protocol 1.6: two motors open under the host's handles in one process, each with the
    /// identity its backend has; a request goes to the device it names; one closed leaves the
    /// other playing; a handle that is not open is `notConfigured`, one opened twice `busy`.
    @Test func devicesOpenUnderTheHostsHandlesAndEachRequestReachesItsOwn() async throws {
        let left = Motor(name: "left motor", identity: DeviceIdentity(vendor: "Test", model: "ERM", serial: "L1")), right = Motor(name: "right motor")
        let descriptor = PluginDescriptor(name: "probe", summary: "two motors",
                                          capabilities: [.haptics: [ParameterSpec("side", .string, required: true, help: "which")]]) { _, parameters, _ in
            .haptics(parameters.string("side") == "left" ? left : right)
        }
        let channel = try Channel(descriptor)
        let opened = try await channel.call(1, "open", #"{"capability":"haptics","device":"haptics-1","parameters":{"side":"left"}}"#)
        #expect(opened["result"]?["device"] == .string("left motor"), "\(opened)")
        #expect(opened["result"]?["identity"] == .object(["vendor": .string("Test"), "model": .string("ERM"), "serial": .string("L1")]), "\(opened)")
        let second = try await channel.call(2, "open", #"{"capability":"haptics","device":"haptics-2","parameters":{"side":"right"}}"#)
        #expect(second["result"]?["device"] == .string("right motor") && second["result"]?["identity"] == nil, "\(second)")
        let twice = try await channel.call(3, "open", #"{"capability":"haptics","device":"haptics-1","parameters":{"side":"left"}}"#)
        #expect(twice["error"]?["data"]?["kind"] == .string("busy"), "\(twice)")
        #expect(try await channel.call(4, "haptics.play", #"{"device":"haptics-2","pattern":"success"}"#)["result"] == Self.played(.success))
        #expect(try await channel.call(5, "haptics.play", #"{"device":"haptics-1","pattern":"warning"}"#)["result"] == Self.played(.warning))
        #expect(left.played.value == [.warning] && right.played.value == [.success])
        let unknown = try await channel.call(6, "haptics.play", #"{"device":"haptics-9","pattern":"success"}"#)
        #expect(unknown["error"]?["data"]?["kind"] == .string("notConfigured"), "\(unknown)")
        #expect(try await channel.call(7, "close", #"{"capability":"haptics","device":"haptics-1"}"#)["result"] == .null)
        let closed = try await channel.call(8, "haptics.play", #"{"device":"haptics-1","pattern":"success"}"#)
        #expect(closed["error"]?["data"]?["kind"] == .string("notConfigured"), "\(closed)")
        #expect(try await channel.call(9, "haptics.play", #"{"device":"haptics-2","pattern":"error"}"#)["result"] == Self.played(.error))
        #expect(right.played.value == [.success, .error] && left.played.value == [.warning])
    }

    /// `haptics.play`'s answer for `pattern` played as FieldHAL's theme has it: what was played.
    static func played(_ pattern: HapticPattern) -> JSONValue { PluginProtocol.value(of: HapticsPlayed(pattern.steps)) }

    /// An engine that records what it plays; a pattern over 1 s plays until cancelled.
    final class Motor: HapticsEngine {
        let deviceName: String
        let identity: DeviceIdentity?

        init(name: String = "test motor", identity: DeviceIdentity? = nil) {
            deviceName = name
            self.identity = identity
        }
        let played = LockedValue<[HapticPattern]>([])
        func play(_ pattern: HapticPattern) async throws -> HapticsPlayed {
            played.withLock { $0.append(pattern) }
            if PluginProtocol.length(of: pattern) > .seconds(1) { try await Task.sleep(for: .seconds(60)) }
            return HapticsPlayed(pattern.steps)
        }
        func close() async {}
    }

    @Test func hapticsPlayCarriesNamedAndCustomPatternsAndStopsWhenCancelled() async throws {
        let motor = Motor()
        let descriptor = PluginDescriptor(name: "probe", summary: "a test motor", capabilities: [.haptics: []]) { _, _, _ in .haptics(motor) }
        let channel = try Channel(descriptor)
        #expect(try await channel.call(1, "open", #"{"capability":"haptics","parameters":{}}"#)["result"]?["device"] == .string("test motor"))
        #expect(try await channel.call(2, "haptics.play", #"{"pattern":"warning"}"#)["result"] == Self.played(.warning))
        let custom = HapticPattern.custom([HapticStep(.periodic(magnitude: 0.5, periodMilliseconds: 20), durationMilliseconds: 80, pauseMilliseconds: 20),
                                           HapticStep(.rumble(strong: 0.25, weak: 0.75), durationMilliseconds: 50)])
        let encoded = String(decoding: try JSONEncoder().encode(PluginProtocol.value(of: custom)), as: UTF8.self)
        #expect(try await channel.call(3, "haptics.play", encoded)["result"] == Self.played(custom))
        #expect(motor.played.value == [.warning, custom])
        for (id, bad) in [(4, #"{"pattern":"purr"}"#), (5, #"{"steps":[{"effect":"rumble","strong":2,"weak":0,"durationMs":10}]}"#),
                          (6, #"{"steps":[]}"#), (7, #"{"steps":[{"effect":"buzz","durationMs":10}]}"#)] {
            let answer = try await channel.call(id, "haptics.play", bad)
            #expect(answer["error"]?["data"]?["kind"] == .string("invalidArgument"), "\(bad): \(answer)")
        }
        #expect(motor.played.value.count == 2, "a bad pattern never reaches the motor")
        // A long pattern, cancelled: the play itself ends at once.
        try await channel.expectCancelled(8, "haptics.play", #"{"steps":[{"effect":"rumble","strong":1,"weak":1,"durationMs":10000},{"effect":"rumble","strong":1,"weak":1,"durationMs":10000},{"effect":"rumble","strong":1,"weak":1,"durationMs":10000}]}"#)
    }

    final class Sensor: BiometricAuthenticator {
        let deviceName = "test sensor"
        let enrolled = LockedValue<[Finger]>([])
        func availability() async throws -> BiometricAvailability { BiometricAvailability(hasSensor: true, enrolledFingers: enrolled.value) }
        func verify(timeout: Duration) async throws -> BiometricResult {
            guard !enrolled.value.isEmpty else { throw FieldHALError(.unsupported, subject: deviceName, detail: "no finger", advice: "run fieldhal bio enroll") }
            try await Task.sleep(for: timeout)
            throw FieldHALError(.timeout, subject: deviceName, detail: "no finger in time")
        }
        func enroll(_ finger: Finger, progress: @Sendable (EnrollStage) -> Void) async throws {
            progress(.stagePassed(1))
            progress(.retry(.removeAndRetry))
            progress(.completed)
            enrolled.withLock { $0.append(finger) }
        }
        func close() async {}
    }

    @Test func biometricsCarryValuesStagesAsProgressErrorsAndCancellation() async throws {
        let sensor = Sensor()
        let descriptor = PluginDescriptor(name: "probe", summary: "a test sensor", capabilities: [.biometrics: []]) { _, _, _ in .biometrics(sensor) }
        let channel = try Channel(descriptor)
        #expect(try await channel.call(1, "biometrics.availability")["error"]?["data"]?["kind"] == .string("notConfigured"))
        #expect(try await channel.call(2, "open", #"{"capability":"biometrics","parameters":{}}"#)["result"]?["device"] == .string("test sensor"))
        let before = try await channel.call(3, "biometrics.verify", #"{"timeoutMs":1000}"#)
        #expect(before["error"]?["data"]?["kind"] == .string("unsupported") && before["error"]?["data"]?["advice"] == .string("run fieldhal bio enroll"), "\(before)")
        // The stages, each a $/progress naming the request, then the answer.
        channel.send(#"{"jsonrpc":"2.0","id":4,"method":"biometrics.enroll","params":{"finger":"left-thumb"}}"# + "\n")
        var messages: [JSONValue] = []
        while let message = try await channel.next() {
            messages.append(message)
            if message["id"] == .integer(4) { break }
        }
        #expect(messages.map { $0["method"] } == [.string("$/progress"), .string("$/progress"), .string("$/progress"), nil], "\(messages)")
        #expect(messages.dropLast().map { $0["params"]?["id"] } == Array(repeating: .integer(4), count: 3))
        #expect(try messages.dropLast().map { try PluginProtocol.stage(from: $0["params"]?["value"] ?? .null, plugin: "probe") }
                == [.stagePassed(1), .retry(.removeAndRetry), .completed])
        #expect(messages.last?["result"] == .null)
        let availability = try await channel.call(5, "biometrics.availability")["result"] ?? .null
        #expect(try PluginProtocol.availability(from: availability, plugin: "probe") == BiometricAvailability(hasSensor: true, enrolledFingers: [.leftThumb]))
        for (id, method, bad) in [(6, "biometrics.enroll", #"{"finger":"nose"}"#), (7, "biometrics.verify", #"{}"#),
                                  (8, "biometrics.verify", #"{"timeoutMs":0}"#)] {
            let answer = try await channel.call(id, method, bad)
            #expect(answer["error"]?["data"]?["kind"] == .string("invalidArgument"), "\(bad): \(answer)")
        }
        try await channel.expectCancelled(9, "biometrics.verify", #"{"timeoutMs":30000}"#)
    }

    /// What a plugin may say about biometrics, and what it may not.
    @Test func aPluginsBiometricsValuesAreCheckedAsTheProtocolNamesThem() throws {
        func value(_ json: String) throws -> JSONValue { try JSONDecoder().decode(JSONValue.self, from: Data(json.utf8)) }
        for stage in [EnrollStage.stagePassed(3), .retry(.retryScan), .completed] {
            #expect(try PluginProtocol.stage(from: PluginProtocol.value(of: stage), plugin: "probe") == stage)
        }
        for result in [BiometricResult.match, .noMatch, .retry(.swipeTooShort)] {
            #expect(try PluginProtocol.result(from: PluginProtocol.value(of: result), plugin: "probe") == result)
        }
        for bad in [#"{"stage":"passed"}"#, #"{"stage":"passed","number":0}"#, #"{"stage":"retry","reason":"sneeze"}"#, #"{"stage":7}"#] {
            #expect(throws: FieldHALError.self, "\(bad)") { try PluginProtocol.stage(from: try value(bad), plugin: "probe") }
        }
        for bad in [#"{"result":"maybe"}"#, #"{"result":"retry"}"#, #"[]"#] {
            #expect(throws: FieldHALError.self, "\(bad)") { try PluginProtocol.result(from: try value(bad), plugin: "probe") }
        }
        for bad in [#"{"hasSensor":true}"#, #"{"hasSensor":true,"enrolledFingers":["left-toe"]}"#, #"{"hasSensor":"yes","enrolledFingers":[]}"#] {
            #expect {
                try PluginProtocol.availability(from: try value(bad), plugin: "probe")
            } throws: { ($0 as? FieldHALError)?.kind == .protocolError && ($0 as? FieldHALError)?.subject == "plugin probe" }
        }
    }

    /// The host checks a plugin's tag as strictly as a tag read in process.
    @Test(arguments: [
        (#"{"type":"type9","uid":"04:A1:B2:C3"}"#, "type"),
        (#"{"type":"type2","uid":"zz"}"#, "uid"),
        (#"{"type":"type2","uid":"04"}"#, "uid"),
        (#"{"type":"type2","uid":"04:A1:B2:C3","atqa":"44"}"#, "atqa"),
        (#"{"type":"type2","uid":"04:A1:B2:C3","ndef":"AAAA"}"#, "NDEF"),
        (#"{"type":"type2","uid":"04:A1:B2:C3","ndef":7}"#, "NDEF"),
        (#"["type2"]"#, "not an object"),
    ])
    func aPluginsMalformedTagIsItsProtocolError(json: String, named: String) throws {
        let value = try JSONDecoder().decode(JSONValue.self, from: Data(json.utf8))
        #expect {
            try PluginProtocol.tag(from: value, plugin: "probe")
        } throws: { error in
            let error = error as? FieldHALError
            return error?.kind == .protocolError && error?.description.contains(named) == true && error?.subject == "plugin probe"
        }
    }

    @Test func theEndOfInputEndsItAndGarbageIsAnError() async throws {
        let quiet = try Channel()
        _ = try await quiet.call(1, "open", #"{"capability":"gps","parameters":{"device":"/dev/x"}}"#)
        shutdown(quiet.host, Int32(SHUT_WR))
        #expect(await quiet.served.value == 0)
        #expect(quiet.receiver.closed.value, "the end of the input releases the device")

        let garbled = try Channel()
        garbled.send("this is not JSON\n")
        #expect(await garbled.served.value == 1)
    }
}
