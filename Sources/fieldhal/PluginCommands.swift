import ArgumentParser
import FieldHAL
import FieldHALComposition
import FieldHALCommandLine
import FieldHALPluginHost
import FieldHALPluginSDK
import FieldHALPlugins
import FieldHALSystem
import Foundation

/// `fieldhal plugins`: the built-in plugins, then the external ones the plugin directories hold.
struct PluginsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "plugins",
        abstract: "List the plugins: those built in, and external ones found in the plugin directories.",
        discussion: """
        External plugins are searched for in $FIELDHAL_PLUGIN_PATH (colon-separated), then \
        /etc/fieldhal/plugins.d, then /usr/lib/fieldhal/plugins: each NAME/plugin.json or \
        NAME.json there is a plugin's manifest. The first plugin of a name wins; a built-in \
        plugin is never replaced. `fieldhal plugin check PATH` checks one and runs its handshake.
        """)
    @OptionGroup var global: GlobalOptions

    struct Entry: Encodable {
        let name: String
        let summary: String
        let capabilities: [String]
        /// "built-in", or the manifest's path.
        let origin: String
        let version: String?
        let `protocol`: String?
        /// For an external plugin hidden by another of its name: what hides it.
        let shadowedBy: String?
    }

    struct Problem: Encodable {
        let file: String
        let problem: String
    }

    struct Listing: Encodable {
        let plugins: [Entry]
        let traits: [String]
        let searched: [String]
        let problems: [Problem]
    }

    /// No configuration needed: listing what could be configured comes before writing one.
    func run() async throws {
        let builtIn = BuiltinPlugins.registry.all.map { plugin in
            Entry(name: plugin.name, summary: plugin.summary, capabilities: plugin.capabilities.keys.sorted().map(\.rawValue),
                  origin: "built-in", version: nil, protocol: nil, shadowedBy: nil)
        }
        let searched = PluginDirectories.searched()
        let discovery = PluginDirectories.discover(in: searched, builtIn: Set(builtIn.map(\.name)))
        func entry(_ manifest: PluginManifest, shadowedBy: String?) -> Entry {
            Entry(name: manifest.name, summary: manifest.summary, capabilities: manifest.capabilities.keys.sorted().map(\.rawValue),
                  origin: manifest.file, version: manifest.version, protocol: manifest.protocolVersion.description,
                  shadowedBy: shadowedBy)
        }
        let external = discovery.plugins.map { entry($0, shadowedBy: nil) } + discovery.shadowed.map { entry($0.manifest, shadowedBy: $0.by) }
        let listing = Listing(plugins: builtIn + external, traits: BuiltinPlugins.enabledTraits, searched: searched,
                              problems: discovery.problems.map { Problem(file: $0.subject, problem: $0.description) })
        try Output.emit(listing, json: global.json) {
            var lines = builtIn.map { "\($0.name): \($0.summary)\n  provides: \($0.capabilities.joined(separator: ", "))" }
            lines.append("traits built in: " + (listing.traits.isEmpty ? "none" : listing.traits.joined(separator: ", ")))
            lines.append("")
            if external.isEmpty {
                lines.append("external plugins: none in " + searched.joined(separator: ", "))
            } else {
                lines.append("external plugins (searched " + searched.joined(separator: ", ") + "):")
                for plugin in external {
                    // The version and summary are the plugin's own words.
                    lines.append("\(plugin.name) \(TerminalText.escaped(plugin.version ?? "")) (protocol \(plugin.protocol ?? "?")): \(TerminalText.escaped(plugin.summary))")
                    lines.append("  provides: \(plugin.capabilities.joined(separator: ", "))")
                    lines.append("  from: \(plugin.origin)" + (plugin.shadowedBy.map { "; not used: \($0) has its name" } ?? ""))
                }
            }
            lines += discovery.problems.map { "not usable: \($0)" }
            return lines.joined(separator: "\n")
        }
    }
}

/// `fieldhal plugin check PATH`.
struct PluginCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "plugin",
                                                    abstract: "Check external plugins; run a built-in one as an external plugin process.",
                                                    subcommands: [Check.self, Test.self, Manifest.self, Serve.self])

    struct Check: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "check",
            abstract: "Check a plugin's manifest, start the plugin and run the protocol's handshake with it.",
            discussion: """
            PATH is a plugin.json, a drop-in NAME.json, or a directory holding plugin.json. \
            The check reads the manifest (every field, every parameter), refuses a plugin \
            built for another major version of the plugin protocol, starts the executable, \
            sends `initialize`, compares the answer with the manifest (name, version, \
            protocol, capabilities), and stops the plugin with `shutdown` and `exit`. \
            Exit status: 0 when all agree; 65 for a manifest or an answer that is wrong; \
            69 when the plugin cannot start or dies; 75 when it does not answer in time; \
            66 when PATH has no manifest. docs/plugins.md and docs/plugin-protocol.md say more.
            """)
        @Argument(help: "The manifest, or the plugin's directory.") var path: String
        @Flag(name: .long, help: "Print the result as JSON.") var json = false
        @Option(name: .long, help: "Seconds the plugin has to answer `initialize`.") var timeout: Double = 10

        struct Report: Encodable {
            let passed = true
            let manifest: String
            let name: String
            let version: String
            let `protocol`: String
            let executable: String
            let capabilities: [String: [String]]
            let handshakeMilliseconds: Double
        }

        /// What `--json` prints when the check fails: which manifest, and the error as the
        /// API's problems carry it (`kind`, `subject`, `detail`, `advice`), beside the exit status.
        struct Failure: Encodable {
            let passed = false
            let manifest: String
            let exitStatus: Int32
            let error: Problem
            struct Problem: Encodable {
                let kind: String
                let subject: String
                let detail: String
                let advice: String?
            }
        }

        func run() async throws {
            var file = path
            do {
                var isDirectory: ObjCBool = false
                if FileManager.default.fileExists(atPath: file, isDirectory: &isDirectory), isDirectory.boolValue {
                    file = (file as NSString).appendingPathComponent("plugin.json")
                }
                guard FileManager.default.fileExists(atPath: file) else {
                    let missing = FieldHALError(.deviceNotFound, subject: file,
                                                detail: "no plugin manifest there (a plugin.json, a NAME.json, or a directory holding plugin.json)")
                    try fail(missing, file: file, status: 66)
                }
                let manifest = try PluginManifest.load(file)
                let handshake = try await PluginCheck.handshake(manifest, timeout: try duration(seconds: timeout, option: "--timeout"))
                let milliseconds = Double(handshake.duration.components.attoseconds) / 1e15 + Double(handshake.duration.components.seconds) * 1000
                let report = Report(
                    manifest: manifest.file, name: manifest.name, version: manifest.version,
                    protocol: manifest.protocolVersion.description, executable: manifest.executable,
                    capabilities: Dictionary(uniqueKeysWithValues: manifest.capabilities.map { ($0.key.rawValue, $0.value.map(\.name)) }),
                    handshakeMilliseconds: (milliseconds * 10).rounded() / 10)
                try Output.emit(report, json: json) {
                    var lines = ["plugin \(manifest.name) \(manifest.version) (protocol \(manifest.protocolVersion)): \(manifest.file)"]
                    for (capability, parameters) in manifest.capabilities.sorted(by: { $0.key < $1.key }) {
                        let described = parameters.map { "\($0.name): \($0.type)" + ($0.required ? ", required" : "") }
                        lines.append("  provides \(capability.rawValue)" + (described.isEmpty ? "" : " (" + described.joined(separator: "; ") + ")"))
                    }
                    lines.append("  executable: \(manifest.executable)")
                    lines.append("  handshake: the plugin agrees with its manifest (answered in \(report.handshakeMilliseconds) ms)")
                    return lines.joined(separator: "\n")
                }
            } catch let error as FieldHALError {
                try fail(error, file: file, status: error.kind == .protocolError || error.kind == .unsupported ? 65 : ExitStatus.code(error.kind))
            }
        }

        /// One line on standard error, and with --json the failure on standard output too (a
        /// script reads one JSON object whatever happened), then the exit status.
        private func fail(_ error: FieldHALError, file: String, status: Int32) throws -> Never {
            if json {
                let failure = Failure(manifest: file, exitStatus: status,
                                      error: .init(kind: error.kind.rawValue, subject: error.subject, detail: error.detail, advice: error.advice))
                try? Output.emit(failure, json: true) { "" }
            }
            Output.failure(error.kind == .deviceNotFound && status == 66 ? "\(error.subject): \(error.detail)" : error.description)
            throw ExitCode(status)
        }
    }

    /// The name a built-in plugin takes when run out of process: a built-in's own name is
    /// never taken by an external plugin.
    static func externalName(of plugin: String) -> String { "\(plugin)-process" }

    /// The plugin executable beside this binary (`fieldhal-plugin`), by its real path; nil
    /// when this build has none. One that others could change is refused (exit 77), as
    /// PluginTrust refuses a plugin directory's: it runs as the daemon's user.
    static func processExecutable() throws -> String? {
        guard let binary = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else { return nil }
        let directory = binary.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
        let executable = directory + "/fieldhal-plugin"
        guard access(executable, X_OK) == 0 else { return nil }
        do {
            return try PluginTrust.check(executable, what: "plugin executable")
        } catch {
            Output.failure(error.description)
            throw ExitCode(77)  // EX_NOPERM
        }
    }

    static func builtIn(_ plugin: String) throws -> PluginDescriptor {
        guard let descriptor = BuiltinPlugins.registry.plugin(named: plugin) else {
            let names = BuiltinPlugins.names.joined(separator: ", ")
            Output.failure("no built-in plugin \(plugin) in this build; the built-in plugins are \(names)")
            throw ExitCode(64)
        }
        return descriptor
    }

    struct Manifest: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the plugin.json that runs a built-in plugin out of process.",
            discussion: """
            A built-in plugin runs as an external plugin process (its own process, restarted \
            when it fails, the daemon unharmed) through `fieldhal plugin serve`. With \
            --output DIR it installs it: DIR/plugin.json and DIR/run, an executable that runs \
            this fieldhal's `plugin serve PLUGIN --name NAME` (DIR in a plugin directory, e.g. \
            /etc/fieldhal/plugins.d/NAME); without, it prints the manifest. Then name NAME in \
            the configuration's section. Exit status 73 when DIR cannot be written. \
            docs/plugins.md shows it start to finish.
            """)
        @Argument(help: "The built-in plugin (fieldhal plugins lists them).") var plugin: String
        @Option(help: "The external plugin's name (default: PLUGIN-process).") var name: String?
        @Option(help: "The executable the manifest names, relative to its directory.") var executable = "run"
        @Option(help: "Write plugin.json and the executable into this directory (made if missing) instead of printing.")
        var output: String?

        func run() async throws {
            let descriptor = try PluginCommand.builtIn(plugin)
            let external = name ?? PluginCommand.externalName(of: plugin)
            let text = try Self.text(for: descriptor, name: external, executable: executable)
            guard let output else {
                print(text, terminator: "")
                return
            }
            guard !executable.contains("/"), !executable.hasPrefix("."), !executable.isEmpty else {
                Output.failure("--executable must be a file name in the plugin's directory, not \(executable)")
                throw ExitCode(64)
            }
            do {
                try Self.install(plugin, as: external, manifest: text, executable: executable, into: output)
            } catch {
                Output.failure("cannot write the plugin into \(output): \(error.localizedDescription) — choose a directory you may write, or run with sudo")
                throw ExitCode(73)  // EX_CANTCREAT
            }
            print("wrote \(output)/plugin.json and \(output)/\(executable): plugin \(external) serves \(plugin) out of process")
            print("use it with plugin = \"\(external)\" in the section of a capability it provides (fieldhal plugin check \(output))")
        }

        /// The plugin.json that runs `descriptor` out of process as `name`.
        static func text(for descriptor: PluginDescriptor, name: String, executable: String) throws -> String {
            let manifest = PluginManifest.json(for: descriptor, name: name, version: FieldHALVersion.current, executable: executable)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            return String(decoding: try encoder.encode(manifest), as: UTF8.self) + "\n"
        }

        /// Writes `manifest` and an executable running this fieldhal's `plugin serve PLUGIN`
        /// into `output`.
        static func install(_ plugin: String, as external: String, manifest text: String, executable: String, into output: String) throws {
            // This very binary, by its real path: /usr/bin/fieldhal may be the front.
            let binary = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
            let script = "#!/bin/sh\n# Written by fieldhal plugin manifest: serves the built-in plugin \(plugin) out of process.\n"
                + "exec '\(binary)' plugin serve \(plugin) --name \(external)\n"
                // 0755 and 0644 whatever the umask: a plugin must not be writable by others, or
                // FieldHAL refuses it (PluginTrust).
                try FileManager.default.createDirectory(atPath: output, withIntermediateDirectories: true)
                try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: output)
                try Data(text.utf8).write(to: URL(fileURLWithPath: output + "/plugin.json"), options: .atomic)
                try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: output + "/plugin.json")
                // The executable appears whole and executable, or not at all.
                let staged = output + "/.\(executable).new"
                try Data(script.utf8).write(to: URL(fileURLWithPath: staged))
                try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: staged)
                guard rename(staged, output + "/" + executable) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        }
    }

    struct Test: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "test",
            abstract: "Run the plugin protocol's conformance checks against a plugin.",
            discussion: """
            PLUGIN is a manifest (a plugin.json, a NAME.json, or a directory holding \
            plugin.json), a built-in plugin (tested out of process, as `fieldhal plugin \
            manifest` installs it) or an external plugin in the plugin directories. Each \
            capability the plugin declares is checked as docs/plugin-protocol.md says a plugin \
            answers: the handshake, an unknown method, open and close, protocol 1.6's device \
            handles (a second open is busy, an unknown handle notConfigured), and each method — \
            gps.watch and its first report; nfc.read within its bound, and stopped by \
            $/cancel; nfc.emulate; haptics.play with what it played, and a pattern out of \
            bounds refused; biometrics.availability. The camera, microphone and speaker get \
            open and close only. A capability with required settings needs them, as its \
            configuration section would give them: --set nfc.device=/dev/ttyUSB0 (else its \
            device checks are skipped). Each check prints as it ends; --json prints the report. \
            Exit status: 0 when no check failed; 65 when one did; 66 when a PATH holds no \
            manifest; 64 for a name that is no plugin or a bad --set.
            """)
        @Argument(help: "The manifest, its directory, or a plugin's name.") var plugin: String
        @Option(name: .customLong("set"), help: ArgumentHelp("A capability's setting (repeatable).", valueName: "CAPABILITY.KEY=VALUE"))
        var settings: [String] = []
        @Flag(name: .long, help: "Print the report as JSON.") var json = false

        func run() async throws {
            let (manifest, scratch) = try await resolve()
            defer { if let scratch { try? FileManager.default.removeItem(atPath: scratch) } }
            let parameters = try settings(for: manifest)
            let quiet = json
            let report = await PluginConformance.run(manifest, parameters: parameters) { check in
                guard !quiet else { return }
                let label = check.outcome == .passed ? "PASS" : check.outcome == .failed ? "FAIL" : "SKIP"
                Output.streamLine("\(label)  \(check.capability.map { "\($0): " } ?? "")\(check.name) — \(check.detail)")
            }
            let count = { (outcome: PluginConformance.Outcome) in report.checks.filter { $0.outcome == outcome }.count }
            try Output.emit(report, json: json) {
                "plugin \(manifest.name) \(TerminalText.escaped(manifest.version)) (protocol \(manifest.protocolVersion)): "
                    + "\(count(.passed)) passed, \(count(.failed)) failed, \(count(.skipped)) skipped"
            }
            if !report.passed { throw ExitCode(65) }  // EX_DATAERR: the plugin answers wrongly
        }

        /// The manifest PLUGIN names, and a scratch directory to remove after (a built-in
        /// plugin installed to be tested out of process).
        private func resolve() async throws -> (PluginManifest, String?) {
            var file = plugin
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: file, isDirectory: &isDirectory) {
                if isDirectory.boolValue { file = (file as NSString).appendingPathComponent("plugin.json") }
                guard FileManager.default.fileExists(atPath: file) else {
                    Output.failure("\(plugin): no plugin manifest there (a plugin.json, a NAME.json, or a directory holding plugin.json)")
                    throw ExitCode(66)  // EX_NOINPUT
                }
                return (try PluginManifest.load(file), nil)
            }
            if let descriptor = BuiltinPlugins.registry.plugin(named: plugin) {
                // A directory of our own (mkdtemp: 0700, a fresh name), never one found by name.
                var template = Array((NSTemporaryDirectory() + "fieldhal-plugin-test-XXXXXX").utf8CString)
                guard let made = mkdtemp(&template) else {
                    Output.failure("cannot make a scratch directory to install \(plugin) in: \(SystemError.describe())")
                    throw ExitCode(73)
                }
                let scratch = String(cString: made)
                let external = PluginCommand.externalName(of: plugin)
                try Manifest.install(plugin, as: external, manifest: try Manifest.text(for: descriptor, name: external, executable: "run"),
                                     executable: "run", into: scratch + "/" + external)
                return (try PluginManifest.load(scratch + "/" + external + "/plugin.json"), scratch)
            }
            let discovery = PluginDirectories.discover(in: PluginDirectories.searched(), builtIn: Set(BuiltinPlugins.registry.all.map(\.name)))
            if let found = discovery.plugins.first(where: { $0.name == plugin }) { return (found, nil) }
            let names = (BuiltinPlugins.registry.all.map(\.name) + discovery.plugins.map(\.name)).sorted().joined(separator: ", ")
            Output.failure("no plugin \(plugin): not a manifest's path, and the plugins are \(names)")
            throw ExitCode(64)
        }

        /// `--set` as each capability's section, each value of its parameter's type.
        private func settings(for manifest: PluginManifest) throws -> [Capability: [String: ConfigValue]] {
            var parameters: [Capability: [String: ConfigValue]] = [:]
            for setting in settings {
                func refuse(_ why: String) -> ExitCode {
                    Output.failure("--set \(setting): \(why)")
                    return ExitCode(64)
                }
                guard let equals = setting.firstIndex(of: "="), let dot = setting[..<equals].firstIndex(of: ".") else {
                    throw refuse("write it CAPABILITY.KEY=VALUE, such as nfc.device=/dev/ttyUSB0")
                }
                let name = String(setting[..<dot]), key = String(setting[setting.index(after: dot)..<equals])
                let text = String(setting[setting.index(after: equals)...])
                guard let capability = Capability(rawValue: name), let specs = manifest.capabilities[capability] else {
                    throw refuse("the plugin declares no capability \(name) (it declares \(manifest.capabilities.keys.map(\.rawValue).sorted().joined(separator: ", ")))")
                }
                guard let spec = specs.first(where: { $0.name == key }) else {
                    throw refuse("\(name) takes no setting \(key) (it takes \(specs.map(\.name).joined(separator: ", ")))")
                }
                let value: ConfigValue
                switch spec.type {
                case "string": value = .string(text)
                case "integer":
                    guard let number = Int(text) else { throw refuse("\(key) is an integer") }
                    value = .integer(number)
                case "number":
                    guard let number = Double(text) else { throw refuse("\(key) is a number") }
                    value = .float(number)
                case "boolean":
                    guard let flag = Bool(text) else { throw refuse("\(key) is true or false") }
                    value = .boolean(flag)
                default:
                    throw refuse("\(key) is \(spec.type): write it in a configuration file; --set takes strings, integers, numbers and booleans")
                }
                parameters[capability, default: [:]][key] = value
            }
            return parameters
        }
    }

    struct Serve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Serve a built-in plugin over the plugin protocol on standard input and output.",
            discussion: """
            What an external plugin's executable runs to serve a built-in plugin out of \
            process (see `fieldhal plugin manifest`). It speaks JSON-RPC on standard input \
            and output (docs/plugin-protocol.md) and is started by FieldHAL, not by hand. \
            It runs the plugin executable installed beside this fieldhal (fieldhal-plugin): \
            the backends on FoundationEssentials without the rest of the CLI, 13 MiB resident \
            where the whole CLI takes 28. A build without it serves from this process. \
            Exit status 0 after the host's `exit` or the end of the input; 76 (EX_PROTOCOL) \
            when the host sent something that is not the protocol; 64 for a plugin this \
            build does not have; 77 when the plugin executable beside it may be changed by \
            others (it is refused, as a plugin directory's would be).
            """)
        @Argument(help: "The built-in plugin (fieldhal plugins lists them).") var plugin: String
        @Option(help: "The name to answer the handshake with: the manifest's (default: PLUGIN-process).") var name: String?

        func run() async throws {
            let descriptor = try PluginCommand.builtIn(plugin)
            let name = name ?? PluginCommand.externalName(of: plugin)
            if let executable = try PluginCommand.processExecutable() {
                // Replaces this process: the host's pipes and the pid stay as they are.
                let arguments = [executable, plugin, "--name", name]
                var pointers = arguments.map { strdup($0) } + [nil]
                execv(executable, &pointers)
                Output.failure("cannot run \(executable): \(SystemError.describe())")
                throw ExitCode(71)  // EX_OSERR
            }
            // No plugin executable in this build: the same serving, from this process.
            await PluginProcess.main(descriptor, version: FieldHALVersion.current, arguments: ["--name", name],
                                     program: "fieldhal plugin serve \(plugin)")
        }
    }
}
