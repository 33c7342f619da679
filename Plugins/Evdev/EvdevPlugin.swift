import FieldHAL
import FieldHALSystem

/// The evdev backend: haptics through Linux force feedback. Built with the `Evdev` trait.
public enum EvdevPlugin {
    #if Evdev
    public static let descriptor: PluginDescriptor? = PluginDescriptor(
        name: "evdev",
        summary: "haptics through evdev force feedback (rumble and periodic effects, themed patterns)",
        capabilities: [.haptics: parameters],
        open: { _, parameters, context in .haptics(try await EvdevHaptics.open(try settings(from: parameters, context))) },
        detect: { _ in (try? await DeviceThread.runOnce(name: "fieldhal-evdev-detect") { EvdevDetection.devices() }) ?? [] },
        locate: { _, parameters, _ in
            // The node named, or the first force-feedback device as `open` takes it.
            let node: String? = if let device = parameters.string("device") { DevicePresence.node(at: device) }
                else { (try? await DeviceThread.runOnce(name: "fieldhal-evdev-detect") { EvdevHaptics.forceFeedbackDevices().first }) ?? nil }
            return DevicePresence(subsystems: ["input"], node: node)
        }
    )
    #else
    public static let descriptor: PluginDescriptor? = nil
    #endif

    static let parameters: [ParameterSpec] = [
        ParameterSpec("device", .string, help: "the motor's event node, such as /dev/input/event3 (default: the first with force feedback)"),
        ParameterSpec("gain", .number, help: "overall strength 0–1, sent as FF_GAIN (default 1)"),
        ParameterSpec("theme", .string, help: "a JSON theme file with the named patterns' steps (default: the built-in theme)"),
    ]

    #if Evdev
    static func settings(from parameters: PluginParameters, _ context: PluginContext) throws -> EvdevHaptics.Settings {
        var settings = EvdevHaptics.Settings()
        settings.device = parameters.string("device")
        if let gain = parameters.number("gain") {
            guard (0...1).contains(gain) else {
                throw FieldHALError(.invalidArgument, subject: "evdev plugin", detail: "gain: must be 0–1")
            }
            settings.gain = gain
        }
        if let theme = parameters.string("theme") { settings.theme = try HapticTheme.load(path: context.resolve(path: theme)) }
        return settings
    }
    #endif
}
