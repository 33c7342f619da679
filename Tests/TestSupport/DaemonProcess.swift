import Foundation

/// `fieldhal run` as a process, the way systemd runs it.
public final class DaemonProcess: @unchecked Sendable {
    public let process = Process()
    private let lines = LockedLines()
    public let started = ContinuousClock.now

    /// `command`: another streaming command to follow the same way (`gps watch`);
    /// `executable`: another program than fieldhal (a peer), run and followed the same way.
    public init(_ arguments: [String], command: [String] = ["run"], environment extra: [String: String] = [:],
                executable: String? = nil) throws {
        process.executableURL = executable.map { URL(fileURLWithPath: $0) } ?? CLI.binary
        process.arguments = command + arguments
        var environment = ProcessInfo.processInfo.environment
        environment["FIELDHAL_CONFIG"] = "fake"  // the built-in fake kit unless --config names a file
        environment.merge(extra) { $1 }
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let handle = output.fileHandleForReading, lines = self.lines
        Thread {
            var buffer = Data()
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                buffer += chunk
                while let newline = buffer.firstIndex(of: 10) {
                    lines.append(String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self), at: ContinuousClock.now)
                    buffer = Data(buffer[(newline + 1)...])
                }
            }
        }.start()
    }

    public var output: [String] { lines.all.map(\.0) }

    /// The first line containing `text`, and when it was read; nil after `timeout`.
    public func waitForLine(containing text: String, timeout: Duration) async -> (String, ContinuousClock.Instant)? {
        let lines = self.lines
        return try? await offPool {
            let deadline = ContinuousClock.now + timeout
            while ContinuousClock.now < deadline {
                if let line = lines.all.first(where: { $0.0.contains(text) }) { return line }
                usleep(10_000)
            }
            return nil
        }
    }

    /// Sends `signal` and waits for the exit; returns the status and how long it took.
    public func stop(_ signal: Int32 = SIGTERM) async -> (status: Int32, took: Duration) {
        let process = self.process
        return (try? await offPool { () -> (Int32, Duration) in
            let sent = ContinuousClock.now
            kill(process.processIdentifier, signal)
            let deadline = sent + .seconds(10)
            while process.isRunning, ContinuousClock.now < deadline { usleep(10_000) }
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
            return (process.terminationStatus, ContinuousClock.now - sent)
        }) ?? (-1, .zero)
    }
}

public final class LockedLines: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [(String, ContinuousClock.Instant)] = []
    public var all: [(String, ContinuousClock.Instant)] { lock.withLock { stored } }
    public func append(_ line: String, at instant: ContinuousClock.Instant) { lock.withLock { stored.append((line, instant)) } }
}
