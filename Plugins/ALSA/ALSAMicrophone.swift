#if ALSA
import FieldHAL
import Foundation

/// Records from an ALSA PCM to WAV on the device's own thread, a period at a time, so
/// memory stays at one period however long the recording. Overruns are recovered and
/// counted; a vanished device ends the recording with a typed error and no file.
final class ALSAMicrophone: Microphone {
    struct Settings: Sendable {
        var pcm = "default"
        var period: Duration = .milliseconds(20)
        var buffer: Duration = .milliseconds(200)
        /// The longest wait for audio before the device counts as stalled.
        var readTimeout: Duration = .seconds(2)
    }

    let deviceName: String
    private let settings: Settings
    private let thread = DeviceThread(name: "fieldhal-alsa-capture")
    private let wakeup: WakeupEvent
    private var subject: String { "microphone \(deviceName)" }

    init(settings: Settings) throws {
        deviceName = settings.pcm
        self.settings = settings
        wakeup = try WakeupEvent()
    }

    /// Opens the PCM once, so a wrong name or missing permission fails when the kit loads.
    func probe() async throws {
        try await thread.run { [settings, subject] in
            _ = try ALSAPCM(name: settings.pcm, direction: .capture, subject: subject)
        }
    }

    func record(_ request: RecordingRequest, to path: String) async throws -> AudioRecording {
        try request.validate(subject: subject)
        return try await thread.run(interrupt: { [wakeup] in wakeup.signal() }) { [self] in
            wakeup.drain()
            let pcm = try ALSAPCM(name: settings.pcm, direction: .capture, subject: subject)
            defer { pcm.close() }
            try pcm.configure(format: request.format, channels: request.channels, sampleRate: request.sampleRate,
                              period: settings.period, buffer: settings.buffer)
            let writer = try WAVFileWriter(path: path, sampleRate: request.sampleRate, channels: request.channels, format: request.format)
            let periodFrames = max(64, Int(settings.period.seconds * Double(request.sampleRate)))
            let chunk = UnsafeMutableRawPointer.allocate(byteCount: periodFrames * pcm.bytesPerFrame, alignment: 8)
            defer { chunk.deallocate() }
            try pcm.start()
            var overruns = 0
            let target = request.frameCount
            while writer.framesWritten < target {
                switch try pcm.transfer(chunk, frames: min(periodFrames, target - writer.framesWritten),
                                        timeout: settings.readTimeout, wakeup: wakeup) {
                case .xrun: overruns += 1
                case .frames(let count) where count > 0:
                    try writer.append(UnsafeRawBufferPointer(start: chunk, count: count * pcm.bytesPerFrame))
                case .frames: continue
                }
            }
            try writer.finish()
            return AudioRecording(path: path, sampleRate: request.sampleRate, channels: request.channels, format: request.format,
                                  frames: writer.framesWritten, peakDBFS: writer.levels.peakDBFS, rmsDBFS: writer.levels.rmsDBFS,
                                  overruns: overruns)
        }
    }

    func close() async { thread.stop() }
}
#endif
