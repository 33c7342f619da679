import ArgumentParser
import FieldHAL
import Foundation

struct GPSCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "gps", abstract: "Read the location.",
                                                    subcommands: [Fix.self, Watch.self])

    struct Fix: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the current fix: the first of the wanted quality within the timeout, else a recent cached one.")
        @OptionGroup var global: GlobalOptions
        @Option(help: "Seconds to wait for a live fix.") var timeout: Double = 5
        @Option(help: "Oldest cached fix to fall back to, in seconds (0: never use the cache).") var maxAge: Double = 300
        @Option(help: "Worst horizontal accuracy accepted, in metres.") var accuracy: Double?

        func execute(_ environment: Environment) async throws {
            let request = FixRequest(timeout: try duration(seconds: timeout, option: "--timeout"),
                                     maxAge: maxAge > 0 ? try duration(seconds: maxAge, option: "--max-age") : nil,
                                     requiredAccuracy: accuracy)
            let reading = try await environment.withKit(for: .location) { kit in
                try await kit.location().currentFix(request)
            }
            try Output.emit(reading, json: global.json) { describe(reading) }
        }

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
        static let configuration = CommandConfiguration(abstract: "Print fixes as they arrive, one per line.")
        @OptionGroup var global: GlobalOptions
        @Option(help: "Stop after this many fixes (default: until interrupted).") var count: Int?

        func execute(_ environment: Environment) async throws {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            encoder.dateEncodingStrategy = .iso8601
            let timestamps = ISO8601DateFormatter()
            try await environment.withKit(for: .location) { kit in
                var printed = 0
                for try await fix in try kit.location().watch() {
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
                    if let count, printed >= count { break }
                }
            }
        }
    }
}
