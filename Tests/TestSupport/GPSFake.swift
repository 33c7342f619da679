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
    public let log: String
    private let process = Process()

    /// The directory of the test logs (Tests/GpsdPluginTests/Logs).
    public static let logDirectory: String = {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("GpsdPluginTests/Logs").path
    }()

    public static func logPath(_ name: String) -> String { logDirectory + "/" + name }

    /// Starts gpsfake. `once`: play the log once, then gpsd drops the receiver; otherwise
    /// loop. `cycle`: seconds between sentences.
    public init(log: String, port: Int? = nil, once: Bool = false, cycle: Double = 0.02) throws {
        self.port = try port ?? Self.freePort()
        self.log = log
        process.executableURL = URL(fileURLWithPath: "/usr/bin/gpsfake")
        var arguments = ["-p", "-q", "-c", String(cycle), "-P", String(self.port)]
        if once { arguments.append("-1") }
        process.arguments = arguments + [log]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
    }

    deinit { kill() }

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
        while true {
            let candidate: Int = nextPort.withLock {
                lastPort = lastPort >= 60_000 ? 30_000 : lastPort + 1
                return lastPort
            }
            if try isFree(candidate) { return candidate }
        }
    }

    /// Whether `port` can be bound on 127.0.0.1 right now.
    static func isFree(_ port: Int) throws -> Bool {
        let socketDescriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socketDescriptor >= 0 else { throw GPSFakeError("socket: \(errno)") }
        defer { close(socketDescriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        let length = socklen_t(MemoryLayout<sockaddr_in>.size)
        return withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socketDescriptor, $0, length) == 0 }
        }
    }

    public static func canConnectForTests(port: Int) -> Bool { canConnect(port: port) }

    static func canConnect(port: Int) -> Bool {
        let socketDescriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socketDescriptor >= 0 else { return false }
        defer { close(socketDescriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(socketDescriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
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
