import ArgumentParser
import FieldHAL
import FieldHALComposition
import FieldHALAPI
import FieldHALClient
import FieldHALCommandLine
import Foundation

struct GPSCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "gps", abstract: "Read the location.",
                                                    subcommands: [GPSFixCommand.self, Watch.self])

    struct Watch: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "watch",
            abstract: "Print fixes as they arrive, one per line.",
            discussion: """
            With a daemon answering on the configuration's [api] socket, its fix events: one watch of each receiver \
            serves every follower. With several receivers (--device more than once, or --all), each line starts \
            with the receiver's name; with --json, each line is one fix with its "device".
            """)
        @OptionGroup var global: GlobalOptions
        @OptionGroup var watched: WatchedDevices
        @Option(help: "Stop after this many fixes (default: until interrupted).") var count: Int?

        func execute(_ environment: Environment) async throws {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            encoder.dateEncodingStrategy = .iso8601
            let timestamps = ISO8601DateFormatter()
            var printed = 0
            /// Prints one fix; true when the count is reached.
            func show(_ fix: FieldHAL.Fix, from device: String?, several: Bool) throws -> Bool {
                // Each fix at once, also into a pipe (`| grep`, `| jq`): stdio would hold them back.
                if global.json {
                    Output.streamLine(String(decoding: try encoder.encode(FixEventData(fix: fix, device: device)), as: UTF8.self))
                } else {
                    let prefix = several ? "\(device ?? "?"): " : ""
                    if fix.hasPosition {
                        Output.streamLine(prefix + String(format: "%@ %@ %.6f, %.6f ±%.1f m", timestamps.string(from: fix.time), fix.mode.rawValue,
                                                          fix.latitude!, fix.longitude!, fix.horizontalAccuracy ?? .nan))
                    } else {
                        let reason = fix.sourceProblem.map { " (\($0))" } ?? ""
                        Output.streamLine("\(prefix)\(timestamps.string(from: fix.time)) no fix\(reason)")
                    }
                }
                printed += 1
                return count.map { printed >= $0 } ?? false
            }
            // With a daemon, its fix events: one watch of each receiver for every follower.
            let served: Void? = try await environment.throughDaemon { daemon in
                let configured = watched.all ? try await daemon.devices().filter { $0.capability == .location }.compactMap(\.name) : []
                let names = watched.chosen(from: configured)
                for try await event in daemon.events([.fix], devices: names) {
                    if case .fix(let fix, let device) = event, try show(fix, from: device, several: names.count > 1) { break }
                }
            }
            guard served == nil else { return }
            try await environment.withKit(for: .location) { kit in
                let chosen = watched.chosen(from: kit.names(of: .location))
                let names = chosen.isEmpty ? [nil] : chosen.map(Optional.some)
                let receivers = try names.map { name in (name: try kit.key(.location, named: name).name, items: try kit.location(named: name).watch()) }
                try await SeveralWatches.follow(receivers) { fix, name in try show(fix, from: name, several: receivers.count > 1) }
            }
        }
    }
}

extension GPSFixCommand: FieldHALSubcommand {
    public func run() async throws { try await runReportingFailures() }

    public func execute(_ environment: Environment) async throws {
        let request = try request()
        let reading: LocationReading
        if Self.fitsTheAPI(request), let served = try await environment.throughDaemon({ daemon in
            try await Self.fix(request, from: daemon, device: target.device)
        }) {
            // The daemon's receiver is warm: a recent fix comes from its cache at once.
            reading = served
        } else {
            do {
                reading = try await environment.withKit(for: .location) { kit in
                    try await kit.location(named: target.device).currentFix(request)
                }
            } catch var error as FieldHALError where error.kind == .noFix {
                error.advice = Self.noFixAdvice  // the core speaks of the request; this command has flags
                throw error
            }
        }
        try emit(reading)
    }

    static func fix(_ request: FixRequest, from daemon: FieldHALClient, device: String? = nil) async throws -> LocationReading {
        do {
            return try await daemon.location(timeout: request.timeout, maxAge: request.maxAge, accuracy: request.requiredAccuracy, device: device)
        } catch let problem as APIProblem {
            throw inTheCommandsWords(problem)
        }
    }
}
