import ArgumentParser
import FieldHAL
import FieldHALAPI
import FieldHALSystem
import Foundation

// What both command-line programs share: `fieldhal` (the whole CLI, every backend linked in)
// and `fieldhal-front` (the small program installed as `fieldhal`, which answers the
// commands a running daemon serves and hands every other command to the whole CLI). The
// options, the choice of configuration and socket, the output and the exit codes live here
// once, so that the two cannot drift apart.

/// Options every command takes.
public struct GlobalOptions: ParsableArguments, Sendable {
    @Option(name: .long, help: ArgumentHelp("Configuration file (default /etc/fieldhal/fieldhal.toml; \"fake\": the built-in fake kit).", valueName: "file"))
    public var config: String?

    @Option(name: .long, help: ArgumentHelp("State directory (default /var/lib/fieldhal).", valueName: "dir"))
    public var stateDir: String?

    @Flag(name: .long, help: "Print the result as JSON.")
    public var json = false

    public init() {}
}

/// `--device NAME`: which of a capability's devices a command uses (`[camera.rear]` is
/// `rear`); without it, the capability's default device.
public struct DeviceOption: ParsableArguments, Sendable {
    @Option(name: .long, help: ArgumentHelp("Which device of its kind, by its name in the configuration (`fieldhal devices` lists them; default: the first).",
                                            valueName: "name"))
    public var device: String?

    public init() {}

    public func validate() throws {
        if let device, let problem = KitConfiguration.problem(withDeviceName: device) {
            throw ValidationError("--device: \(problem)")
        }
    }

    /// The API's `?device=` for it.
    public var query: [(String, String)] { device.map { [("device", $0)] } ?? [] }
}

/// `--device NAME …` or `--all`: the devices a watch follows at once (`gps watch`,
/// `nfc watch`), for a lab bench with several of a kind.
public struct WatchedDevices: ParsableArguments, Sendable {
    @Option(name: .customLong("device"), help: ArgumentHelp("A device to follow, by its name in the configuration; repeat it for several (default: the first).",
                                                             valueName: "name"))
    public var names: [String] = []
    @Flag(name: .customLong("all"), help: "Follow every configured device of its kind.") public var all = false

    public init() {}

    public func validate() throws {
        if all, !names.isEmpty { throw ValidationError("give --device or --all, not both") }
        for name in names { if let problem = KitConfiguration.problem(withDeviceName: name) { throw ValidationError("--device: \(problem)") } }
    }

    /// The names to follow given the configured ones, in the file's order (empty: the default).
    public func chosen(from configured: [String]) -> [String] { all ? configured : names }

    /// Whether lines must say which device they come from.
    public func several(from configured: [String]) -> Bool { chosen(from: configured).count > 1 }
}

/// The embedded fake kit, used when asked for by name (`--config fake`) and by `fieldhal demo`.
public enum BuiltinConfiguration {
    public static let label = "built-in fake kit"
    public static let text = """
    [kit]
    name = "fake kit"

    [gps]
    plugin = "fake"
    interval_ms = 1000
    track = [
      { lat = 52.520008, lon = 13.404954, alt = 34.0, acc = 4.5, vacc = 6.0, speed = 1.2, course = 90.0, sats = 9 },
      { lat = 52.520020, lon = 13.405100, alt = 34.2, acc = 4.0, vacc = 6.0, speed = 1.3, course = 88.0, sats = 9 },
    ]

    [nfc]
    plugin = "fake"
    tags = [ { type = "ntag213", uid = "04:A1:B2:C3:D4:E5:F6", text = "trf:duress:demo-alert-1" } ]

    [nfc_emulator]
    plugin = "fake"

    [camera]
    plugin = "fake"

    [microphone]
    plugin = "fake"
    realtime = false

    [speaker]
    plugin = "fake"
    realtime = false

    [haptics]
    plugin = "fake"
    realtime = false

    [biometrics]
    plugin = "fake"
    outcomes = ["match"]
    """
}

extension BuiltinConfiguration {
    /// The same kit with the camera and the microphone in real time (a recording takes as long
    /// as it lasts): for measurements in which time is the point (`bench seizure`).
    public static let realTimeText = text
        .replacingOccurrences(of: "[camera]\nplugin = \"fake\"\n", with: "[camera]\nplugin = \"fake\"\nrealtime = true\n")
        .replacingOccurrences(of: "[microphone]\nplugin = \"fake\"\nrealtime = false\n", with: "[microphone]\nplugin = \"fake\"\nrealtime = true\n")
}

extension BuiltinConfiguration {
    public static let benchLabel = "built-in fake bench"
    /// Two devices of every kind on the fake plugin (`--config fake-bench`): a body-worn
    /// kit's two cameras, a lab bench's readers and receivers side by side, on a laptop.
    /// `examples/fake-bench.toml` is the same text, to copy and edit (a test keeps them one).
    public static let benchText = """
    # A kit with two devices of every kind, all on the fake plugin: a body-worn kit's front and
    # rear cameras, a lab bench's readers and receivers side by side, on a laptop.
    #
    #   fieldhal devices --config examples/fake-bench.toml
    #   fieldhal gps watch --all --config examples/fake-bench.toml
    #   fieldhal nfc watch --all --config examples/fake-bench.toml
    #   fieldhal camera snap --device rear -o rear.jpg --config examples/fake-bench.toml
    #
    # A device is a table under its capability, named by the header (`[camera.front]`); the
    # first enabled one of a kind is its default, used when a command or request names none.
    # `roles` say what the flows use it for (README: "Several devices of a kind"). A fake's
    # `device` is what it calls itself (its serial in `fieldhal devices`): the second of each
    # kind is told apart from the first as real ones are.

    [kit]
    name = "fake bench"

    [gps.left]
    plugin = "fake"
    interval_ms = 1000
    track = [{ lat = 52.516275, lon = 13.377704, alt = 34.0, acc = 4.5, sats = 9 }]

    [gps.right]
    plugin = "fake"
    device = "fake-gps1"
    interval_ms = 1000
    track = [{ lat = 52.516310, lon = 13.378120, alt = 34.2, acc = 3.1, sats = 11 }]

    [nfc.bench1]
    plugin = "fake"
    tags = [{ type = "ntag213", uid = "04:B1:00:00:00:00:01", text = "bench 1" }]

    [nfc.bench2]
    plugin = "fake"
    device = "fake-nfc1"
    tags = [{ type = "type4", uid = "08:B2:00:02", uri = "https://transrify.example/bench2", arrive_ms = 2000 }]

    [nfc_emulator.bench1]
    plugin = "fake"
    reader = "reads"
    read_after_ms = 300

    [nfc_emulator.bench2]
    plugin = "fake"
    device = "fake-nfc-emulator1"
    reader = "reads"
    read_after_ms = 300
    roles = []              # only bench1 offers the duress tag: two chips offering it would be seen twice

    [camera.front]
    plugin = "fake"

    [camera.rear]
    plugin = "fake"
    device = "fake-camera1"

    [microphone.collar]
    plugin = "fake"
    tone_hz = 440
    realtime = false

    [microphone.room]
    plugin = "fake"
    device = "fake-microphone1"
    tone_hz = 880
    realtime = false

    [speaker.main]
    plugin = "fake"
    realtime = false

    [speaker.earpiece]
    plugin = "fake"
    device = "fake-speaker1"
    realtime = false

    [haptics.wrist]
    plugin = "fake"
    realtime = false

    [haptics.vest]
    plugin = "fake"
    device = "fake-haptics1"
    realtime = false

    [biometrics.door]
    plugin = "fake"
    enrolled = ["left-thumb"]
    outcomes = ["no-finger"]   # nobody touches this one

    [biometrics.handset]
    plugin = "fake"
    device = "fake-biometrics1"
    enrolled = ["right-index-finger"]
    outcomes = ["match"]
    """
}

/// Which configuration a command runs with, and where the daemon's socket is for it.
public enum CommandLineConfiguration {
    /// What `--config` or `FIELDHAL_CONFIG` names to ask for the built-in fake kit.
    public static let fakeKitName = "fake"
    /// … and for the built-in fake bench (two devices of every kind).
    public static let fakeBenchName = "fake-bench"

    /// Where a command's configuration comes from.
    public enum Choice: Equatable, Sendable {
        case file(String)
        /// The built-in fake kit, asked for by name (`--config fake`, `FIELDHAL_CONFIG=fake`).
        case fakeKit
        /// The built-in fake bench, two devices of every kind (`--config fake-bench`).
        case fakeBench
        /// Nothing given and nothing installed.
        case none
    }

    /// `--config`, else `$FIELDHAL_CONFIG`, else the installed file if there is one. The fake
    /// kit (or bench) only when asked for by name (a file called `fake` is `./fake`): its fingerprint
    /// sensor always matches, so a real kit whose file went missing must not fall back to it.
    public static func choice(flag: String?, environment: [String: String]) -> Choice {
        if let named = flag ?? environment["FIELDHAL_CONFIG"].flatMap({ $0.isEmpty ? nil : $0 }) {
            switch named {
            case fakeKitName: return .fakeKit
            case fakeBenchName: return .fakeBench
            default: return .file(named)
            }
        }
        return FileManager.default.fileExists(atPath: KitConfiguration.defaultPath) ? .file(KitConfiguration.defaultPath) : .none
    }

    /// Why a command cannot run without a configuration (said of the installed file's path),
    /// and what to do.
    public static let missing = """
        does not exist, and neither --config nor FIELDHAL_CONFIG names another — write one \
        (examples/ has one per backend), or pass --config fake for the built-in fake kit \
        (simulated devices only: its fingerprint sensor always matches)
        """

    /// `[api] socket`, else `api.sock` in the state directory.
    public static func apiSocket(settings: [String: PluginParameters], stateDirectory: StateDirectory) -> String {
        settings["api"]?.string("socket") ?? stateDirectory.path + "/api.sock"
    }
}

/// Prints results as text or JSON.
public enum Output {
    /// One line at once, unbuffered, for a command that streams while something happens; a
    /// reader that went away (`| head`: EPIPE) ends the command quietly, as `yes | head` does.
    public static func streamLine(_ line: String) {
        do {
            try FileHandle.standardOutput.write(contentsOf: Data((TerminalText.escaped(line, keepingNewlines: true) + "\n").utf8))
        } catch {
            exit(0)
        }
    }

    /// `streaming`: one of many values a command prints as they happen, written at once.
    public static func emit<T: Encodable>(_ value: T, json: Bool, streaming: Bool = false, text: () -> String) throws {
        let line: String
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            encoder.dateEncodingStrategy = .iso8601
            line = String(decoding: try encoder.encode(value), as: UTF8.self)
        } else {
            // Outside text reaches a terminal with its control characters shown, not sent.
            line = TerminalText.escaped(text(), keepingNewlines: true)
        }
        if streaming { streamLine(line) } else { print(line) }
    }

    /// A failure as the CLI reports it: one line on standard error.
    public static func failure(_ description: String) {
        FileHandle.standardError.write(Data("fieldhal: \(TerminalText.escaped(description))\n".utf8))
    }
}

/// Exit codes (sysexits.h) for FieldHAL's errors and the daemon's problems.
public enum ExitStatus {
    public static func code(_ kind: FieldHALError.Kind) -> Int32 {
        switch kind {
        case .notConfigured, .unavailable, .deviceNotFound, .permissionDenied, .busy, .disconnected: 69
        case .timeout, .noFix: 75
        case .invalidArgument, .noSuchDevice: 64  // EX_USAGE: the command line named it
        // EX_DATAERR: a payload that is wrong, whether a tag's bytes read in process or a
        // plugin's answer that breaks the protocol (the same tag through a plugin).
        case .malformedData, .stale, .protocolError: 65
        default: 1
        }
    }

    /// The daemon's answer to a command it served: the same codes as the error itself.
    public static func code(_ problem: APIProblem) -> Int32 {
        switch problem.kind {
        case APIProblem.forbidden, APIProblem.invalidCredentials: 77
        case APIProblem.rateLimited, APIProblem.network: 75
        case APIProblem.configuration: 78
        case APIProblem.suspended: 69
        case APIProblem.failed: 1
        default: FieldHALError.Kind(rawValue: problem.kind).map(code) ?? 69
        }
    }
}

/// A wait given in seconds on the command line, checked the same way by every command.
public func duration(seconds: Double, option: String) throws -> Duration {
    guard seconds.isFinite, seconds > 0, seconds <= 86_400 else {
        throw FieldHALError(.invalidArgument, subject: option, detail: "must be between 0 and 86400 seconds, got \(seconds)")
    }
    return .milliseconds(Int((seconds * 1000).rounded()))
}
