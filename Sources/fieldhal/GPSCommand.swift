import ArgumentParser
import FieldHAL
import FieldHALAPI
import FieldHALClient
import Foundation

struct GPSCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "gps", abstract: "Read the location.",
                                                    subcommands: [Fix.self, Watch.self])

    struct Fix: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "fix",
            abstract: "Print the current fix: the first of the wanted quality within the timeout, else a recent cached one.",
            discussion: "With a daemon answering on the configuration's [api] socket (and --timeout up to 60 s), the daemon's receiver answers: it is warm, so a recent fix comes at once.")
        @OptionGroup var global: GlobalOptions
        @Option(help: "Seconds to wait for a live fix.") var timeout: Double = 5
        @Option(help: "Oldest cached fix to fall back to, in seconds (0: never use the cache).") var maxAge: Double = 300
        @Option(help: "Worst horizontal accuracy accepted, in metres.") var accuracy: Double?

        func execute(_ environment: Environment) async throws {
            let request = FixRequest(timeout: try duration(seconds: timeout, option: "--timeout"),
                                     maxAge: maxAge > 0 ? try duration(seconds: maxAge, option: "--max-age") : nil,
                                     requiredAccuracy: accuracy)
            let reading: LocationReading
            if fitsTheAPI(request), let served = try await environment.throughDaemon({ daemon in
                try await Self.fix(request, from: daemon)
            }) {
                // The daemon's receiver is warm: a recent fix comes from its cache at once.
                reading = served
            } else {
                reading = try await environment.withKit(for: .location) { kit in
                    try await kit.location().currentFix(request)
                }
            }
            try Output.emit(reading, json: global.json) { describe(reading) }
        }

        /// The API takes waits up to 60 s and cache ages up to a day; a command asking for more
        /// opens the receiver itself (gpsd shares it; a daemon's fake receiver is its own).
        func fitsTheAPI(_ request: FixRequest) -> Bool {
            request.timeout <= .seconds(60) && (request.maxAge ?? .zero) <= .seconds(86_400)
        }

        static func fix(_ request: FixRequest, from daemon: FieldHALClient) async throws -> LocationReading {
            do {
                return try await daemon.location(timeout: request.timeout, maxAge: request.maxAge, accuracy: request.requiredAccuracy)
            } catch var problem as APIProblem where problem.kind == FieldHALError.Kind.noFix.rawValue {
                // The daemon's advice names the API's parameters; this command has flags.
                problem.advice = Self.noFixAdvice
                throw problem
            }
        }

        /// What the core advises when no fix comes, in the CLI's words.
        static let noFixAdvice = "check the antenna has a view of the sky, or raise --timeout / --max-age"

        func describe(_ reading: LocationReading) -> String {
            let fix = reading.fix
            var text = String(format: "%.6f, %.6f", fix.latitude ?? 0, fix.longitude ?? 0)
            if let accuracy = fix.horizontalAccuracy { text += String(format: " ±%.1f m", accuracy) }
            if let altitude = fix.altitude { text += String(format: ", altitude %.1f m", altitude) }
            text += " (\(fix.mode.rawValue), \(reading.source.rawValue), \(String(format: "%.1f", reading.age)) s old)"
            return text
        }
    }

    struct Watch: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "watch",
            abstract: "Print fixes as they arrive, one per line.",
            discussion: "With a daemon answering on the configuration's [api] socket, its fix events: one watch of the receiver serves every follower.")
        @OptionGroup var global: GlobalOptions
        @Option(help: "Stop after this many fixes (default: until interrupted).") var count: Int?

        func execute(_ environment: Environment) async throws {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            encoder.dateEncodingStrategy = .iso8601
            let timestamps = ISO8601DateFormatter()
            var printed = 0
            /// Prints one fix; true when the count is reached.
            func show(_ fix: FieldHAL.Fix) throws -> Bool {
                // Each fix at once, also into a pipe (`| grep`, `| jq`): stdio would hold them back.
                if global.json {
                    Output.streamLine(String(decoding: try encoder.encode(fix), as: UTF8.self))
                } else if fix.hasPosition {
                    Output.streamLine(String(format: "%@ %@ %.6f, %.6f ±%.1f m", timestamps.string(from: fix.time), fix.mode.rawValue,
                                             fix.latitude!, fix.longitude!, fix.horizontalAccuracy ?? .nan))
                } else {
                    let reason = fix.sourceProblem.map { " (\($0))" } ?? ""
                    Output.streamLine("\(timestamps.string(from: fix.time)) no fix\(reason)")
                }
                printed += 1
                return count.map { printed >= $0 } ?? false
            }
            // With a daemon, its fix events: one watch of the receiver for every follower.
            let served: Void? = try await environment.throughDaemon { daemon in
                for try await event in daemon.events([.fix]) {
                    if case .fix(let fix) = event, try show(fix) { break }
                }
            }
            guard served == nil else { return }
            try await environment.withKit(for: .location) { kit in
                for try await fix in try kit.location().watch() where try show(fix) { break }
            }
        }
    }
}
