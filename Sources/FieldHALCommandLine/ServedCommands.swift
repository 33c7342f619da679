import ArgumentParser
import FieldHAL
import FieldHALAPI
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// The commands a running daemon answers that `fieldhal-front` serves itself: their names,
// help, options and output, once. Each program adds what it does: the whole CLI goes through
// the daemon when one answers and opens the device itself otherwise (`execute`); the front
// only asks the daemon, and hands the command to the whole CLI when none answers (`serve`).
// What is printed comes from here in both, so the output cannot differ.

/// `fieldhal status`.
public struct StatusCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Load the kit and show, per capability, its plugin and device, or why it is unavailable.")
    @OptionGroup public var global: GlobalOptions

    public init() {}

    public struct Report: Encodable {
        public let configuration: String
        public let stateDirectory: String
        public let capabilities: [CapabilityStatus]

        public init(configuration: String, stateDirectory: String, capabilities: [CapabilityStatus]) {
            self.configuration = configuration
            self.stateDirectory = stateDirectory
            self.capabilities = capabilities
        }
    }

    public func emit(_ report: Report) throws {
        try Output.emit(report, json: global.json) {
            var lines = ["configuration: \(report.configuration)", "state: \(report.stateDirectory)"]
            let width = Capability.allCases.map(\.rawValue.count).max()!
            for status in report.capabilities {
                let name = status.capability.rawValue + String(repeating: " ", count: max(0, width - status.capability.rawValue.count))
                switch status.state {
                case .available:
                    lines.append("\(name)  available    \(status.plugin ?? "?")  \(status.device ?? "")")
                case .unavailable:
                    lines.append("\(name)  UNAVAILABLE  \(status.reason ?? "")")
                case .notConfigured:
                    lines.append("\(name)  not loaded   \(status.reason ?? "")")
                }
            }
            return lines.joined(separator: "\n")
        }
    }
}

/// `fieldhal daemon status`.
public struct DaemonStatusCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Is the daemon running, and how does it get alerts? Exit 69 when none listens.",
        discussion: "The socket is [api] socket, else api.sock in the state directory.")
    @OptionGroup public var global: GlobalOptions

    public init() {}

    /// What `daemon status` prints (its `--json` keys).
    public struct Report: Encodable {
        public var version: String
        public var pid: Int32
        public var startedAt: Date
        /// Nil when the caller may not see them (scopes `transrify`, `evidence`).
        public var alerts: String?
        public var signedIn: Bool?
        public var queuedEvidence: Int?

        /// `session` only when the caller may see Transrify's state, `evidence` the
        /// evidence queue; what the user queued by hand, never the silent capture after a duress.
        public init(_ status: APIStatus, session: APISession?, evidence: APIEvidence?) {
            version = status.version
            pid = status.pid
            startedAt = status.startedAt
            alerts = session?.alerts
            signedIn = session?.signedIn
            queuedEvidence = evidence?.items.count
        }
    }

    public func emit(_ report: Report) throws {
        try Output.emit(report, json: global.json) {
            """
            fieldhal \(report.version) running (pid \(report.pid)) since \(report.startedAt.formatted(.iso8601))
            alerts: \(report.alerts ?? "(not granted to this user)")
            signed in: \(report.signedIn.map { $0 ? "yes" : "no" } ?? "(not granted to this user)")
            evidence queued: \(report.queuedEvidence.map(String.init) ?? "(not granted to this user)")
            """
        }
    }

    /// When no daemon answers.
    public static func noDaemon(at path: String) -> FieldHALError {
        FieldHALError(.unavailable, subject: "daemon", detail: "no fieldhal daemon listens at \(path)",
                      advice: "start it: systemctl start fieldhal, or fieldhal run")
    }
}

/// `fieldhal daemon health`: the daemon's verdict, as an updater's health check uses it.
public struct DaemonHealthCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "health",
        abstract: "Is the daemon serving, with every configured device there? Exit 0 if so, 69 if not.",
        discussion: """
        For an updater's health check (greenboot, RAUC, Mender, systemd's ExecCondition; \
        docs/fleet.md): exit 0 when the daemon answers and every device the configuration \
        names is available; 69 (EX_UNAVAILABLE) when a device is not, or no daemon answers. \
        With --allow-degraded a missing device still passes: only a daemon that does not answer fails.
        """)
    @OptionGroup public var global: GlobalOptions
    @Flag(help: "Pass while the daemon answers, even with a configured device unavailable.") public var allowDegraded = false

    public init() {}

    /// Prints `health` and returns the exit status it calls for.
    public func emit(_ health: APIHealth) throws -> Int32 {
        try Output.emit(health, json: global.json) {
            let width = health.devices.map { $0.capability.rawValue.count + 1 + $0.name.count }.max() ?? 0
            return (["fieldhal \(health.version): \(health.verdict.rawValue)"] + health.devices.map { device in
                let name = "\(device.capability.rawValue).\(device.name)"
                return "  " + name + String(repeating: " ", count: max(0, width - name.count)) + (device.available ? "  available" : "  UNAVAILABLE")
            }).joined(separator: "\n")
        }
        return health.verdict == .healthy || allowDegraded ? 0 : 69  // EX_UNAVAILABLE
    }
}

/// `fieldhal gps fix`.
public struct GPSFixCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "fix",
        abstract: "Print the current fix: the first of the wanted quality within the timeout, else a recent cached one.",
        discussion: "With a daemon answering on the configuration's [api] socket (and --timeout up to 60 s), the daemon's receiver answers: it is warm, so a recent fix comes at once.")
    @OptionGroup public var global: GlobalOptions
    @OptionGroup public var target: DeviceOption
    @Option(help: "Seconds to wait for a live fix.") public var timeout: Double = 5
    @Option(help: "Oldest cached fix to fall back to, in seconds (0: never use the cache).") public var maxAge: Double = 300
    @Option(help: "Worst horizontal accuracy accepted, in metres.") public var accuracy: Double?

    public init() {}

    public func request() throws -> FixRequest {
        FixRequest(timeout: try duration(seconds: timeout, option: "--timeout"),
                   maxAge: maxAge > 0 ? try duration(seconds: maxAge, option: "--max-age") : nil,
                   requiredAccuracy: accuracy)
    }

    /// The API takes waits up to 60 s and cache ages up to a day; a command asking for more
    /// opens the receiver itself (gpsd shares it; a daemon's fake receiver is its own).
    public static func fitsTheAPI(_ request: FixRequest) -> Bool {
        request.timeout <= .seconds(60) && (request.maxAge ?? .zero) <= .seconds(86_400)
    }

    /// `GET /v1/location`'s query for `request`.
    public static func query(_ request: FixRequest) -> [(String, String)] {
        var query = [("timeout_ms", "\(FieldHALAPI.milliseconds(request.timeout))"),
                     ("max_age_ms", "\(request.maxAge.map(FieldHALAPI.milliseconds) ?? 0)")]
        if let accuracy = request.requiredAccuracy { query.append(("accuracy_m", "\(accuracy)")) }
        return query
    }

    /// The daemon's no-fix advice names the API's parameters; this command has flags.
    public static func inTheCommandsWords(_ problem: APIProblem) -> APIProblem {
        guard problem.kind == FieldHALError.Kind.noFix.rawValue else { return problem }
        var problem = problem
        problem.advice = noFixAdvice
        return problem
    }

    /// What to do when no fix comes, in the CLI's words.
    public static let noFixAdvice = "check the antenna has a view of the sky, or raise --timeout / --max-age"

    public func emit(_ reading: LocationReading) throws {
        try Output.emit(reading, json: global.json) { Self.describe(reading) }
    }

    public static func describe(_ reading: LocationReading) -> String {
        let fix = reading.fix
        var text = "\(Decimals.format(fix.latitude ?? 0, 6)), \(Decimals.format(fix.longitude ?? 0, 6))"
        if let accuracy = fix.horizontalAccuracy { text += " ±\(Decimals.format(accuracy, 1)) m" }
        if let altitude = fix.altitude { text += ", altitude \(Decimals.format(altitude, 1)) m" }
        text += " (\(fix.mode.rawValue), \(reading.source.rawValue), \(Decimals.format(reading.age, 1)) s old)"
        return text
    }
}

/// A tag as the CLI prints it. `--json` is the API's `Tag` itself, every record whole (its
/// TNF, type, payload and ID), so that a tag read through the daemon and one read by the CLI
/// print the same and a script can decode any record.
public struct TagReport: Encodable {
    public let tag: APITag

    public init(_ tag: APITag) {
        self.tag = tag
    }

    public func encode(to encoder: any Encoder) throws { try tag.encode(to: encoder) }

    public var text: String {
        var lines = ["\(tag.type) tag \(tag.uid)" + (tag.atqa.map { " ATQA \($0)" } ?? "") + (tag.sak.map { " SAK \($0)" } ?? "")]
        if tag.records.isEmpty { lines.append("  no NDEF records") }
        // A record's text is the tag's: one line each, its control characters shown.
        lines += tag.records.map { record in
            let id = record.id.flatMap { Data(base64Encoded: $0) }.map { " (id \(TerminalText.escaped(String(decoding: $0, as: UTF8.self))))" } ?? ""
            return "  \(record.kind): \(TerminalText.escaped(record.value))" + id
        }
        return lines.joined(separator: "\n")
    }
}

/// `fieldhal nfc read`.
public struct NFCReadCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "read",
        abstract: "Wait for a tag and print its UID and NDEF records.",
        discussion: "With a daemon running (fieldhal run), the read goes through its API and takes its turn on the chip.")
    @OptionGroup public var global: GlobalOptions
    @OptionGroup public var target: DeviceOption
    @Option(help: "Seconds to wait for a tag.") public var timeout: Double = 10

    public init() {}

    public func wait() throws -> Duration { try duration(seconds: timeout, option: "--timeout") }

    public func emit(_ tag: APITag) throws {
        let report = TagReport(tag)
        try Output.emit(report, json: global.json) { report.text }
    }
}

/// What `nfc write` and `nfc emulate` put on a tag.
public struct NFCMessageOptions: ParsableArguments, Sendable {
    @Option(help: "A Text record to carry.") public var text: String?
    @Option(help: "A URI record to carry.") public var uri: String?
    @Option(help: "The Text record's language code.") public var language = "en"

    public init() {}

    /// The record as the API takes it; checked here first, so that a mistake reads the
    /// same with or without a daemon.
    public func record() throws -> APIRecordInput {
        switch (text, uri) {
        case (let text?, nil):
            do { _ = try NDEFMessage.text(text, language: language) } catch {
                throw FieldHALError(.invalidArgument, subject: "--language", detail: "\(error)")
            }
            return APIRecordInput(text: text, language: language)
        case (nil, let uri?):
            return APIRecordInput(uri: uri)
        default:
            throw FieldHALError(.invalidArgument, subject: "nfc", detail: "give exactly one of --text and --uri")
        }
    }
}

/// `fieldhal nfc write`.
public struct NFCWriteCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(commandName: "write", abstract: "Wait for a tag and write an NDEF Text or URI record to it.")
    @OptionGroup public var global: GlobalOptions
    @OptionGroup public var target: DeviceOption
    @OptionGroup public var content: NFCMessageOptions
    @Option(help: "Seconds to wait for a tag.") public var timeout: Double = 10

    public init() {}

    public func wait() throws -> Duration { try duration(seconds: timeout, option: "--timeout") }

    public func emit(_ tag: APITag) throws {
        let report = TagReport(tag)
        try Output.emit(report, json: global.json) { "written:\n" + report.text }
    }
}

/// `fieldhal lock status`.
public struct LockStatusCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(commandName: "status", abstract: "Show whether the kit is locked, and any pause on attempts.")
    @OptionGroup public var global: GlobalOptions

    public init() {}

    public func emit(_ status: APILockStatus) throws {
        // With PINs set, the key's line after the lock's: what a copied state directory gives away.
        let key = status.configured ? status.vaultKey.map { "\nvault key: " + $0.offlineAttack } : nil
        try Output.emit(status, json: global.json) { status.message + (key ?? "") }
    }
}

/// `fieldhal haptics play`.
public struct HapticsPlayCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(commandName: "play", abstract: "Play a named pattern: success, warning, error, light, medium or heavy.")
    @OptionGroup public var global: GlobalOptions
    @OptionGroup public var target: DeviceOption
    @Argument(help: "The pattern.") public var pattern: String

    public init() {}

    public func emit(_ report: APIHapticsPlayed) throws {
        try Output.emit(report, json: global.json) { "played \(report.pattern) (\(report.steps) steps, \(report.milliseconds) ms)" }
    }
}

/// `fieldhal sound play`.
public struct SoundPlayCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(commandName: "play", abstract: "Play a sound through the [speaker]: \(SoundClip.names.joined(separator: ", ")).")
    @OptionGroup public var global: GlobalOptions
    @OptionGroup public var target: DeviceOption
    @Argument(help: "The sound.") public var sound = "soft-alert"

    public init() {}

    public func emit(_ report: APISoundPlayed) throws {
        try Output.emit(report, json: global.json) { "played \(report.sound) (\(report.milliseconds) ms)" }
    }
}

/// `fieldhal bio status`.
public struct BioStatusCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(commandName: "status", abstract: "Show whether a sensor is present and which fingers are enrolled.")
    @OptionGroup public var global: GlobalOptions
    @OptionGroup public var target: DeviceOption

    public init() {}

    public func emit(_ availability: BiometricAvailability) throws {
        try Output.emit(availability, json: global.json) {
            guard availability.hasSensor else { return "no sensor" }
            return availability.enrolledFingers.isEmpty ? "sensor present, no fingers enrolled"
                : "sensor present; enrolled: " + availability.enrolledFingers.map(\.rawValue).joined(separator: ", ")
        }
    }
}

/// Fixed-point decimals as `printf`'s `%.Nf` writes them (the C library's own, rounding the
/// exact binary value), without Foundation's `String(format:)`, which would bring
/// CoreFoundation and ICU into the front's start.
public enum Decimals {
    public static func format(_ value: Double, _ places: Int) -> String {
        var buffer = [CChar](repeating: 0, count: 64)
        let written = withVaList([value]) { arguments in
            vsnprintf(&buffer, buffer.count, "%.\(max(0, min(places, 17)))f", arguments)
        }
        guard written >= 0, written < buffer.count else { return String(value) }
        return String(decoding: buffer[0..<Int(written)].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
