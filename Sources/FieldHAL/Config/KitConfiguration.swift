#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TOMLKit

/// The parsed configuration file: which plugin serves each capability, with what
/// parameters, and the kit-wide settings. Everything is checked against the registry as it
/// is parsed, so a loaded configuration never names an unknown plugin, key or type.
///
/// ```toml
/// [kit]
/// state_dir = "/var/lib/fieldhal"
///
/// [gps]
/// plugin = "gpsd"
/// host = "localhost"
/// ```
public struct KitConfiguration: Sendable {
    /// One configured device: `[camera]` (named `default`) or `[camera.front]`.
    public struct Section: Sendable {
        public var capability: Capability
        /// The device's name within its capability: `front` for `[camera.front]`, `default`
        /// for a plain `[camera]`. What the API's `?device=` and the CLI's `--device` take.
        public var name: String
        public var plugin: String
        /// `enabled = false` keeps a section in the file but loads nothing for it.
        public var isEnabled: Bool
        public var parameters: PluginParameters
        /// What the flows use the device for: the file's `roles = [...]`, or the defaults
        /// (`DeviceRole.defaults`) when it does not say.
        public var roles: Set<DeviceRole>
    }

    /// Where the configuration came from, for messages.
    public var file: String
    /// The directory relative paths in parameters are resolved against.
    public var directory: String
    /// Every configured device, per capability, in the file's order: the first enabled one
    /// is the capability's default device (what a request that names none gets).
    public var devices: [Capability: [Section]]
    /// The default device of each configured capability.
    public var sections: [Capability: Section] { devices.compactMapValues { Self.defaultDevice(among: $0) } }

    static func defaultDevice(among devices: [Section]) -> Section? {
        devices.first(where: \.isEnabled) ?? devices.first
    }

    /// The configured device `name` of `capability`; nil names the default one.
    public func device(_ capability: Capability, named name: String? = nil) -> Section? {
        guard let name else { return sections[capability] }
        return devices[capability]?.first { $0.name == name }
    }

    /// Every configured device, capability by capability, each in the file's order.
    public var allDevices: [Section] { Capability.allCases.flatMap { devices[$0] ?? [] } }
    /// Non-capability tables (`[kit]`, and those later flows add), by table name.
    public var settings: [String: PluginParameters]

    /// The default location, as a packaged install has it.
    public static let defaultPath = "/etc/fieldhal/fieldhal.toml"

    /// The kit-wide settings the core itself understands.
    public static let coreSettings: [String: [ParameterSpec]] = [
        "kit": [
            ParameterSpec("state_dir", .string, help: "state directory (default /var/lib/fieldhal)"),
            ParameterSpec("name", .string, help: "a name for this kit, shown by `fieldhal status`"),
        ],
    ]

    /// Reads and checks the file at `path`.
    public static func load(path: String, registry: PluginRegistry,
                            settings: [String: [ParameterSpec]] = coreSettings) throws(ConfigError) -> KitConfiguration {
        let text = try ConfigFile.read(path)
        return try parse(text, file: path, directory: FilePaths.directory(of: path),
                         registry: registry, settings: settings)
    }

    /// Parses and checks configuration text. `file` labels messages.
    public static func parse(_ text: String, file: String, directory: String, registry: PluginRegistry,
                             settings settingSpecs: [String: [ParameterSpec]] = coreSettings) throws(ConfigError) -> KitConfiguration {
        try TOMLPreflight.check(text, file: file)
        let root: [String: ConfigValue]
        do {
            root = try ConfigValue.document(text)
        } catch let error as TOMLParseError {
            throw ConfigError(file: file, line: error.source.begin.line, message: "not valid TOML: \(error.description)")
        } catch {
            throw ConfigError(file: file, message: "not valid TOML: \(error)")
        }
        let checker = Checker(file: file, locator: TOMLKeyLocator(source: text))
        var configuration = KitConfiguration(file: file, directory: directory, devices: [:], settings: [:])
        configuration.source = text
        for key in root.keys.sorted() {
            guard case .table(let table)? = root[key] else {
                throw checker.error([key], "expected a table such as [\(key)], found \(root[key]!.typeName)")
            }
            if let capability = Capability(rawValue: key) {
                configuration.devices[capability] = try checker.devices(capability, table, registry: registry)
            } else if let specs = settingSpecs[key] {
                configuration.settings[key] = PluginParameters(try checker.check(table, against: specs, at: [key]))
            } else {
                let known = (Capability.allCases.map(\.rawValue) + settingSpecs.keys.sorted()).joined(separator: ", ")
                throw checker.error([key], "unknown section; known sections are \(known)")
            }
        }
        return configuration
    }

    /// The tables that are not capabilities (`[kit]`, `[api]`, …), read but not checked: for
    /// a program that only needs a setting or two and must not pay for the plugin registry
    /// (`fieldhal-front` finding the daemon's socket). Anything else checks with `parse`.
    public static func settingTables(_ text: String, file: String) throws(ConfigError) -> [String: PluginParameters] {
        try TOMLPreflight.check(text, file: file)
        let root: [String: ConfigValue]
        do {
            root = try ConfigValue.document(text)
        } catch {
            throw ConfigError(file: file, message: "not valid TOML: \(error)")
        }
        var tables: [String: PluginParameters] = [:]
        for (key, value) in root where Capability(rawValue: key) == nil {
            if case .table(let table) = value { tables[key] = PluginParameters(table) }
        }
        return tables
    }

    /// The text the configuration was read from, to find a key's line in later errors.
    var source = ""

    /// A configuration error about `key` (["transrify", "production_url"]) found after the
    /// file was read: named by file, line and key as the reader's own errors are (exit 78).
    public func error(at key: [String], _ message: String) -> ConfigError {
        ConfigError(file: file, key: key.joined(separator: "."), line: TOMLKeyLocator(source: source).line(of: key), message: message)
    }

    /// The configured state directory, if the file sets one.
    public var stateDirectory: String? { settings["kit"]?.string("state_dir") }
}

/// Checks tables against parameter specs, producing errors with file and line.
private struct Checker {
    let file: String
    let locator: TOMLKeyLocator

    func error(_ path: [String], _ message: String) -> ConfigError {
        ConfigError(file: file, key: path.joined(separator: "."), line: locator.line(of: path), message: message)
    }

    /// A capability's table as its devices: a plain `[camera]` is one device named
    /// `default`; a table of tables (`[camera.front]`, `[camera.rear]`) is one device each,
    /// in the file's order.
    func devices(_ capability: Capability, _ table: [String: ConfigValue],
                 registry: PluginRegistry) throws(ConfigError) -> [KitConfiguration.Section] {
        let named = table.filter { if case .table = $0.value { true } else { false } }
        var devices: [KitConfiguration.Section]
        var rolesGiven: [Bool]
        if named.isEmpty || named.count < table.count {
            // No parameter is a table, so a table among a plain section's keys is a device
            // section nested in it: which of the two was meant cannot be guessed.
            if let nested = named.keys.sorted().first {
                throw error([capability.rawValue, nested],
                            "a device section inside a plain [\(capability)]; either keep one [\(capability)], or name every \(capability) device: [\(capability).\(nested)] and [\(capability).<name>], each with its own plugin")
            }
            devices = [try section(capability, name: KitConfiguration.defaultDeviceName, table, at: [capability.rawValue], registry: registry)]
            rolesGiven = [table["roles"] != nil]
        } else {
            devices = []
            rolesGiven = []
            // The file's order decides the default device; the parsed table has none.
            let ordered = named.keys.sorted {
                (locator.line(of: [capability.rawValue, $0]) ?? .max, $0) < (locator.line(of: [capability.rawValue, $1]) ?? .max, $1)
            }
            for name in ordered {
                guard case .table(let device) = named[name]! else { continue }
                if let problem = KitConfiguration.problem(withDeviceName: name) {
                    throw error([capability.rawValue, name], problem)
                }
                devices.append(try section(capability, name: name, device, at: [capability.rawValue, name], registry: registry))
                rolesGiven.append(device["roles"] != nil)
            }
        }
        // Roles the file leaves out take the defaults: the default emulator offers the duress tag.
        let defaultName = KitConfiguration.defaultDevice(among: devices)?.name
        for index in devices.indices where !rolesGiven[index] {
            devices[index].roles = DeviceRole.defaults(for: capability, isDefault: devices[index].name == defaultName)
        }
        return devices
    }

    func section(_ capability: Capability, name: String, _ table: [String: ConfigValue], at path: [String],
                 registry: PluginRegistry) throws(ConfigError) -> KitConfiguration.Section {
        guard let pluginValue = table["plugin"] else {
            throw error(path + ["plugin"], "missing; say which plugin serves \(capability): \(registry.names(providing: capability).joined(separator: ", "))")
        }
        guard case .string(let pluginName) = pluginValue else {
            throw error(path + ["plugin"], "expected a string, found \(pluginValue.typeName) \(pluginValue)")
        }
        guard let plugin = registry.plugin(named: pluginName) else {
            let known = registry.all.map(\.name).joined(separator: ", ")
            throw error(path + ["plugin"], "unknown plugin \"\(pluginName)\"; this build has: \(known)")
        }
        guard let specs = plugin.capabilities[capability] else {
            throw error(path + ["plugin"], "plugin \"\(pluginName)\" does not provide \(capability); plugins that do: \(registry.names(providing: capability).joined(separator: ", "))")
        }
        var enabled = true
        if let value = table["enabled"] {
            guard case .boolean(let flag) = value else {
                throw error(path + ["enabled"], "expected true or false, found \(value.typeName) \(value)")
            }
            enabled = flag
        }
        var roles: Set<DeviceRole> = []
        if let value = table["roles"] {
            guard case .array(let items) = value else {
                throw error(path + ["roles"], "expected a list such as [\"evidence\"], found \(value.typeName) \(value)")
            }
            let allowed = DeviceRole.allowed(for: capability)
            for item in items {
                guard case .string(let word) = item, let role = DeviceRole(rawValue: word), allowed.contains(role) else {
                    let choices = allowed.map(\.rawValue).sorted().joined(separator: ", ")
                    throw error(path + ["roles"], "\(item) is not a role a \(capability) device can have; "
                                + (choices.isEmpty ? "a \(capability) device has no roles: leave roles out" : "roles: \(choices), or [] for none"))
                }
                roles.insert(role)
            }
        }
        var parameters = table
        parameters["plugin"] = nil
        parameters["enabled"] = nil
        parameters["roles"] = nil
        let checked = try check(parameters, against: specs, at: path)
        return KitConfiguration.Section(capability: capability, name: name, plugin: pluginName, isEnabled: enabled,
                                        parameters: PluginParameters(checked), roles: roles)
    }

    private func outOfRange(_ path: [String], _ value: ConfigValue, _ range: ClosedRange<Double>) -> ConfigError {
        func text(_ bound: Double) -> String { bound == bound.rounded() && abs(bound) < 1e15 ? String(Int(bound)) : String(bound) }
        return error(path, "\(value) is out of range: from \(text(range.lowerBound)) to \(text(range.upperBound))")
    }

    func check(_ table: [String: ConfigValue], against specs: [ParameterSpec],
               at path: [String]) throws(ConfigError) -> [String: ConfigValue] {
        for key in table.keys.sorted() where !specs.contains(where: { $0.name == key }) {
            let known = specs.map(\.name).sorted().joined(separator: ", ")
            throw error(path + [key], "unknown key; " + (known.isEmpty ? "this section takes no parameters" : "known keys are \(known)"))
        }
        var checked = table
        for spec in specs {
            guard let value = table[spec.name] else {
                if spec.isRequired { throw error(path + [spec.name], "missing; \(spec.help)") }
                continue
            }
            checked[spec.name] = try check(value, against: spec, at: path + [spec.name])
        }
        return checked
    }

    private func check(_ value: ConfigValue, against spec: ParameterSpec, at path: [String]) throws(ConfigError) -> ConfigValue {
        let wrongType = error(path, "expected \(spec.type), found \(value.typeName) \(value)")
        switch (spec.type, value) {
        case (.string, .string), (.boolean, .boolean):
            return value
        case (.integer, .integer(let number)), (.number, .integer(let number)):
            if let range = spec.range, !range.contains(Double(number)) { throw outOfRange(path, value, range) }
            return value
        case (.number, .float(let number)):
            // nan, inf and 1e308 parse as TOML floats; no parameter means any of them.
            guard number.isFinite else { throw error(path, "expected a finite number, found \(value)") }
            if let range = spec.range, !range.contains(number) { throw outOfRange(path, value, range) }
            return value
        case (.strings, .array(let items)):
            for (index, item) in items.enumerated() {
                guard case .string = item else {
                    throw error(path, "item \(index + 1): expected a string, found \(item.typeName) \(item)")
                }
            }
            return value
        case (.records(let fields), .array(let items)):
            var checkedItems: [ConfigValue] = []
            for (index, item) in items.enumerated() {
                guard case .table(let table) = item else {
                    throw error(path, "item \(index + 1): expected a table, found \(item.typeName) \(item)")
                }
                // Name the item in messages: `gps.track[3].lat`.
                var itemPath = path
                itemPath[itemPath.count - 1] += "[\(index + 1)]"
                checkedItems.append(.table(try check(table, against: fields, at: itemPath)))
            }
            return .array(checkedItems)
        default:
            throw wrongType
        }
    }
}

extension ConfigValue {
    /// The document's top-level table as values of our own. TOMLKit 0.6 never frees the
    /// document it parses (its TOMLTable has no deinit): about 11 KiB per load of a kit's
    /// file, which a daemon reloading for months would keep (issue 23's soak found it with
    /// heaptrack). `clear()` frees every node once the values are copied out; what still
    /// leaks is TOMLKit's key lists (a few hundred bytes per load).
    static func document(_ text: String) throws -> [String: ConfigValue] {
        let table = try TOMLTable(string: text)
        defer { table.clear() }
        return convert(table)
    }

    static func convert(_ table: TOMLTable) -> [String: ConfigValue] {
        var result: [String: ConfigValue] = [:]
        for (key, value) in table { result[key] = convert(value) }
        return result
    }

    static func convert(_ value: any TOMLValueConvertible) -> ConfigValue {
        switch value.type {
        case .table: .table(convert(value.table!))
        case .array: .array(value.array!.map { convert($0) })
        case .string: .string(value.string!)
        case .int: .integer(value.int!)
        case .double: .float(value.double!)
        case .bool: .boolean(value.bool!)
        // Not read: TOMLKit's accessors for dates and times leak the C struct they return
        // (found by fuzz/run under LeakSanitizer), and no parameter takes one: the error that
        // follows names the key and the line.
        case .date, .time, .dateTime: .dateTime("")
        }
    }
}

extension PluginParameters {
    /// Values checked against `specs` as a configuration file's section is (types, required
    /// keys, no unknown keys), for values that reach a plugin another way: an external
    /// plugin's `open` checks its parameters again, since its manifest may disagree with it.
    /// `section` names them in errors (`gps`), `source` says where they came from.
    public static func checked(_ values: [String: ConfigValue], against specs: [ParameterSpec], section: String,
                               source: String) throws(ConfigError) -> PluginParameters {
        let checker = Checker(file: source, locator: TOMLKeyLocator(source: ""))
        return PluginParameters(try checker.check(values, against: specs, at: [section]))
    }
}
