import Foundation
import TestSupport
import Testing

/// The two ways a CLI command can run (issue 20): on its own, opening the kit's devices
/// itself, or beside a `fieldhal run` daemon for the same kit, whose API it then goes
/// through. The CLI suites run their tests both ways and expect the same: the same output,
/// the same exit status, the same files.
enum CLIWay: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case alone
    case throughDaemon

    var testDescription: String { rawValue }
}

/// Runs a CLI test's body `way`. Through the daemon, every command the body runs is first
/// given a daemon for its kit (its configuration file's content, its state directory and
/// environment): started when the first command needs it, restarted when the
/// configuration changes, stopped at the end, where it must exit cleanly.
func eachWay(_ way: CLIWay, _ body: () async throws -> Void) async throws {
    guard way == .throughDaemon else { return try await body() }
    let daemons = KitDaemons()
    do {
        try await CLI.$beforeEachCommand.withValue({ arguments, environment in
            try await daemons.ensure(arguments, environment)
        }) {
            try await body()
        }
    } catch {
        _ = await daemons.stopAll()
        throw error
    }
    for (state, stopped) in await daemons.stopAll() {
        #expect(stopped.status == 0, "the daemon for \(state) exited \(stopped.status): \(stopped.output.suffix(20).joined(separator: "\n"))")
    }
    #expect(await daemons.served > 0, "no command of this test was run beside a daemon")
}

/// The daemons of one test run through the daemon, one per state directory.
actor KitDaemons {
    private var running: [String: (key: String, daemon: DaemonProcess)] = [:]
    private var stopped: [(String, (status: Int32, output: [String]))] = []
    /// How many daemons served a command's kit.
    private(set) var served = 0

    /// Commands that never use a daemon, or are the daemon.
    private static let daemonless: Set<String> = ["run", "demo", "plugins", "help", "--help", "-h", "--version"]

    func ensure(_ arguments: [String], _ environment: [String: String]) async throws -> [String: String] {
        guard let command = arguments.first, !Self.daemonless.contains(command), !arguments.contains("--help") else { return environment }
        var environment = environment
        let state: String
        if let given = Self.value(of: "--state-dir", in: arguments) ?? environment["FIELDHAL_STATE_DIR"] {
            state = given
        } else {
            // The command would get a fresh directory of its own: give it one the daemon shares.
            state = CLI.freshStateDirectory()
            environment["FIELDHAL_STATE_DIR"] = state
        }
        let config = Self.value(of: "--config", in: arguments) ?? environment["FIELDHAL_CONFIG"]
        let text = config.flatMap { try? String(contentsOfFile: $0, encoding: .utf8) } ?? "(built-in fake kit)"
        let key = [config ?? "", text, environment.sorted { $0.key < $1.key }.description].joined(separator: "\u{0}")
        if let current = running[state], current.key == key, current.daemon.process.isRunning { return environment }
        if let old = running.removeValue(forKey: state) {
            stopped.append((state, (await old.daemon.stop().status, old.daemon.output)))
        }
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let daemon = try DaemonProcess((config.map { ["--config", $0] } ?? []) + ["--state-dir", state], environment: environment)
        running[state] = (key, daemon)
        if await daemon.waitForServing() {
            served += 1
        } else if daemon.process.isRunning {
            throw DaemonDidNotStart(arguments: arguments, output: daemon.output)
        } else {
            // A configuration the daemon refuses (the test's own bad input): the command
            // meets it alone, as it would on a kit whose daemon could not start.
            running[state] = nil
        }
        return environment
    }

    func stopAll() async -> [(String, (status: Int32, output: [String]))] {
        for (state, entry) in running {
            stopped.append((state, (await entry.daemon.stop().status, entry.daemon.output)))
        }
        running = [:]
        return stopped
    }

    private static func value(of option: String, in arguments: [String]) -> String? {
        guard let index = arguments.firstIndex(of: option), index + 1 < arguments.count else { return nil }
        return arguments[index + 1]
    }
}

extension DaemonProcess {
    /// Whether the daemon serves its API within 20 s; false at once when it exits first.
    func waitForServing() async -> Bool {
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            if await waitForLine(containing: "api: serving on", timeout: .milliseconds(100)) != nil { return true }
            if !process.isRunning { return false }
        }
        return false
    }
}

struct DaemonDidNotStart: Error, CustomStringConvertible {
    let arguments: [String]
    let output: [String]
    var description: String { "no daemon served the kit of `fieldhal \(arguments.joined(separator: " "))`:\n\(output.joined(separator: "\n"))" }
}
