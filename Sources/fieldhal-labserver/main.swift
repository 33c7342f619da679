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
        subcommands: [Serve.self, Seed.self, Export.self],
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

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Join an incident's recordings, sent in segments, into one file per recording.",
            discussion: """
            Writes <incident>-audio.wav and <incident>-video.avi (numbered when a kind has several \
            recordings) into --output: the segments in sequence order, each used once. A missing \
            segment leaves a gap and is reported, as the lab's chain check reports it. Run it \
            beside a serving lab server or after it: it only reads the state directory.
            Exit status: 0 exported (even with gaps), 65 a segment could not be joined, 66 no \
            such incident or no recording in it.
            """)
        @OptionGroup var options: Options
        @Option(help: "The incident id (the duress alert's id, as in the lab's state).") var incident: String
        @Option(help: "The directory to write into (created if missing).") var output = "."
        @Flag(help: "One JSON object per line per file: recording, kind, path, segments, seconds, problems.") var json = false

        func run() async throws {
            let server = try LabServer(LabServer.Configuration(directory: options.directory))
            let exported: [RecordingExport.Exported]
            do {
                exported = try server.export(incidentId: incident, to: output)
            } catch let failure as RecordingExport.Failure {
                FileHandle.standardError.write(Data("fieldhal-labserver export: \(failure)\n".utf8))
                throw ExitCode(failure.nothingToExport ? 66 : 65)  // EX_NOINPUT, EX_DATAERR
            }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            for file in exported {
                if json {
                    print(String(decoding: try encoder.encode(file), as: UTF8.self))
                } else {
                    let gaps = file.problems.isEmpty ? "" : " — " + file.problems.joined(separator: "; ")
                    print("\(file.path): \(file.kind), \(file.segments) segments, \(String(format: "%.1f", file.seconds)) s\(gaps)")
                }
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
