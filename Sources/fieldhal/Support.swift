import ArgumentParser
import FieldHAL
import FieldHALAPI
import FieldHALServer
import FieldHALFlows
import Transrify
import FieldHALPlugins
import FieldHALVault
import Foundation

/// Options every command takes.
struct GlobalOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Configuration file.", valueName: "file"))
    var config: String?

    @Option(name: .long, help: ArgumentHelp("State directory (default /var/lib/fieldhal).", valueName: "dir"))
    var stateDir: String?

    @Flag(name: .long, help: "Print the result as JSON.")
    var json = false
}

/// The embedded fake kit, used when no configuration file is given or installed.
enum BuiltinConfiguration {
    static let label = "built-in fake kit"
    static let text = """
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

/// The configuration, state directory and kit a command runs with.
struct Environment {
    let configuration: KitConfiguration
    let stateDirectory: StateDirectory
    let registry: PluginRegistry

    init(_ options: GlobalOptions) throws {
        let environment = ProcessInfo.processInfo.environment
        registry = BuiltinPlugins.registry
        let path = options.config ?? environment["FIELDHAL_CONFIG"].flatMap { $0.isEmpty ? nil : $0 }
        if let path {
            configuration = try KitConfiguration.load(path: path, registry: registry, settings: Self.settings)
        } else if FileManager.default.fileExists(atPath: KitConfiguration.defaultPath) {
            configuration = try KitConfiguration.load(path: KitConfiguration.defaultPath, registry: registry, settings: Self.settings)
        } else {
            configuration = try KitConfiguration.parse(BuiltinConfiguration.text, file: BuiltinConfiguration.label,
                                                       directory: FileManager.default.currentDirectoryPath, registry: registry,
                                                       settings: Self.settings)
        }
        stateDirectory = StateDirectory.resolve(flag: options.stateDir, environment: environment,
                                                configured: configuration.stateDirectory)
    }

    /// The sections besides the capabilities': the core's `[kit]` and the flows' own.
    static let settings: [String: [ParameterSpec]] = KitConfiguration.coreSettings.merging(
        ["location_sharing": LocationSharingSettings.specs, "transrify": TransrifySettings.specs, "daemon": DaemonSettings.specs,
         "api": APIAuthorisation.specs]) { $1 }

    /// Opens the vault in the state directory.
    func vault() throws -> Vault { try Vault(stateDirectory: stateDirectory) }

    /// Loads the kit, opening only `capabilities` when given.
    func loadKit(only capabilities: Set<Capability>? = nil) async -> Kit {
        await Kit.load(configuration, registry: registry,
                       context: PluginContext(configDirectory: configuration.directory, stateDirectory: stateDirectory.path),
                       only: capabilities)
    }

    /// Loads one capability, runs `body` with the kit, and closes the kit.
    func withKit<T>(for capability: Capability, _ body: (Kit) async throws -> T) async throws -> T {
        let kit = await loadKit(only: [capability])
        let result = await Result(catching: { try await body(kit) })
        await kit.close()
        return try result.get()
    }
}

/// Prints results as text or JSON, and failures as one line on stderr.
enum Output {
    /// One line at once, unbuffered, for a command that streams while something happens; a
    /// reader that went away (`| head`: EPIPE) ends the command quietly, as `yes | head` does.
    static func streamLine(_ line: String) {
        do {
            try FileHandle.standardOutput.write(contentsOf: Data((line + "\n").utf8))
        } catch {
            exit(0)
        }
    }

    /// `streaming`: one of many values a command prints as they happen, written at once.
    static func emit<T: Encodable>(_ value: T, json: Bool, streaming: Bool = false, text: () -> String) throws {
        let line: String
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            encoder.dateEncodingStrategy = .iso8601
            line = String(decoding: try encoder.encode(value), as: UTF8.self)
        } else {
            line = text()
        }
        if streaming { streamLine(line) } else { print(line) }
    }
}

extension Result where Failure == any Error {
    /// Captures the outcome of an async throwing body.
    init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}

/// Turns FieldHAL's errors into a one-line message and an exit code (sysexits.h).
struct CommandFailure: Error, CustomStringConvertible {
    let description: String
    let exitCode: Int32

    init(_ error: any Error) {
        var description = "\(error)"
        let exitCode: Int32
        switch error {
        case is ConfigError:
            exitCode = 78
        case let failure as SignInFailure:
            // The seed's words only: the detail could tell a bystander more than the screen may.
            description = failure.message
            exitCode = switch failure.kind {
            case .invalidInput: 64
            case .invalidCredentials: 77
            case .api(.network), .api(.rateLimited): 75
            case .api(.missingTenantKey), .api(.http(_, "INVALID_TENANT_KEY")): 78
            case .api(.http(_, "TENANT_SUSPENDED")): 69
            default: 1
            }
        case let error as TransrifyError:
            description = error.description
            exitCode = switch error.kind {
            case .network, .rateLimited: 75
            case .missingTenantKey: 78
            default: 1
            }
        case let error as FieldHALError:
            exitCode = Self.exitCode(error.kind)
        case let problem as APIProblem:
            // The daemon's answer to a command it served: the same codes as the error itself.
            exitCode = switch problem.kind {
            case APIProblem.forbidden, APIProblem.invalidCredentials: 77
            case APIProblem.rateLimited, APIProblem.network: 75
            case APIProblem.configuration: 78
            case APIProblem.suspended: 69
            case APIProblem.failed: 1
            default: FieldHALError.Kind(rawValue: problem.kind).map(Self.exitCode) ?? 69
            }
        default:
            exitCode = 1
        }
        self.description = description
        self.exitCode = exitCode
    }

    static func exitCode(_ kind: FieldHALError.Kind) -> Int32 {
        switch kind {
        case .notConfigured, .unavailable, .deviceNotFound, .permissionDenied, .busy, .disconnected: 69
        case .timeout, .noFix: 75
        case .invalidArgument: 64
        case .malformedData, .stale: 65
        default: 1
        }
    }
}

/// A command that is not a `FieldHALSubcommand` (the benchmarks) reports errors the same
/// way: one line on stderr and the code for the error.
func reportingFailures(_ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch let status as ExitCode {
        throw status
    } catch {
        let failure = CommandFailure(error)
        FileHandle.standardError.write(Data("fieldhal: \(failure.description)\n".utf8))
        throw ExitCode(failure.exitCode)
    }
}

/// Every command's body runs through this: errors become one line on stderr and a code.
protocol FieldHALSubcommand: AsyncParsableCommand {
    var global: GlobalOptions { get }
    func execute(_ environment: Environment) async throws
}

extension FieldHALSubcommand {
    func run() async throws {
        do {
            try await execute(try Environment(global))
        } catch let error as CleanExit {
            throw error
        } catch let status as ExitCode {
            throw status  // the command already said what happened
        } catch {
            let failure = CommandFailure(error)
            FileHandle.standardError.write(Data("fieldhal: \(failure.description)\n".utf8))
            throw ExitCode(failure.exitCode)
        }
    }
}

func duration(seconds: Double, option: String) throws -> Duration {
    guard seconds.isFinite, seconds > 0, seconds <= 86_400 else {
        throw FieldHALError(.invalidArgument, subject: option, detail: "must be between 0 and 86400 seconds, got \(seconds)")
    }
    return .milliseconds(Int((seconds * 1000).rounded()))
}

extension String {
    /// Writes the bytes atomically to this path (mode 0644: output files are for the user).
    func writeAtomically(_ bytes: [UInt8]) throws {
        let absolute = hasPrefix("/") ? self : FileManager.default.currentDirectoryPath + "/" + self
        try AtomicFile.write(bytes, to: absolute, mode: 0o644)
    }

    var absolutePath: String {
        hasPrefix("/") ? self : FileManager.default.currentDirectoryPath + "/" + self
    }
}
