import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A PN532 on a pseudo-terminal (Peers/pn532-emulator.py) that libnfc's unchanged
/// `pn532_uart` driver talks to: `environment` points libnfc at it.
public final class PN532Emulator: @unchecked Sendable {
    public let ptyPath: String
    private let process: Process

    public static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Peers/pn532-emulator.py").path

    /// Starts the emulator off the cooperative pool and waits for its pty's path.
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
        var line: [UInt8] = []
        let handle = output.fileHandleForReading
        while line.last != 10 {
            let byte = handle.readData(ofLength: 1)
            guard let first = byte.first else { throw GPSFakeError("pn532-emulator.py exited before printing its pty") }
            line.append(first)
        }
        ptyPath = String(decoding: line.dropLast(), as: UTF8.self)
    }

    deinit { stop() }

    /// What libnfc needs in its environment to use this emulator and nothing else.
    public var environment: [String: String] {
        ["LIBNFC_DEVICE": "pn532_uart:\(ptyPath)", "LIBNFC_AUTO_SCAN": "false", "LIBNFC_INTRUSIVE_SCAN": "false"]
    }

    public func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
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
