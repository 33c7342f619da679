import ArgumentParser
import FieldHAL
import FieldHALComposition
import FieldHALAPI
import FieldHALCommandLine

/// `fieldhal daemon status` and `fieldhal daemon health`: ask the running `fieldhal run` over its API.
struct DaemonCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "daemon", abstract: "The running fieldhal service, over its API socket.",
        subcommands: [DaemonStatusCommand.self, DaemonHealthCommand.self], defaultSubcommand: DaemonStatusCommand.self)
}

/// `fieldhal daemon health`: the daemon's verdict, as an updater's health check uses it.
struct DaemonHealthCommand: FieldHALSubcommand {
    static let configuration = CommandConfiguration(
        commandName: "health",
        abstract: "Is the daemon serving, with every configured device there? Exit 0 if so, 69 if not.",
        discussion: """
        For an updater's health check (RAUC, greenboot, Mender, systemd's ExecCondition; \
        docs/fleet.md): exit 0 when the daemon answers and every device the configuration \
        names is available; 69 (EX_UNAVAILABLE) when a device is not, or no daemon answers. \
        With --allow-degraded a missing device still passes: only a daemon that does not answer fails.
        """)
    @OptionGroup var global: GlobalOptions
    @Flag(help: "Pass while the daemon answers, even with a configured device unavailable.") var allowDegraded = false

    func execute(_ environment: Environment) async throws {
        guard let health = try await environment.throughDaemon({ try await $0.health() }) else {
            throw DaemonStatusCommand.noDaemon(at: environment.apiSocketPath)
        }
        try Output.emit(health, json: global.json) {
            let width = health.devices.map { $0.capability.rawValue.count + 1 + $0.name.count }.max() ?? 0
            return (["fieldhal \(health.version): \(health.verdict.rawValue)"] + health.devices.map { device in
                let name = "\(device.capability.rawValue).\(device.name)"
                return "  " + name + String(repeating: " ", count: max(0, width - name.count)) + (device.available ? "  available" : "  UNAVAILABLE")
            }).joined(separator: "\n")
        }
        if health.verdict != .healthy, !allowDegraded { throw ExitCode(69) }  // EX_UNAVAILABLE
    }
}

extension DaemonStatusCommand: FieldHALSubcommand {
    public func run() async throws { try await runReportingFailures() }

    public func execute(_ environment: Environment) async throws {
        guard let report = try await environment.throughDaemon({ daemon in
            let status = try await daemon.status()
            let session = status.caller.scopes.contains(.transrify) ? try await daemon.session() : nil
            let evidence = status.caller.scopes.contains(.evidence) ? try await daemon.evidence() : nil
            return Report(status, session: session, evidence: evidence)
        }) else {
            throw Self.noDaemon(at: environment.apiSocketPath)
        }
        try emit(report)
    }
}
