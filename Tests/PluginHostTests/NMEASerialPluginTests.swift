import FieldHAL
import FieldHALProcess
import FieldHALPluginHost
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import TestSupport
import Testing

/// A receiver's serial port: a pty that `nmea-pty.py` writes an NMEA log into on command,
/// so the plugin reads a tty as it would a USB or UART receiver's.
final class ReceiverPort: @unchecked Sendable {
    private let child: ChildProcess
    private var received: [UInt8] = []
    private(set) var path = ""

    init(log: String) throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("nmea-pty.py").path
        child = try ChildProcess("/usr/bin/python3", [script, log], environment: ProcessInfo.processInfo.environment,
                                 errors: .discard, connection: true)
        path = try readLine()
    }

    /// Sends a command and waits (10 s at most) for its answer line.
    func command(_ text: String) throws -> String {
        let bytes = Array((text + "\n").utf8)
        guard send(child.connection!, bytes, bytes.count, Int32(MSG_NOSIGNAL)) == bytes.count else { throw GPSFakeError("nmea-pty.py is gone") }
        return try readLine()
    }

    private func readLine() throws -> String {
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            if let newline = received.firstIndex(of: 10) {
                defer { received.removeSubrange(...newline) }
                return String(decoding: received[..<newline], as: UTF8.self)
            }
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { throw GPSFakeError("nmea-pty.py did not answer") }
            var entry = pollfd(fd: child.connection!, events: Int16(POLLIN), revents: 0)
            _ = poll(&entry, 1, left.pollTimeout)
            var chunk = [UInt8](repeating: 0, count: 4096)
            let count = recv(child.connection!, &chunk, chunk.count, Int32(MSG_DONTWAIT))
            if count == 0 { throw GPSFakeError("nmea-pty.py ended") }
            if count > 0 { received += chunk[..<count] }
        }
    }
}

/// The reference plugin in `examples/plugins/nmea-serial` (Python, standard library only),
/// loaded from its plugin directory into a kit and fed NMEA on a pty.
@Suite(.timeLimit(.minutes(2))) struct NMEASerialPluginTests {
    static let directory = CLI.repositoryRoot.appendingPathComponent("examples/plugins").path
    static let log = CLI.repositoryRoot.appendingPathComponent("Tests/GpsdPluginTests/Logs/moving-3d.nmea").path

    @Test func itsManifestAndHandshakeAgree() async throws {
        let manifest = try PluginManifest.load(Self.directory + "/nmea-serial/plugin.json")
        let handshake = try await PluginCheck.handshake(manifest)
        #expect(handshake.name == "nmea-serial" && handshake.capabilities == [.location])
    }

    @Test func fixesFromAReceiversSentencesThenTheUnplug() async throws {
        let port = try await offPool { try ReceiverPort(log: Self.log) }
        let (registry, discovery) = PluginRegistry.adding(externalPluginsTo: PluginRegistry([]), directories: [Self.directory])
        #expect(discovery.problems.isEmpty)
        let configuration = try KitConfiguration.parse("[gps]\nplugin = \"nmea-serial\"\ndevice = \"\(port.path)\"\nbaud = 9600\n",
                                                       file: "kit.toml", directory: "/tmp", registry: registry)
        let kit = await Kit.load(configuration, registry: registry, context: PluginContext(configDirectory: "/tmp", stateDirectory: "/tmp"))
        #expect(kit.status(of: .location).device == "nmea \(port.path) (plugin nmea-serial)", "\(kit.status(of: .location))")
        let location = try kit.location()
        let stream = location.watch()  // subscribed before the first sentence
        let collecting = Task {
            var received: [Fix] = []
            for try await fix in stream {
                received.append(fix)
                if received.count == 9 { break }
            }
            return received
        }
        // The log's epochs, 50 ms apart, after a half sentence (plugged in mid-line) and one
        // whose checksum is wrong (a noisy line).
        #expect(try await offPool { try port.command("feed") } == "fed")
        let received = try await withDeadline(.seconds(10)) { try await collecting.value }
        let first = try #require(received.first)
        #expect(first.mode == .threeD)
        #expect(abs(first.latitude! - 52.52) < 1e-9 && abs(first.longitude! - 13.405) < 1e-9)
        #expect(first.altitude == 34.5 && first.satellitesUsed == 8 && first.horizontalAccuracy == 4.5)
        #expect(abs(first.speed! - 9.72 * 0.514444) < 1e-3 && first.course == 45)
        #expect(first.time == ISO8601DateFormatter().date(from: "2026-03-15T12:00:00Z"))
        #expect(received.allSatisfy { $0.latitude != 11 + 11.0 / 60 }, "the sentence with a wrong checksum is dropped")
        let times = received.map(\.time)
        #expect(times == times.sorted() && Set(times).count == times.count, "one fix per epoch, in order")

        let after = location.watch()
        #expect(try await offPool { try port.command("unplug") } == "unplugged")
        let lost = try await withDeadline(.seconds(10)) { () async throws -> Fix? in
            for try await fix in after where fix.sourceProblem != nil { return fix }
            return nil
        }
        #expect(lost?.sourceProblem?.contains("\(port.path) went away") == true, "\(String(describing: lost))")
        await kit.close()
    }
}
