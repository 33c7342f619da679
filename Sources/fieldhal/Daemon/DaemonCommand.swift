import ArgumentParser
import FieldHAL
import FieldHALAPI
import Foundation

/// `fieldhal daemon status`: asks the running `fieldhal run` over its API.
struct DaemonCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "daemon", abstract: "The running fieldhal service, over its API socket.",
        subcommands: [Status.self], defaultSubcommand: Status.self)

    /// What `daemon status` prints (its `--json` keys).
    struct Report: Encodable {
        var version: String
        var pid: Int32
        var startedAt: Date
        /// Nil when the caller may not see them (scopes `transrify`, `evidence`).
        var alerts: String?
        var signedIn: Bool?
        var queuedEvidence: Int?
    }

    struct Status: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "status",
            abstract: "Is the daemon running, and how does it get alerts? Exit 69 when none listens.",
            discussion: "The socket is [api] socket, else api.sock in the state directory.")
        @OptionGroup var global: GlobalOptions

        func execute(_ environment: Environment) async throws {
            let path = environment.apiSocketPath
            guard let status = try await environment.throughDaemon({ daemon in
                let status = try await daemon.status()
                let session = status.caller.scopes.contains(.transrify) ? try await daemon.session() : nil
                // What the user queued by hand; the silent capture after a duress is never listed.
                let evidence = status.caller.scopes.contains(.evidence) ? try await daemon.evidence() : nil
                return Report(version: status.version, pid: status.pid, startedAt: status.startedAt, alerts: session?.alerts,
                              signedIn: session?.signedIn, queuedEvidence: evidence?.items.count)
            }) else {
                throw FieldHALError(.unavailable, subject: "daemon", detail: "no fieldhal daemon listens at \(path)",
                                    advice: "start it: systemctl start fieldhal, or fieldhal run")
            }
            try Output.emit(status, json: global.json) {
                """
                fieldhal \(status.version) running (pid \(status.pid)) since \(ISO8601DateFormatter().string(from: status.startedAt))
                alerts: \(status.alerts ?? "(not granted to this user)")
                signed in: \(status.signedIn.map { $0 ? "yes" : "no" } ?? "(not granted to this user)")
                evidence queued: \(status.queuedEvidence.map(String.init) ?? "(not granted to this user)")
                """
            }
        }
    }
}
