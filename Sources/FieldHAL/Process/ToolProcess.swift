import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Runs a command-line tool (fprintd-verify, fprintd-enroll…) for a plugin that talks to a
/// daemon through its tools, and hands each line of output to the caller as it arrives.
///
/// The pipes are read on a thread of the run's own, waiting in `poll` beside a wake-up
/// pipe, so a cancelled or timed-out run ends at once: the tool gets SIGKILL (SIGTERM
/// could be blocked in a child spawned from a thread that blocks it) and the run throws.
/// A daemon that tracks its clients by connection (fprintd releases a claimed sensor
/// when the claiming client disconnects) cleans up after a killed tool by itself.
public enum ToolProcess {
    public enum Stream: Sendable { case standardOutput, standardError }

    /// What the line handler wants next.
    public enum Next: Sendable { case keepReading, stop }

    public struct Outcome: Sendable {
        /// The exit status, or nil when the run stopped the tool itself.
        public var status: Int32?
        public var standardOutput: [String]
        public var standardError: [String]
    }

    /// Runs `executable` until it exits, `onLine` says `.stop`, `timeout` passes (throws
    /// `timeout` waiting for `what`), or the task is cancelled (throws `cancelled`).
    public static func run(
        _ executable: String, _ arguments: [String], environment: [String: String] = [:],
        subject: String, timeout: Duration?, waitingFor what: String = "result",
        onLine: @escaping @Sendable (Stream, String) -> Next = { _, _ in .keepReading }
    ) async throws -> Outcome {
        let wakeup = try WakeupEvent()
        let thread = DeviceThread(name: "fieldhal-tool")
        defer { thread.stop() }
        let interrupted = LockedValue(false)
        return try await thread.run(interrupt: {
            interrupted.withLock { $0 = true }
            wakeup.signal()
        }) {
            try runBlocking(executable, arguments, environment: environment, subject: subject, timeout: timeout,
                            what: what, wakeup: wakeup, interrupted: interrupted, onLine: onLine)
        }
    }

    private static func runBlocking(
        _ executable: String, _ arguments: [String], environment: [String: String], subject: String,
        timeout: Duration?, what: String, wakeup: WakeupEvent, interrupted: LockedValue<Bool>,
        onLine: (Stream, String) -> Next
    ) throws -> Outcome {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let output = Pipe(), errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            throw FieldHALError(.unavailable, subject: subject, detail: "cannot run \(executable): \(error.localizedDescription)")
        }
        let deadline = timeout.map { ContinuousClock.now + $0 }
        var outcome = Outcome(status: nil, standardOutput: [], standardError: [])
        var buffers: [Stream: [UInt8]] = [.standardOutput: [], .standardError: []]
        var open: [Stream: Int32] = [.standardOutput: output.fileHandleForReading.fileDescriptor,
                                     .standardError: errors.fileHandleForReading.fileDescriptor]
        var stopReason: FieldHALError?
        var stoppedByHandler = false

        reading: while !open.isEmpty {
            if interrupted.value { stopReason = .cancelled(subject); break }
            var waitMilliseconds: Int32 = -1
            if let deadline {
                let left = deadline - .now
                if left <= .zero { stopReason = .timeout(subject, after: timeout!, waitingFor: what); break }
                waitMilliseconds = Int32(clamping: Int((left.seconds * 1000).rounded(.up)))
            }
            let streams = Array(open.keys)
            var entries = streams.map { pollfd(fd: open[$0]!, events: Int16(POLLIN), revents: 0) }
            entries.append(pollfd(fd: wakeup.fileDescriptor, events: Int16(POLLIN), revents: 0))
            let ready = poll(&entries, nfds_t(entries.count), waitMilliseconds)
            if ready < 0 && errno != EINTR { break }
            if entries.last!.revents != 0 { wakeup.drain(); continue }
            for (index, stream) in streams.enumerated() where entries[index].revents != 0 {
                var chunk = [UInt8](repeating: 0, count: 4096)
                let count = read(open[stream]!, &chunk, chunk.count)
                if count <= 0 {
                    open[stream] = nil
                    if let rest = buffers[stream], !rest.isEmpty { buffers[stream] = rest + [10] } else { continue }
                } else {
                    buffers[stream]! += chunk[0..<count]
                }
                while let newline = buffers[stream]!.firstIndex(of: 10) {
                    let line = String(decoding: buffers[stream]![..<newline], as: UTF8.self)
                    buffers[stream]!.removeSubrange(...newline)
                    if stream == .standardOutput { outcome.standardOutput.append(line) } else { outcome.standardError.append(line) }
                    if onLine(stream, line) == .stop { stoppedByHandler = true; break reading }
                }
            }
        }
        if process.isRunning && (stopReason != nil || stoppedByHandler) {
            kill(process.processIdentifier, SIGKILL)
        }
        process.waitUntilExit()
        if let stopReason { throw stopReason }
        if !stoppedByHandler { outcome.status = process.terminationStatus }
        return outcome
    }
}
