#if canImport(Glibc)
import Glibc
#endif

/// Where a configured device is now, as its plugin finds it: what a daemon that follows
/// devices as they come and go (udev's hotplug events) compares before and after each event.
///
/// The configuration names a device by what survives a replug (a `/dev/v4l/by-id/…` link, an
/// ALSA card id, the first force-feedback device); the node it resolves to (`/dev/video2`,
/// `/dev/snd/controlC1`) is what udev's events name, and may differ after a replug.
public struct DevicePresence: Sendable, Equatable {
    /// The udev subsystems whose events may concern the device ("video4linux", "sound", …).
    public var subsystems: Set<String>
    /// The node the configured device is at now (links resolved); nil while it is absent.
    public var node: String?

    public init(subsystems: Set<String>, node: String?) {
        self.subsystems = subsystems
        self.node = node
    }

    /// A configured path (a node or a link to one) as the node it resolves to, if it exists.
    public static func node(at path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard realpath(path, &buffer) != nil else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

extension PluginRegistry {
    /// Where each configured, enabled device is now, for those whose plugin can tell
    /// (`PluginDescriptor.locate`); a plugin whose own service follows its devices (gpsd,
    /// fprintd) or the fake says nothing, and its devices are left out.
    public func presence(in configuration: KitConfiguration, context: PluginContext) async -> [DeviceKey: DevicePresence] {
        var found: [DeviceKey: DevicePresence] = [:]
        for section in configuration.allDevices where section.isEnabled {
            guard let locate = plugin(named: section.plugin)?.locate,
                  let presence = await locate(section.capability, section.parameters, context) else { continue }
            found[DeviceKey(section.capability, section.name)] = presence
        }
        return found
    }
}
