/// What a plugin's `open` receives besides its parameters.
public struct PluginContext: Sendable {
    /// The directory of the configuration file, against which relative paths in
    /// parameters (an NMEA log, a WAV file) are resolved.
    public var configDirectory: String
    /// FieldHAL's state directory, for plugins that keep state.
    public var stateDirectory: String

    public init(configDirectory: String, stateDirectory: String) {
        self.configDirectory = configDirectory
        self.stateDirectory = stateDirectory
    }

    /// `path` as given when absolute, else relative to the configuration's directory.
    public func resolve(path: String) -> String {
        path.hasPrefix("/") ? path : configDirectory + "/" + path
    }
}

/// A backend plugin as it registers itself: a name, the capabilities it provides with the
/// parameters each takes, and how to open one.
public struct PluginDescriptor: Sendable {
    public typealias Opener = @Sendable (Capability, PluginParameters, PluginContext) async throws -> CapabilityProvider

    public var name: String
    /// One line for `fieldhal plugins`.
    public var summary: String
    public var capabilities: [Capability: [ParameterSpec]]
    public var open: Opener
    /// What of this plugin's kind the machine has (`fieldhal detect`); nil for plugins that
    /// find nothing (the fake). Never opens a device another program holds for long, never
    /// waits long: a detection is a look, not a claim.
    public var detect: Detector?

    public typealias Detector = @Sendable (DetectionOptions) async -> [DetectedDevice]

    /// Where the device a section configures is now (nil from the closure: this plugin does
    /// not follow that device), so that a daemon can follow it as it comes and goes. nil for
    /// plugins whose devices are followed by a service of their own (gpsd, fprintd) or are
    /// simulated. Like `detect`, a look: it opens nothing another program may hold.
    public var locate: Locator?

    public typealias Locator = @Sendable (Capability, PluginParameters, PluginContext) async -> DevicePresence?

    public init(name: String, summary: String, capabilities: [Capability: [ParameterSpec]], open: @escaping Opener,
                detect: Detector? = nil, locate: Locator? = nil) {
        self.name = name
        self.summary = summary
        self.capabilities = capabilities
        self.open = open
        self.detect = detect
        self.locate = locate
    }
}

/// The plugins compiled into this build, by name.
public struct PluginRegistry: Sendable {
    private var plugins: [String: PluginDescriptor] = [:]

    public init(_ plugins: [PluginDescriptor]) {
        for plugin in plugins {
            precondition(self.plugins[plugin.name] == nil, "two plugins named \(plugin.name)")
            self.plugins[plugin.name] = plugin
        }
    }

    public func plugin(named name: String) -> PluginDescriptor? { plugins[name] }

    /// All plugins, sorted by name.
    public var all: [PluginDescriptor] { plugins.values.sorted { $0.name < $1.name } }

    /// The names of plugins that provide `capability`, for error messages.
    public func names(providing capability: Capability) -> [String] {
        all.filter { $0.capabilities[capability] != nil }.map(\.name)
    }
}
