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

        init() throws {
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
            served = Task { await PluginServer(descriptor, version: "2.1.0", input: plugin, output: plugin).serve() }
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

        #expect(try await channel.call(2, "nfc.read")["error"]?["code"] == .integer(-32601))
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
