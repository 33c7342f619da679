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

extension DaemonHealthCommand: FieldHALSubcommand {
    public func execute(_ environment: Environment) async throws {
        guard let health = try await environment.throughDaemon({ try await $0.health() }) else {
            throw DaemonStatusCommand.noDaemon(at: environment.apiSocketPath)
        }
        let status = try emit(health)
        if status != 0 { throw ExitCode(status) }
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
