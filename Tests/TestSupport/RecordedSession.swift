import FieldHAL
import Foundation

/// A session of commands through a daemon, recorded meanwhile (`fieldhal record`): how the
/// record and replay tests compare a live kit with its replay.
public enum RecordedSession {
    public struct Outcome: Sendable {
        /// Per command: its first two words, exit status, stdout (as `keeping` keeps it) and stderr.
        public var said: [String]
        public var trace: [KitTrace.Entry]
        public var recordStatus: Int32
        public var recordErrors: String
        public var daemonStarted: Bool
    }

    /// Starts a daemon on `config`, follows it into `trace`, runs `commands` through it in
    /// turn, waits until the trace holds one use per command, then stops the daemon, which
    /// ends the recording. `keeping` picks what of a command's stdout is compared (a still's
    /// bytes and time are its own). Every wait is for an event, bounded by `patience`.
    public static func run(config: String, trace: String, state: String, commands: [[String]], patience: Duration = .seconds(30),
                           keeping: @Sendable ([String], String) -> String = { $1 }) async throws -> Outcome {
        let daemon = try DaemonProcess(["--config", config, "--state-dir", state])
        let started = await daemon.waitForLine(containing: "api: serving on", timeout: patience) != nil
        let deadline = ContinuousClock.now + patience
        async let recording = CLI.run(["record", "--config", config, "--output", trace, "--seconds", "\(patience.components.seconds * 2)"])
        // The recording follows once the devices' states are in the trace (its uses are
        // followed from before those are sent).
        while ContinuousClock.now < deadline, !((try? String(contentsOfFile: trace, encoding: .utf8)) ?? "").contains("\"state\"") {
            try await Task.sleep(for: .milliseconds(20))
        }
        var said: [String] = []
        for command in commands {
            let result = try await CLI.run(command + ["--config", config, "--state-dir", state])
            said.append("\(command.prefix(2).joined(separator: " ")) → \(result.status)\n\(keeping(command, result.stdout))\(result.stderr)")
        }
        while ContinuousClock.now < deadline, ((try? KitTrace.read(trace).1.compactMap(\.use).count) ?? 0) < commands.count {
            try await Task.sleep(for: .milliseconds(20))
        }
        _ = await daemon.stop()
        let recorded = try await recording
        return Outcome(said: said, trace: try KitTrace.read(trace).1, recordStatus: recorded.status, recordErrors: recorded.stderr,
                       daemonStarted: started)
    }

    /// A camera command's stdout as far as a replay gives it back: its size.
    public static func sizeOnly(_ command: [String], _ stdout: String) -> String {
        command.first == "camera" ? stdout.split(separator: "\n").filter { $0.contains("width") || $0.contains("height") }.joined(separator: "\n") : stdout
    }
}
