import ArgumentParser
import Foundation
import TransrifyLabServer

/// `fieldhal-labserver`: the Transrify API for labs and tests, state in SQLite.
@main
struct LabServerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fieldhal-labserver",
        abstract: "A faithful, persistent Transrify API server for labs and tests.",
        discussion: """
        Endpoints: POST /v1/sessions/login, GET /v1/sessions/verify, POST /v1/alerts/duress, \
        POST /v1/alerts/nearby, POST /v1/alerts/ack, POST /v1/evidence/presign, PUT to the \
        presigned URL, POST /evidence/finalize. State (lab.sqlite, objects/) lives in --directory \
        and survives restarts. Listens on 127.0.0.1 unless --host says otherwise; an address \
        other machines reach is refused without --insecure-public-lab (plain HTTP, a demo key, \
        and every session's verdict on /lab/v1/state).
        """,
        subcommands: [Serve.self, Seed.self],
        defaultSubcommand: Serve.self)

    struct Options: ParsableArguments {
        @Option(help: "The state directory (lab.sqlite, objects/).") var directory = "./labserver-state"
    }

    struct Serve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Serve the API until interrupted.")
        @OptionGroup var options: Options
        @Option(help: "The address to listen on (loopback unless --insecure-public-lab).") var host = "127.0.0.1"
        @Flag(help: "Allow an address other machines reach: plain HTTP, the demo key and every session's verdict to anyone on that network. A closed lab network only.")
        var insecurePublicLab = false
        @Option(help: "The port (0: any free port, printed on start).") var port = 8787
        @Option(help: "Seconds an alert stays in nearby answers (soaks raise thousands: keep it under the kits' 60 s debounce).")
        var alertMaxAge: Int = 3600

        func run() async throws {
            guard alertMaxAge > 0 else { throw ValidationError("--alert-max-age: at least 1 second") }
            var configuration = LabServer.Configuration(directory: options.directory)
            configuration.host = host
            configuration.port = port
            configuration.alertMaxAge = .seconds(alertMaxAge)
            configuration.insecurePublicLab = insecurePublicLab
            let server: LabServer
            do {
                server = try LabServer(configuration)
            } catch let refusal as LabServer.ConfigurationError {
                FileHandle.standardError.write(Data("fieldhal-labserver: \(refusal)\n".utf8))
                throw ExitCode(64)  // EX_USAGE
            }
            if insecurePublicLab && !LabServer.Configuration.isLoopback(host) {
                FileHandle.standardError.write(Data("fieldhal-labserver: warning: listening on \(host) in plain HTTP (--insecure-public-lab)\n".utf8))
            }
            try await server.run { port in
                // Unbuffered: scripts wait for this line on a pipe.
                FileHandle.standardOutput.write(Data("fieldhal-labserver listening on http://\(host):\(port)\n".utf8))
            }
        }
    }

    struct Seed: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create the demo tenant and users, and print them.")
        @OptionGroup var options: Options

        func run() async throws {
            let server = try LabServer(LabServer.Configuration(directory: options.directory))
            let demo = try server.seedDemo()
            print("tenant key: \(demo.tenantKey)")
            for user in demo.users { print("user \(user.customerRef): PIN \(user.pin), duress PIN \(user.duressPin)") }
        }
    }
}
