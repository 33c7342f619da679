import FieldHALProcess
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A real fprintd on a private system bus, with libfprint's virtual sensor (lab notes,
/// Biometrics): dbus-daemon, polkit mocked by python3-dbusmock (allowing everything), and
/// `fprintd -t` with `FP_VIRTUAL_DEVICE`. Commands for the sensor (`SCAN <id>`, `RETRY <n>`,
/// `ERROR <n>`, `UNPLUG`) go to its Unix socket, one per connection.
public final class FprintdLab: @unchecked Sendable {
    public let directory: String
    public var busAddress: String { "unix:path=\(directory)/system_bus_socket" }
    private var processes: [Process] = []
    private var fprintd: Process?

    /// Starts the lab off the cooperative pool (it waits for three daemons).
    public static func start() async throws -> FprintdLab {
        try await offPool { try FprintdLab() }
    }

    init() throws {
        directory = NSTemporaryDirectory() + "fieldhal-fprintd-\(UUID().uuidString.prefix(8))"
        for sub in ["state", "run"] {
            try FileManager.default.createDirectory(atPath: directory + "/" + sub, withIntermediateDirectories: true)
        }
        try """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>system</type>
          <listen>unix:path=\(directory)/system_bus_socket</listen>
          <policy context="default">
            <allow user="*"/> <allow own="*"/>
            <allow send_type="method_call"/> <allow send_type="signal"/>
            <allow send_type="method_return"/> <allow send_type="error"/>
            <allow receive_type="method_call"/> <allow receive_type="signal"/>
            <allow receive_type="method_return"/> <allow receive_type="error"/>
          </policy>
        </busconfig>
        """.write(toFile: directory + "/bus.conf", atomically: true, encoding: .utf8)
        processes.append(try start("/usr/bin/dbus-daemon", ["--config-file=\(directory)/bus.conf", "--nofork"]))
        try waitFor("the private bus") { FileManager.default.fileExists(atPath: self.directory + "/system_bus_socket") }
        processes.append(try start("/usr/bin/python3", ["-m", "dbusmock", "--system", "--template", "polkitd"]))
        try waitFor("polkit (dbusmock)") {
            (try? self.gdbus(["call", "--system", "-d", "org.freedesktop.PolicyKit1", "-o", "/org/freedesktop/PolicyKit1/Authority",
                              "-m", "org.freedesktop.DBus.Mock.AllowUnknown", "true"])) != nil
        }
        try startFprintd()
    }

    deinit { stop() }

    /// logind on the lab's bus (dbusmock's template: `Inhibit` hands out a pipe whose
    /// closing drops the inhibitor, `ListInhibitors` lists them), for the update hold.
    public func startLogind() throws {
        processes.append(try start("/usr/bin/python3", ["-m", "dbusmock", "--system", "--template", "logind"]))
        try waitFor("logind (dbusmock)") {
            (try? self.gdbus(["call", "--system", "-d", "org.freedesktop.login1", "-o", "/org/freedesktop/login1",
                              "-m", "org.freedesktop.login1.Manager.ListInhibitors"])) != nil
        }
    }

    /// (Re)starts fprintd; enrolled prints persist in the lab's state directory.
    public func startFprintd() throws {
        let process = try start("/usr/libexec/fprintd", ["-t"], environment: [
            "FP_VIRTUAL_DEVICE": directory + "/vdev.sock", "FP_DRIVERS_WHITELIST": "virtual_device",
            "STATE_DIRECTORY": directory + "/state", "RUNTIME_DIRECTORY": directory + "/run",
        ])
        fprintd = process
        processes.append(process)
        try waitFor("fprintd on the bus") {
            (try? self.gdbus(["call", "--system", "-d", "net.reactivated.Fprint", "-o", "/net/reactivated/Fprint/Manager",
                              "-m", "net.reactivated.Fprint.Manager.GetDevices"]))?.contains("/Device/") == true
        }
    }

    /// Kills fprintd (SIGKILL), as a crash would.
    public func killFprintd() {
        guard let fprintd, fprintd.isRunning else { return }
        kill(fprintd.processIdentifier, SIGKILL)
        fprintd.waitUntilExit()
    }

    public func stop() {
        for process in processes.reversed() where process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        processes.removeAll()
    }

    /// Sends one command to the virtual sensor once fprintd is waiting for a finger.
    public func touch(_ command: String) async throws {
        try await offPool { try self.touchBlocking(command) }
    }

    func touchBlocking(_ command: String) throws {
        try waitFor("fprintd to want a finger") { self.fingerNeeded() }
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw GPSFakeError("socket: \(errno)") }
        defer { close(descriptor) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let path = Array((directory + "/vdev.sock").utf8CString)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.prefix(raw.count - 1).enumerated() { raw[index] = UInt8(bitPattern: byte) }
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else { throw GPSFakeError("connect to the virtual sensor: \(errno)") }
        _ = command.withCString { send(descriptor, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
    }

    /// The lab's fprintd: whether it runs, how it ended, and the end of what it wrote.
    public var fprintdReport: String {
        let log = (try? String(contentsOfFile: directory + "/fprintd.log", encoding: .utf8)) ?? ""
        let state = fprintd.map { $0.isRunning ? "running" : "exited \($0.terminationStatus) (\($0.terminationReason == .uncaughtSignal ? "signal" : "exit"))" } ?? "never started"
        return "fprintd \(state); its log ends: \(log.suffix(600))"
    }

    public func fingerNeeded() -> Bool {
        let answer = try? gdbus(["call", "--system", "-d", "net.reactivated.Fprint", "-o", "/net/reactivated/Fprint/Device/0",
                                 "-m", "org.freedesktop.DBus.Properties.Get", "net.reactivated.Fprint.Device", "finger-needed"])
        return answer?.contains("true") == true
    }

    /// Runs gdbus on the lab's bus; throws when it fails or takes over 10 s.
    ///
    /// Through `ChildProcess` (close-on-exec pipes, posix_spawn with closefrom), not
    /// Foundation's `Process`: Foundation's pipe is inherited by a program started in the same
    /// instant (a daemon of the same test), which then holds its write end for its whole life,
    /// and reading gdbus's answer to its end never ended (a CI run froze in
    /// BiometricsCLITests so, 2026-11-28).
    @discardableResult
    public func gdbus(_ arguments: [String]) throws -> String {
        let environment = ProcessInfo.processInfo.environment.merging(["DBUS_SYSTEM_BUS_ADDRESS": busAddress]) { $1 }
        let child = try ChildProcess("/usr/bin/gdbus", arguments, environment: environment, output: .pipe, errors: .discard)
        let output = child.standardOutput!
        var text: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        let deadline = ContinuousClock.now + .seconds(10)
        reading: while true {
            var entry = pollfd(fd: output, events: Int16(POLLIN), revents: 0)
            let left = deadline - ContinuousClock.now
            guard left > .zero else {
                child.kill()
                child.waitForExit()
                throw GPSFakeError("gdbus \(arguments.joined(separator: " ")) took over 10 s")
            }
            guard poll(&entry, 1, 100) >= 0 || errno == EINTR else { break }
            guard entry.revents != 0 else { continue }
            let count = read(output, &buffer, buffer.count)
            switch count {
            case 0: break reading
            case ..<0 where errno == EAGAIN || errno == EINTR: continue
            case ..<0: break reading
            default: text += buffer[0..<count]
            }
        }
        child.waitForExit()
        guard child.terminationStatus == 0 else { throw GPSFakeError("gdbus \(arguments.joined(separator: " ")) failed") }
        return String(decoding: text, as: UTF8.self)
    }

    private func start(_ path: String, _ arguments: [String], environment: [String: String] = [:]) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment.merging(["DBUS_SYSTEM_BUS_ADDRESS": busAddress]) { $1 }) { $1 }
        process.standardOutput = FileHandle.nullDevice
        // What each peer says, kept in the lab's directory (`log`): fprintd vanished from
        // its bus once in CI just after it was ready, and said nothing anyone kept.
        let log = directory + "/" + URL(fileURLWithPath: path).lastPathComponent + ".log"
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        process.standardError = FileHandle(forWritingAtPath: log) ?? FileHandle.nullDevice
        try process.run()
        return process
    }

    private func waitFor(_ what: String, timeout: Duration = .seconds(15), _ condition: () -> Bool) throws {
        let deadline = ContinuousClock.now + timeout
        while !condition() {
            guard ContinuousClock.now < deadline else { throw GPSFakeError("\(what) not ready within \(timeout)") }
            usleep(50_000)
        }
    }
}
