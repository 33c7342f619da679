import FieldHAL
import FieldHALSystem
import SystemPackage
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
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
        onLine: @escaping (Stream, String) -> Next
    ) throws -> Outcome {
        let child: ChildProcess
        do {
            child = try ChildProcess(executable, arguments,
                                     environment: ProcessInfo.processInfo.environment.merging(environment) { $1 })
        } catch {
            throw FieldHALError(.unavailable, subject: subject, detail: "cannot run \(executable): \(error)")
        }
        let deadline = timeout.map { ContinuousClock.now + $0 }
        var lines = LineSplitter(onLine: onLine)
        var open: [Stream: Int32] = [.standardOutput: child.standardOutput!, .standardError: child.standardError!]
        var stopReason: FieldHALError?

        reading: while true {
            if interrupted.value { stopReason = .cancelled(subject); break }
            if child.hasExited {
                // All the tool wrote is in the pipes now. Read what is there and stop: a copy
                // of a write end held elsewhere must not keep the run waiting for an EOF.
                for (stream, descriptor) in open {
                    if lines.drain(descriptor, stream) == .stop { break reading }
                }
                lines.finish()
                break
            }
            // Without an exit descriptor (no pidfd), the exit is looked for every 50 ms.
            var wait: Duration? = child.exitDescriptor == nil ? .milliseconds(50) : nil
            if let deadline {
                let left = deadline - .now
                if left <= .zero { stopReason = .timeout(subject, after: timeout!, waitingFor: what); break }
                wait = min(wait ?? left, left)
            }
            let streams = Array(open.keys)
            var entries = streams.map { pollfd(fd: open[$0]!, events: Int16(POLLIN), revents: 0) }
            entries.append(pollfd(fd: child.exitDescriptor ?? -1, events: Int16(POLLIN), revents: 0))
            entries.append(pollfd(fd: wakeup.fileDescriptor, events: Int16(POLLIN), revents: 0))
            do {
                try SystemCall.poll(&entries, timeout: wait, subject: subject)
            } catch {
                stopReason = error
                break
            }
            if entries.last!.revents != 0 { wakeup.drain(); continue }
            for (index, stream) in streams.enumerated() where entries[index].revents != 0 {
                switch lines.readOnce(open[stream]!, stream) {
                case .stop: break reading
                case .endOfFile: open[stream] = nil
                case .keepReading: break
                }
            }
        }
        if !child.hasExited {
            child.kill()
            child.waitForExit()
            if let stopReason { throw stopReason }
            return Outcome(status: nil, standardOutput: lines.outcome.standardOutput, standardError: lines.outcome.standardError)
        }
        if let stopReason { throw stopReason }
        var outcome = lines.outcome
        outcome.status = lines.stopped ? nil : child.terminationStatus
        return outcome
    }
}

/// The tool's output cut into lines, each handed to the caller as it completes.
private struct LineSplitter {
    enum Read { case keepReading, endOfFile, stop }

    let onLine: (ToolProcess.Stream, String) -> ToolProcess.Next
    var outcome = ToolProcess.Outcome(status: nil, standardOutput: [], standardError: [])
    /// Whether the caller said `.stop`.
    private(set) var stopped = false
    private var buffers: [ToolProcess.Stream: [UInt8]] = [.standardOutput: [], .standardError: []]

    init(onLine: @escaping (ToolProcess.Stream, String) -> ToolProcess.Next) { self.onLine = onLine }

    /// One read of `descriptor` (non-blocking), its complete lines handed on.
    mutating func readOnce(_ descriptor: Int32, _ stream: ToolProcess.Stream) -> Read {
        var chunk = [UInt8](repeating: 0, count: 4096)
        switch SystemCall.attempt({ read(descriptor, &chunk, chunk.count) }) {
        case .failure(.resourceTemporarilyUnavailable): return .keepReading
        case .success(let count) where count > 0:
            buffers[stream]! += chunk[0..<count]
            return split(stream) ? .stop : .keepReading
        case .success, .failure: return flush(stream) ? .stop : .endOfFile
        }
    }

    /// Everything `descriptor` holds now, without waiting for more.
    mutating func drain(_ descriptor: Int32, _ stream: ToolProcess.Stream) -> Read {
        while true {
            var chunk = [UInt8](repeating: 0, count: 4096)
            guard case .success(let count) = SystemCall.attempt({ read(descriptor, &chunk, chunk.count) }), count > 0 else {
                return flush(stream) ? .stop : .endOfFile
            }
            buffers[stream]! += chunk[0..<count]
            if split(stream) { return .stop }
        }
    }

    /// Hands on the unterminated last lines of both streams.
    mutating func finish() {
        for stream in [ToolProcess.Stream.standardOutput, .standardError] where flush(stream) { return }
    }

    /// The last line of `stream` when it has no newline; true when the caller said stop.
    private mutating func flush(_ stream: ToolProcess.Stream) -> Bool {
        guard !buffers[stream]!.isEmpty else { return false }
        buffers[stream]!.append(10)
        return split(stream)
    }

    /// Hands on each complete line; true when the caller said stop.
    private mutating func split(_ stream: ToolProcess.Stream) -> Bool {
        while let newline = buffers[stream]!.firstIndex(of: 10) {
            let line = String(decoding: buffers[stream]![..<newline], as: UTF8.self)
            buffers[stream]!.removeSubrange(...newline)
            if stream == .standardOutput { outcome.standardOutput.append(line) } else { outcome.standardError.append(line) }
            if onLine(stream, line) == .stop { stopped = true; return true }
        }
        return false
    }
}
