#if Evdev
import CEvdev
import FieldHAL
import FieldHALSystem
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Haptics through evdev force feedback: a rumble motor in a gamepad, a vibration motor
/// exposed by its driver (`memless` devices, `pwm-vibra`, `gpio-vibra`), or a uinput device.
/// A pattern's distinct effects are uploaded (`EVIOCSFF`), played in order by writing
/// `EV_FF` events with the step timings, and erased afterwards (`EVIOCRMFF`) even when the
/// pattern is cancelled or the device vanishes. Runs on the device's own thread.
final class EvdevHaptics: HapticsEngine {
    struct Settings: Sendable {
        var device: String?
        /// `FF_GAIN`, 0…1: the overall strength, applied before each pattern.
        var gain = 1.0
        var theme = HapticTheme.builtIn
    }

    let deviceName: String
    /// What the input device said when it was opened.
    private let said = Mutex<DeviceIdentity?>(nil)
    var identity: DeviceIdentity? { said.withLock { $0 } }
    private let settings: Settings
    private let thread = DeviceThread(name: "fieldhal-evdev")
    private let wakeup: WakeupEvent
    private var subject: String { "haptics \(deviceName)" }

    /// Opens the configured node (or the first force-feedback device) once, so a wrong
    /// configuration fails when the kit loads.
    static func open(_ settings: Settings) async throws -> EvdevHaptics {
        let path = try settings.device ?? forceFeedbackDevices().first ?? {
            throw FieldHALError(.deviceNotFound, subject: "haptics", detail: "no input device with force feedback in /dev/input",
                                advice: "check the motor's driver is loaded; set device in [haptics] to its /dev/input/eventN")
        }()
        let haptics = try EvdevHaptics(path: path, settings: settings)
        let identity = try await haptics.thread.run { [subject = haptics.subject] in
            let device = try EvdevDevice(path: path, subject: subject)
            guard !device.features.isEmpty else {
                throw FieldHALError(.unsupported, subject: subject, detail: "\(device.name) has no rumble or periodic force feedback",
                                    advice: "pick the motor's event node (grep -l ff /sys/class/input/event*/device/capabilities/ff)")
            }
            return device.identity()
        }
        haptics.said.withLock { $0 = identity }
        return haptics
    }

    private init(path: String, settings: Settings) throws {
        deviceName = path
        self.settings = settings
        wakeup = try WakeupEvent()
    }

    /// Event nodes whose driver offers rumble or periodic effects, in number order.
    static func forceFeedbackDevices() -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/dev/input")) ?? []
        return names.filter { $0.hasPrefix("event") && Int($0.dropFirst(5)) != nil }
            .sorted { Int($0.dropFirst(5))! < Int($1.dropFirst(5))! }
            .map { "/dev/input/" + $0 }
            .filter { path in (try? EvdevDevice(path: path, subject: path))?.features.isEmpty == false }
    }

    func play(_ pattern: HapticPattern) async throws -> HapticsPlayed {
        let steps = settings.theme.steps(for: pattern)
        try HapticPattern.custom(steps).validate(subject: subject)
        try await thread.run(interrupt: { [wakeup] in wakeup.signal() }) { [self] in
            wakeup.drain()
            let device = try EvdevDevice(path: deviceName, subject: subject)
            try device.setGain(settings.gain)
            var uploaded: [(step: HapticStep, id: Int16)] = []
            defer { for entry in uploaded { device.erase(entry.id) } }
            for step in steps where !uploaded.contains(where: { $0.step.sameEffect(as: step) }) {
                uploaded.append((step, try device.upload(step)))
            }
            for step in steps {
                let id = uploaded.first { $0.step.sameEffect(as: step) }!.id
                try device.start(id)
                do {
                    try waitInterruptibly(.milliseconds(step.durationMilliseconds))
                } catch {
                    try? device.stop(id)
                    throw error
                }
                try device.stop(id)
                if step.pauseMilliseconds > 0 { try waitInterruptibly(.milliseconds(step.pauseMilliseconds)) }
            }
        }
        return HapticsPlayed(steps)  // the kit's theme, which a configuration may change
    }

    func close() async { thread.stop() }

    /// Sleeps on the wake-up pipe: a cancelled task returns at once.
    private func waitInterruptibly(_ duration: Duration) throws {
        if wakeup.wait(upTo: duration) { throw FieldHALError.cancelled(subject) }
    }
}

extension HapticStep {
    /// Steps that can share one uploaded effect: the same waveform, strength and length.
    func sameEffect(as other: HapticStep) -> Bool {
        effect == other.effect && durationMilliseconds == other.durationMilliseconds
    }
}
#endif
