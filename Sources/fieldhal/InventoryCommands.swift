import ArgumentParser
import FieldHAL
import FieldHALClient
import FieldHALPlugins

struct PluginsCommand: FieldHALSubcommand {
    static let configuration = CommandConfiguration(commandName: "plugins",
                                                    abstract: "List the plugins compiled into this build and what each provides.")
    @OptionGroup var global: GlobalOptions

    struct Entry: Encodable {
        let name: String
        let summary: String
        let capabilities: [String]
    }

    struct Listing: Encodable {
        let plugins: [Entry]
        let traits: [String]
    }

    func execute(_ environment: Environment) async throws {
        let entries = environment.registry.all.map { plugin in
            Entry(name: plugin.name, summary: plugin.summary, capabilities: plugin.capabilities.keys.sorted().map(\.rawValue))
        }
        let listing = Listing(plugins: entries, traits: BuiltinPlugins.enabledTraits)
        try Output.emit(listing, json: global.json) {
            var lines = entries.map { "\($0.name): \($0.summary)\n  provides: \($0.capabilities.joined(separator: ", "))" }
            lines.append("traits built in: " + (listing.traits.isEmpty ? "none" : listing.traits.joined(separator: ", ")))
            return lines.joined(separator: "\n")
        }
    }
}

struct StatusCommand: FieldHALSubcommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Load the kit and show, per capability, its plugin and device, or why it is unavailable.")
    @OptionGroup var global: GlobalOptions

    struct Report: Encodable {
        let configuration: String
        let stateDirectory: String
        let capabilities: [CapabilityStatus]
    }

    func execute(_ environment: Environment) async throws {
        // With a daemon, its view: it holds the devices, so a kit loaded here would find the
        // exclusive ones busy.
        let capabilities: [CapabilityStatus]
        if let served = try await environment.throughDaemon({ try await $0.capabilities().capabilities }) {
            capabilities = served
        } else {
            let kit = await environment.loadKit()
            capabilities = kit.statuses
            await kit.close()
        }
        let report = Report(configuration: environment.configuration.file, stateDirectory: environment.stateDirectory.path,
                            capabilities: capabilities)
        try Output.emit(report, json: global.json) {
            var lines = ["configuration: \(report.configuration)", "state: \(report.stateDirectory)"]
            let width = Capability.allCases.map(\.rawValue.count).max()!
            for status in report.capabilities {
                let name = status.capability.rawValue.padding(toLength: width, withPad: " ", startingAt: 0)
                switch status.state {
                case .available:
                    lines.append("\(name)  available    \(status.plugin ?? "?")  \(status.device ?? "")")
                case .unavailable:
                    lines.append("\(name)  UNAVAILABLE  \(status.reason ?? "")")
                case .notConfigured:
                    lines.append("\(name)  not loaded   \(status.reason ?? "")")
                }
            }
            return lines.joined(separator: "\n")
        }
    }
}
