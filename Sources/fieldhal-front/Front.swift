import ArgumentParser
import FieldHAL
import FieldHALAPI
import FieldHALCommandLine
import FieldHALSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The commands the front serves, under the names the whole CLI gives them. Groups here
/// only route: help, usage and errors are the whole CLI's.
struct Front: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fieldhal",
        subcommands: [StatusCommand.self, Daemon.self, GPS.self, NFC.self, Lock.self, Haptics.self, Sound.self, Bio.self])

    struct Daemon: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "daemon", subcommands: [DaemonStatusCommand.self, DaemonHealthCommand.self],
                                                        defaultSubcommand: DaemonStatusCommand.self)
    }
    struct GPS: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "gps", subcommands: [GPSFixCommand.self])
    }
    struct NFC: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "nfc", subcommands: [NFCReadCommand.self, NFCWriteCommand.self])
    }
    struct Lock: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "lock", subcommands: [LockStatusCommand.self])
    }
    struct Haptics: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "haptics", subcommands: [HapticsPlayCommand.self])
    }
    struct Sound: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "sound", subcommands: [SoundPlayCommand.self])
    }
    struct Bio: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "bio", subcommands: [BioStatusCommand.self])
    }

    /// The first words of the commands above.
    static let servedCommandNames: Set<String> = Set(configuration.subcommands.map { $0.configuration.commandName ?? "" })

    /// The daemon for these options' configuration, or nil when the front cannot tell as
    /// surely as the whole CLI would (a configuration it cannot read): then the CLI decides.
    static func daemon(_ options: GlobalOptions) -> ServedContext? {
        let environment = ProcessInfo.processInfo.environment
        let file: String?
        var builtIn = BuiltinConfiguration.label
        switch CommandLineConfiguration.choice(flag: options.config, environment: environment) {
        case .file(let path): file = path
        case .fakeKit: file = nil
        case .fakeBench: file = nil; builtIn = BuiltinConfiguration.benchLabel
        case .none: return nil  // the whole CLI says what to do
        }
        let settings: [String: PluginParameters]
        if let file {
            // Only the tables the front needs; the whole CLI checks the rest when it runs.
            guard let text = try? ConfigFile.read(file),
                  let tables = try? KitConfiguration.settingTables(text, file: file) else { return nil }
            settings = tables
        } else {
            settings = [:]  // the built-in fake kit or bench: no [api], no state_dir
        }
        let stateDirectory = StateDirectory.resolve(flag: options.stateDir, environment: environment,
                                                    configured: settings["kit"]?.string("state_dir"))
        return ServedContext(configuration: file ?? builtIn, stateDirectory: stateDirectory,
                             socket: DaemonSocket(path: CommandLineConfiguration.apiSocket(settings: settings, stateDirectory: stateDirectory)))
    }
}

/// What a served command knows of its setting.
struct ServedContext {
    let configuration: String
    let stateDirectory: StateDirectory
    let socket: DaemonSocket
}

/// A command the front answers through the daemon. `serve` returns false when no daemon
/// answered: the whole CLI then does the work itself.
protocol ServedCommand: ParsableCommand {
    var global: GlobalOptions { get }
    func serve(_ context: ServedContext) throws -> Bool
}

extension StatusCommand: ServedCommand {
    func serve(_ context: ServedContext) throws -> Bool {
        guard let served = try context.socket.call("GET", "capabilities", as: APICapabilities.self) else { return false }
        try emit(Report(configuration: context.configuration, stateDirectory: context.stateDirectory.path, capabilities: served.capabilities))
        return true
    }
}

extension DaemonStatusCommand: ServedCommand {
    func serve(_ context: ServedContext) throws -> Bool {
        let socket = context.socket
        guard let status = try socket.call("GET", "status", as: APIStatus.self) else { return false }
        let session = status.caller.scopes.contains(.transrify) ? try socket.call("GET", "session", as: APISession.self) : nil
        let evidence = status.caller.scopes.contains(.evidence) ? try socket.call("GET", "evidence", as: APIEvidence.self) : nil
        try emit(Report(status, session: session, evidence: evidence))
        return true
    }
}

extension DaemonHealthCommand: ServedCommand {
    func serve(_ context: ServedContext) throws -> Bool {
        guard let health = try context.socket.call("GET", "health", as: APIHealth.self) else { return false }
        let status = try emit(health)
        if status != 0 { Glibc.exit(status) }  // the verdict, printed: not a failure for the whole CLI to retry
        return true
    }
}

extension GPSFixCommand: ServedCommand {
    func serve(_ context: ServedContext) throws -> Bool {
        let request = try request()
        guard Self.fitsTheAPI(request) else { return false }
        do {
            guard let reading = try context.socket.call("GET", "location", query: Self.query(request) + target.query, waiting: request.timeout,
                                                        as: LocationReading.self) else { return false }
            try emit(reading)
            return true
        } catch let problem as APIProblem {
            throw Self.inTheCommandsWords(problem)
        }
    }
}

extension NFCReadCommand: ServedCommand {
    func serve(_ context: ServedContext) throws -> Bool {
        let wait = try wait()
        guard let tag = try context.socket.call("POST", "nfc/read", query: target.query, body: APINFCRead(timeoutMs: Int(FieldHALAPI.milliseconds(wait))),
                                                waiting: wait, as: APITag.self) else { return false }
        try emit(tag)
        return true
    }
}

extension NFCWriteCommand: ServedCommand {
    func serve(_ context: ServedContext) throws -> Bool {
        let record = try content.record()
        let wait = try wait()
        guard let tag = try context.socket.call("POST", "nfc/write", query: target.query, body: APINFCMessage(records: [record], timeoutMs: Int(FieldHALAPI.milliseconds(wait))),
                                                waiting: wait, as: APITag.self) else { return false }
        try emit(tag)
        return true
    }
}

extension LockStatusCommand: ServedCommand {
    func serve(_ context: ServedContext) throws -> Bool {
        guard let status = try context.socket.call("GET", "lock", as: APILockStatus.self) else { return false }
        try emit(status)
        return true
    }
}

extension HapticsPlayCommand: ServedCommand {
    func serve(_ context: ServedContext) throws -> Bool {
        _ = try APIHapticsPlay(pattern: pattern).named()
        guard let played = try context.socket.call("POST", "haptics/play", query: target.query, body: APIHapticsPlay(pattern: pattern), waiting: .seconds(30),
                                                   as: APIHapticsPlayed.self) else { return false }
        try emit(played)
        return true
    }
}

extension SoundPlayCommand: ServedCommand {
    func serve(_ context: ServedContext) throws -> Bool {
        _ = try APISoundPlay(sound: sound).clip()
        guard let played = try context.socket.call("POST", "speaker/play", query: target.query, body: APISoundPlay(sound: sound), waiting: .seconds(30),
                                                   as: APISoundPlayed.self) else { return false }
        try emit(played)
        return true
    }
}

extension BioStatusCommand: ServedCommand {
    func serve(_ context: ServedContext) throws -> Bool {
        guard let availability = try context.socket.call("GET", "biometrics", query: target.query, as: BiometricAvailability.self) else { return false }
        try emit(availability)
        return true
    }
}

/// The whole CLI: where it is, and the hand-over to it.
enum WholeCLI {
    /// Installed: `<prefix>/libexec/fieldhal/fieldhal` beside `<prefix>/bin/fieldhal` (this
    /// program). In a build directory: `fieldhal` beside `fieldhal-front`.
    static func location() -> String? {
        // readlink(2), not FileManager: this runs before every hand-over.
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard length > 0 else { return nil }
        let me = String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let directory = String(me[..<(me.lastIndex(of: "/") ?? me.startIndex)])
        let prefix = String(directory[..<(directory.lastIndex(of: "/") ?? directory.startIndex)])
        let candidates = [prefix + "/libexec/fieldhal/fieldhal", directory + "/fieldhal"]
        var own = stat()
        guard stat(me, &own) == 0 else { return nil }
        return candidates.first { path in
            var info = stat()
            // Never this program itself (installed as bin/fieldhal, it is its own neighbour).
            return stat(path, &info) == 0 && access(path, X_OK) == 0 && !(info.st_dev == own.st_dev && info.st_ino == own.st_ino)
        }
    }

    /// Replaces this process with the whole CLI; returns only to exit with an error.
    static func exec(_ arguments: [String]) -> Never {
        guard let path = location() else {
            Output.failure("the whole fieldhal CLI is not installed beside this program (looked for libexec/fieldhal/fieldhal and fieldhal) — reinstall FieldHAL")
            exit(69)
        }
        let argv = [CommandLine.arguments.first ?? "fieldhal"] + arguments
        var pointers = argv.map { strdup($0) }
        pointers.append(nil)
        execv(path, pointers)
        Output.failure("\(path): cannot run it (\(SystemError.describe()))")
        exit(126)
    }
}
