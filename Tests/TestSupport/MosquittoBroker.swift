import FieldHALProcess
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Debian's mosquitto broker on a loopback port of its own, for the MQTT bridge's tests:
/// stopped and started again on the same port and persistence file, as a fleet's broker
/// restarts.
public final class MosquittoBroker: @unchecked Sendable {
    public let port: Int
    public let directory: String
    private var process: ChildProcess?
    private let lock = NSLock()

    public static let path = "/usr/sbin/mosquitto"
    public static var isInstalled: Bool { FileManager.default.isExecutableFile(atPath: path) }

    /// A broker that keeps sessions and queued messages across its restarts (persistence),
    /// as a fleet's does.
    public static func start(listener: String? = nil) async throws -> MosquittoBroker {
        let broker = try MosquittoBroker(port: try GPSFake.freePort(), listener: listener)
        try await broker.start()
        return broker
    }

    /// A broker not started yet (`start()` it later: the kit first finds none). `listener`:
    /// lines for its listener (TLS's files), `allow_anonymous true` when nil.
    public init(port: Int, listener: String? = nil) throws {
        self.port = port
        directory = NSTemporaryDirectory() + "fieldhal-mosquitto-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let configuration = """
            listener \(port) 127.0.0.1
            \(listener ?? "allow_anonymous true")
            persistence true
            persistence_location \(directory)/
            user root
            log_dest file \(directory)/mosquitto.log
            log_type all

            """
        try configuration.write(toFile: directory + "/mosquitto.conf", atomically: true, encoding: .utf8)
    }

    /// Starts the broker; returns once it accepts connections.
    public func start() async throws {
        // Spawned with no signal blocked (a test thread's mask would make it deaf to SIGTERM).
        let process = try ChildProcess(Self.path, ["-c", directory + "/mosquitto.conf"], environment: [:], output: .discard, errors: .discard)
        lock.withLock { self.process = process }
        let port = self.port
        guard await eventually(within: .seconds(20), { GPSFake.canConnect(port: port) }) else {
            stop()
            throw GPSFakeError("mosquitto did not listen on 127.0.0.1:\(port): \(log)")
        }
    }

    /// SIGTERM (the broker saves its sessions), waited for; SIGKILL after 10 s.
    public func stop() {
        guard let process = lock.withLock({ () -> ChildProcess? in defer { self.process = nil }; return self.process }) else { return }
        _ = kill(process.pid, SIGTERM)
        let deadline = ContinuousClock.now + .seconds(10)
        while !process.hasExited && ContinuousClock.now < deadline { usleep(10_000) }
        process.kill()
        process.waitForExit()
    }

    public var log: String { (try? String(contentsOfFile: directory + "/mosquitto.log", encoding: .utf8)) ?? "" }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// `mosquitto_sub`, a real MQTT client, subscribed with QoS 1 and a persistent session (it
/// gets what was published while it or the broker was away), each message one line:
/// `topic|retained|payload`.
public final class MQTTSubscriber: @unchecked Sendable {
    private let peer: DaemonProcess

    /// Returns once the broker has confirmed the subscription (`-d` prints its SUBACK).
    /// `options`: more of mosquitto_sub's (`--cafile`, `--cert`, `--key`, `-h localhost`).
    public static func start(port: Int, topics: [String], id: String = "sub-\(UUID().uuidString.prefix(8))",
                             options: [String] = ["-h", "127.0.0.1"]) async throws -> MQTTSubscriber {
        let subscriber = try MQTTSubscriber(port: port, topics: topics, id: id, options: options)
        guard await subscriber.peer.waitForLine(containing: "received SUBACK", timeout: .seconds(20)) != nil else {
            await subscriber.stop()
            throw GPSFakeError("mosquitto_sub did not subscribe on 127.0.0.1:\(port): \(subscriber.peer.output)")
        }
        return subscriber
    }

    private init(port: Int, topics: [String], id: String, options: [String]) throws {
        // Line-buffered: `-d`'s lines are printed without a flush.
        peer = try DaemonProcess(["-oL", "/usr/bin/mosquitto_sub", "-d"] + options + ["-p", "\(port)", "-q", "1", "-c", "-i", id, "-F", "%t|%r|%p"]
                                    + topics.flatMap { ["-t", $0] }, command: [], executable: "/usr/bin/stdbuf")
    }

    deinit {
        if peer.process.isRunning { kill(peer.process.processIdentifier, SIGKILL) }
    }

    /// The messages, without `-d`'s lines about the connection.
    public var lines: [String] { peer.output.filter { !$0.hasPrefix("Client ") && !$0.hasPrefix("Subscribed (") } }

    /// The first line containing `text`; nil after `timeout`.
    public func waitForLine(containing text: String, timeout: Duration = .seconds(20)) async -> String? {
        var found: String?
        _ = await eventually(within: timeout) {
            found = self.lines.first { $0.contains(text) }
            return found != nil
        }
        return found
    }

    /// Lines until `count` of them contain `text`; false after `timeout`.
    public func waitForLines(containing text: String, count: Int, timeout: Duration = .seconds(30)) async -> Bool {
        await eventually(within: timeout) { self.lines.filter { $0.contains(text) }.count >= count }
    }

    /// SIGKILL: its session stays with the broker (spawned by Foundation, it may not hear SIGTERM).
    public func stop() async { _ = await peer.stop(SIGKILL) }
}

/// `mosquitto_pub`, a real MQTT client: publishes each of `messages` on `topic` (one line
/// each, `-l`), at QoS 0 as fast as the broker takes them, and returns when it has.
/// `whole`: the one message as it is, newlines and all (`-s`).
public func publishMQTT(port: Int, topic: String, _ messages: [String], whole: Bool = false) async throws {
    try await offPool {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/mosquitto_pub")
        process.arguments = ["-h", "127.0.0.1", "-p", "\(port)", "-t", topic, whole ? "-s" : "-l"]
        let input = Pipe()
        process.standardInput = input
        try process.run()
        input.fileHandleForWriting.write(Data((whole ? messages.joined() : messages.map { $0 + "\n" }.joined()).utf8))
        try input.fileHandleForWriting.close()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw GPSFakeError("mosquitto_pub exited with status \(process.terminationStatus)") }
    }
}
