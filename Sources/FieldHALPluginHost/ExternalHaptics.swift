import FieldHAL
import FieldHALPluginProtocol
import Foundation
import Logging

/// Haptics in an external plugin: each pattern is a `haptics.play` request, answered when
/// the pattern has finished; cancelling the caller stops it (`$/cancel`).
final class ExternalHaptics: HapticsEngine {
    let deviceName: String
    private let link: RequestLink.Hold

    private init(deviceName: String, link: RequestLink.Hold) {
        self.deviceName = deviceName
        self.link = link
    }

    static func open(_ manifest: PluginManifest, _ parameters: PluginParameters, in links: RequestLinks, logger: Logger) async throws -> ExternalHaptics {
        let (link, device) = try await RequestLink.started(manifest, .haptics, parameters, in: links, logger: logger)
        return ExternalHaptics(deviceName: device, link: link)
    }

    func play(_ pattern: HapticPattern) async throws {
        try pattern.validate(subject: "haptic pattern")
        _ = try await link.call(PluginProtocol.HapticsMethod.play, PluginProtocol.value(of: pattern), timeout: PluginProtocol.length(of: pattern))
    }

    func close() async { await link.release() }
}
