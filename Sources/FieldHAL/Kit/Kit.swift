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
    public var device: String?
    public var state: State
    /// Why it is not available, in words a technician can act on.
    public var reason: String?

    public var isAvailable: Bool { state == .available }
}

/// The loaded kit: one opened device per configured capability, and a status for all.
///
/// Loading never stops at the first failure: each capability is opened on its own, and
/// one that fails is reported unavailable with its reason while the rest load.
public final class Kit: Sendable {
    private let providers: [Capability: CapabilityProvider]
    /// One status per capability, in `Capability.allCases` order.
    public let statuses: [CapabilityStatus]
    /// The configuration the kit was loaded from.
    public let configurationFile: String

    /// How long a plugin may take to open its device before it is reported unavailable.
    public static let openTimeout: Duration = .seconds(15)

    private init(providers: [Capability: CapabilityProvider], statuses: [CapabilityStatus], configurationFile: String) {
        self.providers = providers
        self.statuses = statuses
        self.configurationFile = configurationFile
    }

    /// Opens every enabled capability of `configuration`, concurrently, each within
    /// `openTimeout`. `only` restricts loading to some capabilities (a CLI command that
    /// needs the camera does not open the NFC reader).
    public static func load(_ configuration: KitConfiguration, registry: PluginRegistry, context: PluginContext,
                            only: Set<Capability>? = nil, openTimeout: Duration = Kit.openTimeout) async -> Kit {
        var statuses: [Capability: CapabilityStatus] = [:]
        var providers: [Capability: CapabilityProvider] = [:]
        await withTaskGroup(of: (Capability, CapabilityStatus, CapabilityProvider?).self) { group in
            for capability in Capability.allCases {
                guard let section = configuration.sections[capability], section.isEnabled,
                      only?.contains(capability) ?? true else {
                    let section = configuration.sections[capability]
                    statuses[capability] = CapabilityStatus(
                        capability: capability, plugin: section?.plugin, device: nil, state: .notConfigured,
                        reason: section == nil ? "no [\(capability)] section in \(configuration.file)"
                            : section!.isEnabled ? "not loaded for this command" : "enabled = false in \(configuration.file)")
                    continue
                }
                // The configuration was checked against this registry: the plugin exists.
                guard let plugin = registry.plugin(named: section.plugin) else { continue }
                group.addTask {
                    await open(capability, with: plugin, section: section, context: context, timeout: openTimeout)
                }
            }
            for await (capability, status, provider) in group {
                statuses[capability] = status
                providers[capability] = provider
            }
        }
        return Kit(providers: providers, statuses: Capability.allCases.compactMap { statuses[$0] },
                   configurationFile: configuration.file)
    }

    private static func open(_ capability: Capability, with plugin: PluginDescriptor, section: KitConfiguration.Section,
                             context: PluginContext, timeout: Duration) async -> (Capability, CapabilityStatus, CapabilityProvider?) {
        do {
            let provider = try await withDeadline(timeout, subject: "\(capability)", waitingFor: "device") {
                try await plugin.open(capability, section.parameters, context)
            }
            guard provider.capability == capability else {
                await provider.device.close()
                return (capability, CapabilityStatus(capability: capability, plugin: plugin.name, device: nil, state: .unavailable,
                                                     reason: "\(plugin.name) plugin: opened \(provider.capability) instead"), nil)
            }
            return (capability, CapabilityStatus(capability: capability, plugin: plugin.name,
                                                 device: provider.device.deviceName, state: .available, reason: nil), provider)
        } catch {
            return (capability, CapabilityStatus(capability: capability, plugin: plugin.name, device: nil,
                                                 state: .unavailable, reason: "\(plugin.name) plugin: \(error)"), nil)
        }
    }

    public func status(of capability: Capability) -> CapabilityStatus {
        statuses.first { $0.capability == capability }!
    }

    private func provider(_ capability: Capability) throws -> CapabilityProvider {
        if let provider = providers[capability] { return provider }
        let status = status(of: capability)
        switch status.state {
        case .notConfigured:
            throw FieldHALError(.notConfigured, subject: "\(capability)", detail: status.reason ?? "not configured",
                                advice: "add a [\(capability)] section with plugin = \"…\" to \(configurationFile)")
        default:
            throw FieldHALError(.unavailable, subject: "\(capability)", detail: status.reason ?? "unavailable")
        }
    }

    public func nfcReader() throws -> any NFCReader {
        guard case .nfcReader(let device) = try provider(.nfcReader) else { preconditionFailure("kit invariant") }
        return device
    }

    public func nfcEmulator() throws -> any NFCTagEmulator {
        guard case .nfcEmulator(let device) = try provider(.nfcEmulator) else { preconditionFailure("kit invariant") }
        return device
    }

    public func location() throws -> any LocationProvider {
        guard case .location(let device) = try provider(.location) else { preconditionFailure("kit invariant") }
        return device
    }

    public func camera() throws -> any Camera {
        guard case .camera(let device) = try provider(.camera) else { preconditionFailure("kit invariant") }
        return device
    }

    public func microphone() throws -> any Microphone {
        guard case .microphone(let device) = try provider(.microphone) else { preconditionFailure("kit invariant") }
        return device
    }

    public func speaker() throws -> any Speaker {
        guard case .speaker(let device) = try provider(.speaker) else { preconditionFailure("kit invariant") }
        return device
    }

    public func haptics() throws -> any HapticsEngine {
        guard case .haptics(let device) = try provider(.haptics) else { preconditionFailure("kit invariant") }
        return device
    }

    public func biometrics() throws -> any BiometricAuthenticator {
        guard case .biometrics(let device) = try provider(.biometrics) else { preconditionFailure("kit invariant") }
        return device
    }

    /// This kit with `capabilities` as `other` has them (devices that came back, opened on
    /// their own), and the providers this kit had for them, for the caller to close. Only
    /// the providers taken move: `other` must not be closed as a whole afterwards.
    public func replacing(_ capabilities: Set<Capability>, from other: Kit) -> (kit: Kit, replaced: [CapabilityProvider]) {
        var providers = self.providers
        var replaced: [CapabilityProvider] = []
        for capability in capabilities {
            if let old = providers.removeValue(forKey: capability) { replaced.append(old) }
            providers[capability] = other.providers[capability]
        }
        let statuses = self.statuses.map { capabilities.contains($0.capability) ? other.status(of: $0.capability) : $0 }
        return (Kit(providers: providers, statuses: statuses, configurationFile: configurationFile), replaced)
    }

    /// This kit without `capability`'s device, unavailable for `reason` (a device that went
    /// away), and the provider it had, for the caller to close.
    public func removing(_ capability: Capability, reason: String) -> (kit: Kit, removed: CapabilityProvider?) {
        var providers = self.providers
        let removed = providers.removeValue(forKey: capability)
        let statuses = self.statuses.map { status in
            guard status.capability == capability else { return status }
            return CapabilityStatus(capability: capability, plugin: status.plugin, device: status.device, state: .unavailable, reason: reason)
        }
        return (Kit(providers: providers, statuses: statuses, configurationFile: configurationFile), removed)
    }

    /// Closes every opened device.
    public func close() async {
        for provider in providers.values { await provider.device.close() }
    }
}
