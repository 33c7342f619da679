import ArgumentParser
import FieldHAL
import FieldHALClient
import FieldHALCommandLine
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

extension StatusCommand: FieldHALSubcommand {
    public func run() async throws { try await runReportingFailures() }

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
        try emit(Report(configuration: environment.configuration.file, stateDirectory: environment.stateDirectory.path,
                        capabilities: capabilities))
    }
}
