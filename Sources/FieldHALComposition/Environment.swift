import ArgumentParser
import FieldHAL
import FieldHALAPI
import FieldHALCommandLine
import FieldHALFlows
import FieldHALMQTT
import FieldHALPluginHost
import FieldHALPlugins
import FieldHALServer
import FieldHALSystem
import FieldHALVault
import Foundation
import Transrify

/// The configuration, state directory and kit a command runs with.
public struct Environment: Sendable {
    public let configuration: KitConfiguration
    public let stateDirectory: StateDirectory
    public let registry: PluginRegistry
    /// The time the kit's services keep (the lock's relock, a sign-in's age): the system's,
    /// or a test's manual clock given to the daemon.
    public var clock: any KitClock = SystemKitClock()

    /// `fakeKitUnlessConfigured`: with no configuration given or installed, the built-in fake
    /// kit rather than an error (`fieldhal demo`, which is about the fake kit).
    public init(_ options: GlobalOptions, fakeKitUnlessConfigured: Bool = false) throws {
        let environment = ProcessInfo.processInfo.environment
        registry = PluginRegistry.adding(externalPluginsTo: BuiltinPlugins.registry).0
        switch CommandLineConfiguration.choice(flag: options.config, environment: environment) {
        case .file(let path):
            configuration = try KitConfiguration.load(path: path, registry: registry, settings: Self.settings)
        case .none where !fakeKitUnlessConfigured:
            throw ConfigError(file: KitConfiguration.defaultPath, message: CommandLineConfiguration.missing)
        case .fakeKit, .none:
            configuration = try KitConfiguration.parse(BuiltinConfiguration.text, file: BuiltinConfiguration.label,
                                                       directory: FileManager.default.currentDirectoryPath, registry: registry,
                                                       settings: Self.settings)
        case .fakeBench:
            configuration = try KitConfiguration.parse(BuiltinConfiguration.benchText, file: BuiltinConfiguration.benchLabel,
                                                       directory: FileManager.default.currentDirectoryPath, registry: registry,
                                                       settings: Self.settings)
        }
        stateDirectory = StateDirectory.resolve(flag: options.stateDir, environment: environment,
                                                configured: configuration.stateDirectory)
        // A [transrify] section whose URLs could never be used is refused with the file
        // (exit 78) by every command, `status` included, not first by a sign-in.
        if configuration.settings["transrify"] != nil {
            do {
                _ = try TransrifySettings.baseURL(in: configuration)
                _ = try TransrifySettings.alertChannelURL(in: configuration)
            } catch let error as ConfigError {
                throw error
            } catch {}  // not configured yet (no URL for this environment): said when it is needed
        }
    }

    /// The sections besides the capabilities': the core's `[kit]` and the flows' own.
    public static let settings: [String: [ParameterSpec]] = KitConfiguration.coreSettings.merging(
        ["location_sharing": LocationSharingSettings.specs, "transrify": TransrifySettings.specs, "daemon": DaemonSettings.specs,
         "api": APIAuthorisation.specs, "web": WebDoorSettings.specs, "metrics": MetricsSettings.specs, "mqtt": MQTTSettings.specs]) { $1 }

    /// Opens the vault in the state directory.
    public func vault() throws -> Vault { try Vault(stateDirectory: stateDirectory) }

    /// Loads the kit, opening only `capabilities` when given.
    public func loadKit(only capabilities: Set<Capability>? = nil, devices: Set<DeviceKey>? = nil) async -> Kit {
        await Kit.load(configuration, registry: registry,
                       context: PluginContext(configDirectory: configuration.directory, stateDirectory: stateDirectory.path),
                       only: capabilities, devices: devices)
    }

    /// The kit's GPS, camera and microphone for evidence in real time: the configured kit, or
    /// the built-in fake kit with its camera and microphone recording as long as they last
    /// (`bench seizure` measures time; `demo` shows segments arriving while they record).
    public func loadEvidenceKit() async throws -> Kit {
        let wanted: Set<Capability> = [.location, .camera, .microphone]
        guard configuration.file == BuiltinConfiguration.label else { return await loadKit(only: wanted) }
        let realTime = try KitConfiguration.parse(BuiltinConfiguration.realTimeText, file: BuiltinConfiguration.label,
                                                  directory: configuration.directory, registry: registry, settings: Environment.settings)
        return await Kit.load(realTime, registry: registry,
                              context: PluginContext(configDirectory: realTime.directory, stateDirectory: stateDirectory.path),
                              only: wanted)
    }

    /// Where the configured devices are now, for the daemon's following of them (hotplug).
    public func devicePresence() async -> [DeviceKey: DevicePresence] {
        await registry.presence(in: configuration,
                                context: PluginContext(configDirectory: configuration.directory, stateDirectory: stateDirectory.path))
    }

    /// Loads one capability, runs `body` with the kit, and closes the kit.
    public func withKit<T>(for capability: Capability, _ body: (Kit) async throws -> T) async throws -> T {
        let kit = await loadKit(only: [capability])
        let result = await Result(catching: { try await body(kit) })
        await kit.close()
        return try result.get()
    }
}

extension Result where Failure == any Error {
    /// Captures the outcome of an async throwing body.
    public init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}

/// Turns FieldHAL's errors into a one-line message and an exit code (sysexits.h).
public struct CommandFailure: Error, CustomStringConvertible {
    public let description: String
    public let exitCode: Int32

    public init(_ error: any Error) {
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
            exitCode = ExitStatus.code(error.kind)
        case let problem as APIProblem:
            exitCode = ExitStatus.code(problem)
        case let error as VaultError where error.kind == .keySealed:
            exitCode = 69  // EX_UNAVAILABLE: the TPM that holds the key would not open it
        case let error as ValidationError:
            // An option's value judged in the command's body, as the parser's own: EX_USAGE.
            description = error.message
            exitCode = 64
        default:
            exitCode = 1
        }
        self.description = description
        self.exitCode = exitCode
    }
}

/// A command that is not a `FieldHALSubcommand` (the benchmarks) reports errors the same
/// way: one line on stderr and the code for the error.
public func reportingFailures(_ body: () async throws -> Void) async throws {
    await DispatchTimers.prepare()
    do {
        try await body()
    } catch let status as ExitCode {
        throw status
    } catch {
        let failure = CommandFailure(error)
        Output.failure(failure.description)
        throw ExitCode(failure.exitCode)
    }
}

/// Every command's body runs through this: errors become one line on stderr and a code.
public protocol FieldHALSubcommand: AsyncParsableCommand {
    var global: GlobalOptions { get }
    func execute(_ environment: Environment) async throws
    /// Whether the command runs on the built-in fake kit when no configuration is given or
    /// installed; every command but the demo fails instead, saying what to do.
    static var fakeKitUnlessConfigured: Bool { get }
}

extension FieldHALSubcommand {
    public static var fakeKitUnlessConfigured: Bool { false }

    public func run() async throws { try await runReportingFailures() }

    /// The body of `run()`. The commands shared with fieldhal-front are public types, whose
    /// `run()` must be public too: they call this from their own.
    public func runReportingFailures() async throws {
        await DispatchTimers.prepare()
        do {
            try await execute(try Environment(global, fakeKitUnlessConfigured: Self.fakeKitUnlessConfigured))
        } catch let error as CleanExit {
            throw error
        } catch let status as ExitCode {
            throw status  // the command already said what happened
        } catch {
            let failure = CommandFailure(error)
            Output.failure(failure.description)
            throw ExitCode(failure.exitCode)
        }
    }
}

extension String {
    /// Writes the bytes atomically to this path (mode 0644: output files are for the user).
    public func writeAtomically(_ bytes: [UInt8]) throws {
        let absolute = hasPrefix("/") ? self : FileManager.default.currentDirectoryPath + "/" + self
        try AtomicFile.write(bytes, to: absolute, mode: 0o644)
    }

    public var absolutePath: String {
        hasPrefix("/") ? self : FileManager.default.currentDirectoryPath + "/" + self
    }
}
