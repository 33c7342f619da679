import ArgumentParser
import FieldHAL
import Foundation

/// `fieldhal daemon status`: asks the running `fieldhal run` over its control socket.
struct DaemonCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "daemon", abstract: "The running fieldhal service, over its control socket.",
        subcommands: [Status.self], defaultSubcommand: Status.self)

    struct Status: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            abstract: "Is the daemon running, and how does it get alerts? Exit 69 when none listens.",
            discussion: "The socket is [daemon] socket, else fieldhal.sock in the state directory.")
        @OptionGroup var global: GlobalOptions

        func execute(_ environment: Environment) async throws {
            let path = ControlSocket.path(environment)
            guard let answer = try await ControlSocket.ask(.init(command: .status), at: path), let status = answer.status else {
                throw FieldHALError(.unavailable, subject: "daemon", detail: "no fieldhal daemon listens at \(path)",
                                    advice: "start it: systemctl start fieldhal, or fieldhal run")
            }
            try Output.emit(status, json: global.json) {
                """
                fieldhal \(status.version) running (pid \(status.pid)) since \(ISO8601DateFormatter().string(from: status.startedAt))
                alerts: \(status.alerts)
                signed in: \(status.signedIn ? "yes" : "no")
                evidence queued: \(status.queuedEvidence)
                """
            }
        }
    }
}
