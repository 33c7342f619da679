import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A real gpsd, started by gpsfake on a private port and fed an NMEA log through a pty.
///
/// `kill()` sends SIGKILL to gpsd and gpsfake at once — the way gpsd dies when its service
/// is killed or crashes: no goodbye on the socket.
public final class GPSFake: @unchecked Sendable {
    public let port: Int
    /// The logs replayed, one receiver (pty) each.
    public let logs: [String]
    public var log: String { logs[0] }
    private let process = Process()

    /// The directory of the test logs (Tests/GpsdPluginTests/Logs).
    public static let logDirectory: String = {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("GpsdPluginTests/Logs").path
    }()

    public static func logPath(_ name: String) -> String { logDirectory + "/" + name }

    /// Starts gpsfake. `once`: play the log once, then gpsd drops the receiver; otherwise
    /// loop. `cycle`: seconds between sentences.
    public init(logs: [String], port: Int? = nil, once: Bool = false, cycle: Double = 0.02) throws {
        self.port = try port ?? Self.freePort()
        self.logs = logs
        process.executableURL = URL(fileURLWithPath: "/usr/bin/gpsfake")
        var arguments = ["-p", "-q", "-c", String(cycle), "-P", String(self.port)]
        if once { arguments.append("-1") }
        process.arguments = arguments + logs
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
    }

    deinit { kill() }

    /// Starts gpsfake and waits until its gpsd is actually reporting. Under load gpsfake
    /// sometimes leaves its gpsd without the device (it hands gpsd the pty over a control
    /// socket); such a gpsd listens but never reports. Up to three fresh starts.
    public static func start(log: String, port: Int? = nil, once: Bool = false, cycle: Double = 0.02) async throws -> GPSFake {
        try await start(logs: [log], port: port, once: once, cycle: cycle)
    }

    /// Starts gpsfake with one receiver per log, all on one gpsd. With several, the start
    /// waits until gpsd lists every one: gpsfake can lose a pty on its way to gpsd as it can
    /// lose the only one (CI, 2026-12-06 at 6cfd755: one of two never listed in 15 s), and a
    /// gpsd without it is started afresh like one that never reports.
    public static func start(logs: [String], port: Int? = nil, once: Bool = false, cycle: Double = 0.02) async throws -> GPSFake {
        var lastError: any Error = GPSFakeError("gpsfake did not start")
        for _ in 0..<3 {
            let gpsd = try GPSFake(logs: logs, port: port, once: once, cycle: cycle)
            do {
                try await gpsd.waitUntilListening()
                try await gpsd.waitUntilReporting()
                if logs.count > 1 { _ = try await gpsd.devicePaths() }
                return gpsd
            } catch {
                lastError = error
                gpsd.kill()
            }
        }
        throw lastError
    }

    /// The receivers' paths as gpsd names them (its DEVICES report), once it has all of the
    /// logs' receivers: gpsfake hands each pty to gpsd in turn.
    public func devicePaths(timeout: Duration = .seconds(15)) async throws -> [String] {
        let port = self.port, wanted = logs.count
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let paths = try await offPool { Self.devices(port: port) }
            if paths.count >= wanted { return paths }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw GPSFakeError("gpsd on port \(port) did not list \(wanted) receivers within \(timeout)")
    }

    /// The paths in the DEVICES report gpsd sends when a watch begins.
    static func devices(port: Int) -> [String] {
        guard let descriptor = Loopback.socket(port: port, connect) else { return [] }
        defer { close(descriptor) }
        let watch = "?WATCH={\"enable\":true,\"json\":true};\n"
        _ = watch.withCString { send(descriptor, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
        let deadline = ContinuousClock.now + .seconds(3)
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while ContinuousClock.now < deadline {
            // Whole lines only (a report may arrive in pieces), split as bytes: gpsd ends them
            // with CR LF, which a String keeps as one character.
            let whole = received.lastIndex(of: 0x0A).map { Array(received[...$0]) } ?? []
            for bytes in whole.split(separator: 0x0A) {
                let line = String(decoding: bytes, as: UTF8.self)
                guard line.hasPrefix("{\"class\":\"DEVICES\"") else { continue }
                guard let report = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                      let devices = report["devices"] as? [[String: Any]] else { return [] }
                return devices.compactMap { $0["path"] as? String }
            }
            var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&entry, 1, 200) >= 0 else { return [] }
            guard entry.revents != 0 else { continue }
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count <= 0 { return [] }
            received += buffer[0..<count]
        }
        return []
    }

    /// Waits for gpsd's first TPV report, on a connection of the helper's own.
    public func waitUntilReporting(timeout: Duration = .seconds(8)) async throws {
        let port = self.port
        let reporting = try await offPool { Self.sawReport(port: port, within: timeout) }
        guard reporting else { throw GPSFakeError("gpsd on port \(port) listens but reports nothing") }
    }

    static func sawReport(port: Int, within timeout: Duration) -> Bool {
        guard let descriptor = Loopback.socket(port: port, connect) else { return false }
        defer { close(descriptor) }
        let watch = "?WATCH={\"enable\":true,\"json\":true};\n"
        _ = watch.withCString { send(descriptor, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
        let deadline = ContinuousClock.now + timeout
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while ContinuousClock.now < deadline {
            var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&entry, 1, 200) >= 0 else { return false }
            guard entry.revents != 0 else { continue }
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count <= 0 { return false }
            received += buffer[0..<count]
            if String(decoding: received, as: UTF8.self).contains("\"class\":\"TPV\"") { return true }
        }
        return false
    }

    /// Waits until gpsd accepts connections on the port.
    public func waitUntilListening(timeout: Duration = .seconds(15)) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if Self.canConnect(port: port) { return }
            guard process.isRunning else { throw GPSFakeError("gpsfake exited with status \(process.terminationStatus)") }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw GPSFakeError("gpsd did not listen on port \(port) within \(timeout)")
    }

    /// Kills gpsfake and its gpsd at once (SIGKILL to the session).
    public func kill() {
        guard process.isRunning else { return }
        let pid = process.processIdentifier
        for child in Self.children(of: pid) { Glibc.kill(child, SIGKILL) }
        Glibc.kill(pid, SIGKILL)
        process.waitUntilExit()
    }

    /// The processes `pid` started (gpsfake's gpsd), from /proc.
    static func children(of pid: Int32) -> [Int32] {
        let list = (try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8)) ?? ""
        return list.split(separator: " ").compactMap { Int32($0) }
    }

    /// Ports handed out in this process: the kernel's "free port" can be handed to two
    /// tests in a row before either gpsd binds it, so tests take ports from a counter.
    private static let nextPort = NSLock()
    nonisolated(unsafe) private static var lastPort = 30_000 + Int(getpid() % 20_000)

    /// A TCP port nobody is listening on, never the same twice in one test run.
    public static func freePort() throws -> Int {
        for _ in 30_000..<60_000 {
            let candidate: Int = nextPort.withLock {
                lastPort = lastPort >= 60_000 ? 30_000 : lastPort + 1
                return lastPort
            }
            if isFree(candidate) { return candidate }
        }
        throw GPSFakeError("no free TCP port on 127.0.0.1 between 30000 and 60000")
    }

    /// Whether `port` can be bound on 127.0.0.1 right now.
    static func isFree(_ port: Int) -> Bool {
        guard let descriptor = Loopback.socket(port: port, bind) else { return false }
        close(descriptor)
        return true
    }

    /// Whether something accepts connections on 127.0.0.1:`port`.
    public static func canConnect(port: Int) -> Bool {
        guard let descriptor = Loopback.socket(port: port, connect) else { return false }
        close(descriptor)
        return true
    }
}

/// TCP sockets on 127.0.0.1 for the test peers.
enum Loopback {
    /// A new TCP socket on which `operation` (`connect` or `bind`) succeeded for
    /// 127.0.0.1:`port`; nil when either failed. The caller closes it.
    static func socket(port: Int, _ operation: (Int32, UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32? {
        let descriptor = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        let status = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { operation(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard status == 0 else {
            close(descriptor)
            return nil
        }
        return descriptor
    }
}

public struct GPSFakeError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// A helper script beside the tests, run with python3 (a misbehaving peer).
public final class ScriptPeer: @unchecked Sendable {
    private let process = Process()

    public init(script: String, arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [script] + arguments
        process.standardOutput = FileHandle.nullDevice
        try process.run()
    }

    deinit { stop() }

    /// SIGKILL: a child spawned from a test thread may inherit a mask that blocks SIGTERM.
    public func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
}
