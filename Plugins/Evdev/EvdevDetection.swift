#if Evdev
import FieldHAL

/// The machine's force-feedback input devices for `fieldhal detect`: each event node whose
/// driver takes rumble or periodic effects, with its name and effect slots, named by udev's
/// `/dev/input/by-id` or `by-path` link when there is one.
enum EvdevDetection {
    static func devices() -> [DetectedDevice] {
        EvdevHaptics.forceFeedbackDevices().compactMap { path in
            guard let device = try? EvdevDevice(path: path, subject: path) else { return nil }
            let features = [(EvdevDevice.Feature.rumble, "rumble"), (.periodic, "periodic"), (.gain, "gain")]
                .filter { device.features.contains($0.0) }.map(\.1)
            let stable = StableDeviceName.link(to: path, in: ["/dev/input/by-id", "/dev/input/by-path"])
            return DetectedDevice(capability: .haptics, plugin: "evdev", name: device.name, node: path, stableName: stable,
                                  details: ["effects": features.joined(separator: " "), "slots": "\(device.effectSlots)"],
                                  parameters: ["device": .string(stable ?? path)])
        }
    }
}
#endif
