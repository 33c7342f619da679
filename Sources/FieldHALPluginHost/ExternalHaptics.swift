import FieldHAL
import FieldHALPluginProtocol
import Foundation

/// Haptics in an external plugin: each pattern is a `haptics.play` request, answered when
/// the pattern has finished; cancelling the caller stops it (`$/cancel`).
final class ExternalHaptics: HapticsEngine, ExternalRequestDevice {
    static let capability = Capability.haptics
    let deviceName: String
    let link: RequestLink.Hold

    init(deviceName: String, link: RequestLink.Hold) {
        self.deviceName = deviceName
        self.link = link
    }

    func play(_ pattern: HapticPattern) async throws -> HapticsPlayed {
        try pattern.validate(subject: "haptic pattern")
        let answer = try await link.call(PluginProtocol.HapticsMethod.play, PluginProtocol.value(of: pattern), timeout: PluginProtocol.bound(of: pattern))
        // A plugin that does not say what it played (null: before 1.6, or a plugin that
        // does not tell) played a named pattern by its own theme, unknown here: FieldHAL's
        // theme is the best there is to report.
        return try PluginProtocol.played(from: answer, plugin: link.manifest.name) ?? HapticsPlayed(pattern.steps)
    }
}
