import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A PN532 on a pseudo-terminal (Peers/pn532-emulator.py) that libnfc's unchanged
/// `pn532_uart` driver talks to. One chip with a simulated tag or reader in its field, or
/// (`bridge`) two chips sharing one field, so that two libnfc stacks talk to each other.
public final class PN532Emulator: @unchecked Sendable {
    /// The pty (or its `--link` symlink); with `bridge`, the two chips' ptys.
    public let ptyPaths: [String]
    public var ptyPath: String { ptyPaths[0] }
    private let process: Process
    private let eventLog = EventLog()

    public static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Peers/pn532-emulator.py").path

    /// One JSON line the emulator printed: `selected`, `activated`, `read`, `released`, …
    public struct Event: Sendable {
        public var name: String
        public var fields: [String: String]
        /// CLOCK_MONOTONIC nanoseconds when the emulator emitted it.
        public var monotonicNanoseconds: UInt64
    }

    /// Starts the emulator off the cooperative pool and waits for its pty paths.
    public static func start(_ arguments: [String] = []) async throws -> PN532Emulator {
        try await offPool { try PN532Emulator(arguments) }
    }

    init(_ arguments: [String]) throws {
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [Self.script] + arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let lines = LineReader(output.fileHandleForReading)
        let count = arguments.contains("--bridge") ? 2 : 1
        var paths: [String] = []
        while paths.count < count {
            guard let line = lines.next() else { throw GPSFakeError("pn532-emulator.py exited before printing its pty") }
            paths.append(line)
        }
        ptyPaths = paths
        // The emulator blocks if nobody reads its events: drain them on a thread of their own.
        let log = eventLog
        let thread = Thread {
            while let line = lines.next() { log.append(line) }
        }
        thread.start()
    }

    deinit { stop() }

    /// A libnfc connection string for chip `index`.
    public func connstring(_ index: Int = 0) -> String { "pn532_uart:\(ptyPaths[index])" }

    /// What libnfc needs in its environment to use this emulator and nothing else.
    public var environment: [String: String] {
        ["LIBNFC_DEVICE": connstring(), "LIBNFC_AUTO_SCAN": "false", "LIBNFC_INTRUSIVE_SCAN": "false"]
    }

    public func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    public var events: [Event] { eventLog.events }

    /// Waits (off the pool) for the first event named `name`; nil after `timeout`.
    public func waitForEvent(_ name: String, timeout: Duration = .seconds(10)) async -> Event? {
        let log = eventLog
        return try? await offPool {
            let deadline = ContinuousClock.now + timeout
            while ContinuousClock.now < deadline {
                if let event = log.events.first(where: { $0.name == name }) { return event }
                usleep(5_000)
            }
            return nil
        }
    }

    /// Runs one of libnfc's own tools against the emulator; returns its output.
    public func runTool(_ tool: String, _ arguments: [String], in directory: String = NSTemporaryDirectory()) async throws -> (status: Int32, output: String) {
        let environment = self.environment
        return try await offPool {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: tool)
            process.arguments = arguments
            process.currentDirectoryURL = URL(fileURLWithPath: directory)
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
            let output = Pipe()
            process.standardOutput = output
            process.standardError = output
            try process.run()
            let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            return (process.terminationStatus, text)
        }
    }
}

/// The emulator's events, appended by the draining thread and read by tests.
private final class EventLog: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [PN532Emulator.Event] = []

    var events: [PN532Emulator.Event] { lock.withLock { stored } }

    func append(_ line: String) {
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
              let name = object["event"] as? String else { return }
        var fields: [String: String] = [:]
        for (key, value) in object where key != "event" && key != "t" { fields[key] = "\(value)" }
        let time = (object["t"] as? NSNumber)?.uint64Value ?? 0
        lock.withLock { stored.append(.init(name: name, fields: fields, monotonicNanoseconds: time)) }
    }
}

/// Reads a pipe line by line, a byte at a time (the emulator's output is small).
final class LineReader: @unchecked Sendable {
    private let handle: FileHandle
    init(_ handle: FileHandle) { self.handle = handle }

    func next() -> String? {
        var line: [UInt8] = []
        while true {
            let byte = handle.readData(ofLength: 1)
            guard let first = byte.first else { return line.isEmpty ? nil : String(decoding: line, as: UTF8.self) }
            if first == 10 { return String(decoding: line, as: UTF8.self) }
            line.append(first)
        }
    }
}
