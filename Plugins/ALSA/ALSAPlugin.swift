#if ALSA
import CALSA
#endif
import FieldHAL
import FieldHALSystem

/// The ALSA backend: microphones (WAV recording with levels) and the speaker for alert
/// sounds, through alsa-lib. Built with the `ALSA` trait.
public enum ALSAPlugin {
    #if ALSA
    public static let descriptor: PluginDescriptor? = PluginDescriptor(
        name: "alsa",
        summary: "sound through ALSA: record WAV with levels, play the alert sound",
        capabilities: [.microphone: microphoneParameters, .speaker: speakerParameters],
        open: { capability, parameters, _ in
            if capability == .speaker {
                var settings = ALSASpeaker.Settings()
                if let pcm = parameters.string("pcm") { settings.pcm = pcm }
                let speaker = try ALSASpeaker(settings: settings)
                try await speaker.probe()
                return .speaker(speaker)
            }
            let microphone = try ALSAMicrophone(settings: try microphoneSettings(from: parameters))
            try await microphone.probe()
            return .microphone(microphone)
        },
        detect: { _ in (try? await DeviceThread.runOnce(name: "fieldhal-alsa-detect") { ALSADetection.devices() }) ?? [] },
        locate: { _, parameters, _ in
            // A PCM on a named card (plughw:CARD=Loopback,DEV=0, hw:1) is followed by that
            // card's control node; "default" or a sound server's PCM is whatever ALSA's
            // configuration makes it, so it is not followed.
            guard let card = card(inPCM: parameters.string("pcm") ?? "default") else { return nil }
            let index = (try? await DeviceThread.runOnce(name: "fieldhal-alsa-detect") { () -> Int32 in
                fieldhal_alsa_silence_library_errors()
                return snd_card_get_index(card)
            }) ?? -1
            return DevicePresence(subsystems: ["sound"], node: index >= 0 ? "/dev/snd/controlC\(index)" : nil)
        }
    )
    #else
    public static let descriptor: PluginDescriptor? = nil
    #endif

    /// The card a PCM name is on: its `CARD=` argument (`plughw:CARD=Loopback,DEV=0`) or its
    /// first positional one (`hw:1,0`, `front:Loopback`); nil for names without one.
    static func card(inPCM pcm: String) -> String? {
        guard let colon = pcm.firstIndex(of: ":") else { return nil }
        let arguments = pcm[pcm.index(after: colon)...].split(separator: ",")
        let named = arguments.first { $0.hasPrefix("CARD=") }.map { $0.dropFirst(5) } ?? arguments.first { !$0.contains("=") }
        guard let named else { return nil }
        let card = String(named.filter { $0 != "\"" && $0 != "'" && $0 != " " })
        return card.isEmpty ? nil : card
    }

    static let speakerParameters: [ParameterSpec] = [
        ParameterSpec("pcm", .string, help: "the ALSA PCM, such as default, plughw:1,0 or a name from aplay -L (default \"default\")"),
    ]

    static let microphoneParameters: [ParameterSpec] = speakerParameters + [
        ParameterSpec("period_ms", .integer, help: "how much audio each read takes, 5–500 (default 20)"),
        ParameterSpec("buffer_ms", .integer, help: "the device's buffer: how long a stall it absorbs before an overrun, 20–2000 (default 200)"),
        ParameterSpec("read_timeout_ms", .integer, help: "the longest wait for audio before the device counts as stalled (default 2000)"),
    ]

    #if ALSA
    static func microphoneSettings(from parameters: PluginParameters) throws -> ALSAMicrophone.Settings {
        var settings = ALSAMicrophone.Settings()
        if let pcm = parameters.string("pcm") { settings.pcm = pcm }
        if let period = parameters.integer("period_ms") {
            guard (5...500).contains(period) else { throw invalid("period_ms", "must be 5–500") }
            settings.period = .milliseconds(period)
        }
        if let buffer = parameters.integer("buffer_ms") {
            guard (20...2000).contains(buffer) else { throw invalid("buffer_ms", "must be 20–2000") }
            settings.buffer = .milliseconds(buffer)
        }
        guard settings.buffer >= settings.period * 2 else { throw invalid("buffer_ms", "must hold at least two periods") }
        if let timeout = parameters.integer("read_timeout_ms") {
            guard (100...60_000).contains(timeout) else { throw invalid("read_timeout_ms", "must be 100–60000") }
            settings.readTimeout = .milliseconds(timeout)
        }
        return settings
    }

    private static func invalid(_ key: String, _ detail: String) -> FieldHALError {
        FieldHALError(.invalidArgument, subject: "alsa plugin", detail: "\(key): \(detail)")
    }
    #endif
}
