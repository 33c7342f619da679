/// How one capability came out of loading the kit.
public struct CapabilityStatus: Sendable, Equatable, Codable {
    public enum State: String, Sendable, Codable {
        case available
        case unavailable
        /// No section for it in the configuration, or `enabled = false`.
        case notConfigured = "not-configured"
    }

    public var capability: Capability
    public var plugin: String?
    /// Where the device is, as its plugin names it (`/dev/video0`); nil until it opens.
    public var device: String?
    public var state: State
    /// Why it is not available, in words a technician can act on.
    public var reason: String?
    /// The device's name in the configuration (`front` for `[camera.front]`, `default` for a
    /// plain `[camera]`); nil for a capability with no section.
    public var name: String?
    /// What the flows use it for (`evidence`, `ack`, `duress-tag`).
    public var roles: [DeviceRole]?
    /// Whether a request that names no device gets this one.
    public var isDefault: Bool?
    /// What the device said it is when it was last opened (vendor, model, serial, stable
    /// link), kept while it is unplugged; nil when it never opened or its backend cannot tell.
    public var identity: DeviceIdentity?

    public init(capability: Capability, plugin: String?, device: String?, state: State, reason: String?,
                name: String? = nil, roles: [DeviceRole]? = nil, isDefault: Bool? = nil, identity: DeviceIdentity? = nil) {
        self.capability = capability
        self.plugin = plugin
        self.device = device
        self.state = state
        self.reason = reason
        self.name = name
        self.roles = roles
        self.isDefault = isDefault
        self.identity = identity
    }

    public var isAvailable: Bool { state == .available }

    /// How a message names the device: `camera` alone for a kit's only camera, `camera front`
    /// for one of several.
    public var subject: String {
        guard let name, name != KitConfiguration.defaultDeviceName else { return capability.rawValue }
        return "\(capability) \(name)"
    }
}

/// One configured device: its capability and its name there.
public struct DeviceKey: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var capability: Capability
    public var name: String

    public init(_ capability: Capability, _ name: String) {
        self.capability = capability
        self.name = name
    }

    public static func < (lhs: DeviceKey, rhs: DeviceKey) -> Bool {
        (lhs.capability, lhs.name) < (rhs.capability, rhs.name)
    }

    public var description: String { "\(capability).\(name)" }
}

/// The loaded kit: every configured device opened, and a status for each.
///
/// Loading never stops at the first failure: each device is opened on its own, and one
/// that fails is reported unavailable with its reason while the rest load. A capability
/// may have several devices (`[camera.front]`, `[camera.rear]`); what names none gets the
/// capability's default device, the first enabled one in the file.
public final class Kit: Sendable {
    private let providers: [DeviceKey: CapabilityProvider]
    /// Every configured device's status, capability by capability in `Capability.allCases`
    /// order, each capability's devices in the file's order.
    public let devices: [CapabilityStatus]
    /// The configuration the kit was loaded from.
    public let configurationFile: String

    /// How long a plugin may take to open its device before it is reported unavailable.
    public static let openTimeout: Duration = .seconds(15)

    private init(providers: [DeviceKey: CapabilityProvider], devices: [CapabilityStatus], configurationFile: String) {
        self.providers = providers
        self.devices = devices
        self.configurationFile = configurationFile
    }

    /// One status per capability, in `Capability.allCases` order: its default device's, or
    /// why it has none.
    public var statuses: [CapabilityStatus] { Capability.allCases.map { status(of: $0) } }

    /// Opens every enabled device of `configuration`, concurrently, each within
    /// `openTimeout`. `only` restricts loading to some capabilities (a CLI command that
    /// needs the camera does not open the NFC reader).
    /// `devices` restricts it to those devices (one that came back, opened alone, never its
    /// siblings the daemon holds).
    public static func load(_ configuration: KitConfiguration, registry: PluginRegistry, context: PluginContext,
                            only: Set<Capability>? = nil, devices: Set<DeviceKey>? = nil,
                            openTimeout: Duration = Kit.openTimeout) async -> Kit {
        var statuses: [DeviceKey: CapabilityStatus] = [:]
        var providers: [DeviceKey: CapabilityProvider] = [:]
        var order: [DeviceKey] = []
        await withTaskGroup(of: (DeviceKey, CapabilityStatus, CapabilityProvider?).self) { group in
            for capability in Capability.allCases {
                let defaultName = configuration.sections[capability]?.name
                guard let sections = configuration.devices[capability], !sections.isEmpty else {
                    let key = DeviceKey(capability, "")
                    order.append(key)
                    statuses[key] = CapabilityStatus(capability: capability, plugin: nil, device: nil, state: .notConfigured,
                                                     reason: "no [\(capability)] section in \(configuration.file)")
                    continue
                }
                for section in sections {
                    let key = DeviceKey(capability, section.name)
                    order.append(key)
                    let unloaded = CapabilityStatus(capability: capability, plugin: section.plugin, device: nil, state: .notConfigured,
                                                    reason: nil, name: section.name, roles: section.roles.sorted(),
                                                    isDefault: section.name == defaultName)
                    guard section.isEnabled, only?.contains(capability) ?? true, devices?.contains(key) ?? true else {
                        var status = unloaded
                        status.reason = section.isEnabled ? "not loaded for this command" : "enabled = false in \(configuration.file)"
                        statuses[key] = status
                        continue
                    }
                    // The configuration was checked against this registry: the plugin exists.
                    guard let plugin = registry.plugin(named: section.plugin) else { continue }
                    group.addTask {
                        let (status, provider) = await open(section, with: plugin, context: context, timeout: openTimeout)
                        var described = unloaded
                        described.device = status.device
                        described.state = status.state
                        described.reason = status.reason
                        described.identity = status.identity
                        return (key, described, provider)
                    }
                }
            }
            for await (key, status, provider) in group {
                statuses[key] = status
                providers[key] = provider
            }
        }
        return Kit(providers: providers, devices: order.compactMap { statuses[$0] }, configurationFile: configuration.file)
    }

    private static func open(_ section: KitConfiguration.Section, with plugin: PluginDescriptor, context: PluginContext,
                             timeout: Duration) async -> (CapabilityStatus, CapabilityProvider?) {
        let capability = section.capability
        do {
            let provider = try await withDeadline(timeout, subject: "\(capability)", waitingFor: "device") {
                try await plugin.open(capability, section.parameters, context)
            }
            guard provider.capability == capability else {
                await provider.device.close()
                return (CapabilityStatus(capability: capability, plugin: plugin.name, device: nil, state: .unavailable,
                                         reason: "\(plugin.name) plugin: opened \(provider.capability) instead"), nil)
            }
            return (CapabilityStatus(capability: capability, plugin: plugin.name, device: provider.device.deviceName,
                                     state: .available, reason: nil, identity: provider.device.identity), provider)
        } catch {
            return (CapabilityStatus(capability: capability, plugin: plugin.name, device: nil,
                                     state: .unavailable, reason: "\(plugin.name) plugin: \(error)"), nil)
        }
    }

    /// The capability's default device's status, or why it has none.
    public func status(of capability: Capability) -> CapabilityStatus {
        let ofKind = devices.filter { $0.capability == capability }
        return ofKind.first { $0.isDefault == true } ?? ofKind.first!
    }

    /// The status of the device `name` of `capability` (nil: the default one), or nil when
    /// the configuration has no such device.
    public func status(of capability: Capability, named name: String?) -> CapabilityStatus? {
        guard let name else { return status(of: capability) }
        return devices.first { $0.capability == capability && $0.name == name }
    }

    /// The names of the configured devices of `capability`, in the file's order.
    public func names(of capability: Capability) -> [String] {
        devices.filter { $0.capability == capability }.compactMap(\.name)
    }

    /// The key of the device `name` of `capability` (nil: the default one), or the error a
    /// caller who named a device the kit does not have should see.
    public func key(_ capability: Capability, named name: String?) throws -> DeviceKey {
        guard let status = status(of: capability, named: name), let found = status.name else {
            let names = names(of: capability)
            if let name {
                throw FieldHALError(.noSuchDevice, subject: "\(capability)",
                                    detail: "this kit has no \(capability) device named \"\(TerminalText.escaped(name))\"",
                                    advice: names.isEmpty ? "add a [\(capability).\(name)] section with plugin = \"…\" to \(configurationFile)"
                                        : "its \(capability) devices: \(names.joined(separator: ", "))")
            }
            throw FieldHALError(.notConfigured, subject: "\(capability)", detail: status(of: capability).reason ?? "not configured",
                                advice: "add a [\(capability)] section with plugin = \"…\" to \(configurationFile)")
        }
        return DeviceKey(capability, found)
    }

    private func provider(_ capability: Capability, named name: String? = nil) throws -> CapabilityProvider {
        let key = try key(capability, named: name)
        if let provider = providers[key] { return provider }
        let status = status(of: capability, named: key.name)!
        switch status.state {
        case .notConfigured:
            throw FieldHALError(.notConfigured, subject: status.subject, detail: status.reason ?? "not configured",
                                advice: "add a [\(capability)] section with plugin = \"…\" to \(configurationFile)")
        default:
            throw FieldHALError(.unavailable, subject: status.subject, detail: status.reason ?? "unavailable")
        }
    }

    public func nfcReader(named name: String? = nil) throws -> any NFCReader {
        guard case .nfcReader(let device) = try provider(.nfcReader, named: name) else { preconditionFailure("kit invariant") }
        return device
    }

    public func nfcEmulator(named name: String? = nil) throws -> any NFCTagEmulator {
        guard case .nfcEmulator(let device) = try provider(.nfcEmulator, named: name) else { preconditionFailure("kit invariant") }
        return device
    }

    public func location(named name: String? = nil) throws -> any LocationProvider {
        guard case .location(let device) = try provider(.location, named: name) else { preconditionFailure("kit invariant") }
        return device
    }

    public func camera(named name: String? = nil) throws -> any Camera {
        guard case .camera(let device) = try provider(.camera, named: name) else { preconditionFailure("kit invariant") }
        return device
    }

    public func microphone(named name: String? = nil) throws -> any Microphone {
        guard case .microphone(let device) = try provider(.microphone, named: name) else { preconditionFailure("kit invariant") }
        return device
    }

    public func speaker(named name: String? = nil) throws -> any Speaker {
        guard case .speaker(let device) = try provider(.speaker, named: name) else { preconditionFailure("kit invariant") }
        return device
    }

    public func haptics(named name: String? = nil) throws -> any HapticsEngine {
        guard case .haptics(let device) = try provider(.haptics, named: name) else { preconditionFailure("kit invariant") }
        return device
    }

    public func biometrics(named name: String? = nil) throws -> any BiometricAuthenticator {
        guard case .biometrics(let device) = try provider(.biometrics, named: name) else { preconditionFailure("kit invariant") }
        return device
    }

    /// Every fingerprint sensor that is open, in the file's order: the lock's fingerprint
    /// unlock waits on all of them at once.
    public func fingerprintSensors() -> [any BiometricAuthenticator] {
        names(of: .biometrics).compactMap { try? biometrics(named: $0) }
    }

    /// The available devices of `capability` that carry `role`, in the file's order.
    public func available(_ capability: Capability, withRole role: DeviceRole) -> [CapabilityStatus] {
        devices.filter { $0.capability == capability && $0.isAvailable && ($0.roles ?? []).contains(role) }
    }

    /// The names of the devices a flow uses for `role`: those configured that carry it
    /// (available or not: an unavailable one then says why), the default first when it is one.
    public func names(of capability: Capability, withRole role: DeviceRole) -> [String] {
        let found = devices.filter { $0.capability == capability && $0.state != .notConfigured && ($0.roles ?? []).contains(role) }
        return (found.filter { $0.isDefault == true } + found.filter { $0.isDefault != true }).compactMap(\.name)
    }

    /// The cameras a duress capture records (role `evidence`), the default first.
    public func evidenceCameras() -> [any Camera] {
        names(of: .camera, withRole: .evidence).compactMap { try? camera(named: $0) }
    }

    /// The microphones a duress capture records (role `evidence`), the default first.
    public func evidenceMicrophones() -> [any Microphone] {
        names(of: .microphone, withRole: .evidence).compactMap { try? microphone(named: $0) }
    }

    /// The open device `key` names, if it opened.
    public func device(of key: DeviceKey) -> (any Device)? { providers[key]?.device }

    /// The status of one configured device, or nil when the configuration has none such.
    public func status(of device: DeviceKey) -> CapabilityStatus? {
        devices.first { $0.capability == device.capability && $0.name == device.name }
    }

    /// This kit with `keys`' devices as `other` has them (devices that came back, opened on
    /// their own), and the providers this kit had for them, for the caller to close. Only the
    /// providers taken move: `other` must not be closed as a whole afterwards.
    public func replacing(_ keys: Set<DeviceKey>, from other: Kit) -> (kit: Kit, replaced: [CapabilityProvider]) {
        var providers = self.providers
        var replaced: [CapabilityProvider] = []
        var devices = self.devices
        for key in keys {
            guard let theirs = other.status(of: key),
                  let index = devices.firstIndex(where: { $0.capability == key.capability && $0.name == key.name }) else { continue }
            if let old = providers.removeValue(forKey: key) { replaced.append(old) }
            providers[key] = other.providers[key]
            devices[index] = theirs
        }
        return (Kit(providers: providers, devices: devices, configurationFile: configurationFile), replaced)
    }

    /// This kit without `key`'s device, unavailable for `reason` (a device that went away),
    /// and the provider it had, for the caller to close.
    public func removing(_ key: DeviceKey, reason: String) -> (kit: Kit, removed: CapabilityProvider?) {
        var providers = self.providers
        let removed = providers.removeValue(forKey: key)
        let devices = self.devices.map { status in
            guard status.capability == key.capability, status.name == key.name else { return status }
            var gone = status
            gone.state = .unavailable
            gone.reason = reason
            return gone
        }
        return (Kit(providers: providers, devices: devices, configurationFile: configurationFile), removed)
    }

    /// The providers of `other` that `replacing` did not take, closed: `keys` are the ones
    /// it took.
    public func closing(allBut keys: Set<DeviceKey>) async {
        for (key, provider) in providers where !keys.contains(key) { await provider.device.close() }
    }

    /// Closes every opened device.
    public func close() async {
        for provider in providers.values { await provider.device.close() }
    }
}
