#if ALSA
import FieldHAL
import FieldHALSystem
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization

/// Plays short clips (the alert sound) through an ALSA PCM on its own thread. The PCM is
/// opened for each clip and closed after it, so the sound device is free between alerts.
final class ALSASpeaker: Speaker {
    struct Settings: Sendable {
        var pcm = "default"
        var writeTimeout: Duration = .seconds(2)
    }

    let deviceName: String
    /// What the card said when the PCM was first opened.
    private let said = Mutex<DeviceIdentity?>(nil)
    var identity: DeviceIdentity? { said.withLock { $0 } }
    private let settings: Settings
    private let thread = DeviceThread(name: "fieldhal-alsa-playback")
    private let wakeup: WakeupEvent
    private var subject: String { "speaker \(deviceName)" }

    init(settings: Settings) throws {
        deviceName = settings.pcm
        self.settings = settings
        wakeup = try WakeupEvent()
    }

    func probe() async throws {
        let identity = try await thread.run { [settings, subject] in
            try ALSAPCM(name: settings.pcm, direction: .playback, subject: subject).identity()
        }
        said.withLock { $0 = identity }
    }

    func play(_ clip: SoundClip) async throws {
        try await thread.run(interrupt: { [wakeup] in wakeup.signal() }) { [self] in
            wakeup.drain()
            let pcm = try ALSAPCM(name: settings.pcm, direction: .playback, subject: subject)
            defer { pcm.close() }
            try pcm.configure(format: .s16le, channels: 1, sampleRate: clip.sampleRate)
            var underruns = 0
            try clip.samples.withUnsafeBytes { bytes in
                var offset = 0
                while offset < clip.samples.count {
                    let start = UnsafeMutableRawPointer(mutating: bytes.baseAddress! + offset * 2)
                    switch try pcm.transfer(start, frames: clip.samples.count - offset, timeout: settings.writeTimeout, wakeup: wakeup) {
                    case .frames(let count): offset += count
                    case .xrun:
                        underruns += 1
                        guard underruns <= 3 else {
                            throw FieldHALError(.io, subject: subject, detail: "playback kept running dry (\(underruns) underruns)")
                        }
                    }
                }
            }
            try pcm.drain(timeout: clip.duration + settings.writeTimeout, wakeup: wakeup)
        }
    }

    func close() async { thread.stop() }
}
#endif
