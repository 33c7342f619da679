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

    func play(_ pattern: HapticPattern) async throws {
        try pattern.validate(subject: "haptic pattern")
        _ = try await link.call(PluginProtocol.HapticsMethod.play, PluginProtocol.value(of: pattern), timeout: PluginProtocol.bound(of: pattern))
    }
}
