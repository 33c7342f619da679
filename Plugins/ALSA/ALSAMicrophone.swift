#if ALSA
import FieldHAL
import FieldHALMedia
import FieldHALSystem
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization

/// Records from an ALSA PCM to WAV on the device's own thread, a period at a time, so
/// memory stays at one period however long the recording. Overruns are recovered and
/// counted; a device that vanishes ends the recording early with what came before kept
/// (`endedEarly`; in segments, the segment under way closed and handed over first).
final class ALSAMicrophone: Microphone {
    struct Settings: Sendable {
        var pcm = "default"
        var period: Duration = .milliseconds(20)
        var buffer: Duration = .milliseconds(200)
        /// The longest wait for audio before the device counts as stalled.
        var readTimeout: Duration = .seconds(2)
    }

    let deviceName: String
    /// What the card said when the PCM was first opened.
    private let said = Mutex<DeviceIdentity?>(nil)
    var identity: DeviceIdentity? { said.withLock { $0 } }
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
        let identity = try await thread.run { [settings, subject] in
            try ALSAPCM(name: settings.pcm, direction: .capture, subject: subject).identity()
        }
        said.withLock { $0 = identity }
    }

    func record(_ request: RecordingRequest, to destination: RecordingDestination) async throws -> AudioRecording {
        try request.validate(subject: subject)
        return try await thread.run(interrupt: { [wakeup] in wakeup.signal() }) { [self] in
            var recording: AudioRecording?
            var kept: AudioRecording?
            do {
                try capture(request) { _, _ in
                    let writer = try WAVFileWriter(destination, sampleRate: request.sampleRate, channels: request.channels, format: request.format)
                    return (writer, request.frameCount)
                } closed: { writer, overruns in
                    try writer.finish()
                    recording = Self.recording(destination.name, request, writer, overruns: overruns)
                    return false
                } interrupted: { writer, overruns in
                    // The device failed partway: the samples before are kept, the file
                    // finished with them, and the failure told with it.
                    if (try? writer.finish()) != nil { kept = Self.recording(destination.name, request, writer, overruns: overruns) }
                }
            } catch let failure as FieldHALError {
                guard var kept else { throw failure }
                kept.endedEarly = failure
                return kept
            }
            guard let recording else { throw FieldHALError(.io, subject: subject, detail: "the capture ended without a recording") }
            return recording
        }
    }

    /// One capture for the whole recording, cut into segments between two periods: the PCM
    /// runs on while one segment's file closes and the next opens (microseconds; the
    /// device's buffer holds far more), so no sample is lost at a boundary. Boundaries are
    /// counted in frames, exactly.
    func record(_ request: RecordingRequest, in segments: RecordingSegments<AudioRecording>) async throws {
        try request.validate(subject: subject)
        try segments.validate(subject: subject)
        let segmentFrames = max(1, Int((segments.length.seconds * Double(request.sampleRate)).rounded()))
        try await thread.run(interrupt: { [wakeup] in wakeup.signal() }) { [self] in
            var recorded = 0
            var open: (file: MemoryFile, sequence: Int, startedAt: Date)?
            var sequence = 0
            try capture(request) { _, startsAt in
                // One neutral name: /proc/PID/fd shows it and must say no more than the devices do.
                let file = try MemoryFile(name: "fieldhal")
                open = (file, sequence, startsAt)
                sequence += 1
                let writer = try WAVFileWriter(.memory(file), sampleRate: request.sampleRate, channels: request.channels, format: request.format)
                return (writer, min(segmentFrames, request.frameCount - recorded))
            } closed: { writer, overruns in
                try writer.finish()
                recorded += writer.framesWritten
                guard let (file, number, startedAt) = open else { return false }
                let recording = Self.recording(RecordingDestination.memory(file).name, request, writer, overruns: overruns)
                segments.closed(RecordedSegment(sequence: number, startedAt: startedAt, seconds: recording.durationSeconds, file: file, recording: recording))
                open = nil
                return recorded < request.frameCount && !segments.finish.isFinished
            } interrupted: { writer, overruns in
                // The device failed mid-segment: what the segment holds is evidence, closed
                // and handed over before the failure is told.
                guard let (file, number, startedAt) = open, (try? writer.finish()) != nil else { return }
                let recording = Self.recording(RecordingDestination.memory(file).name, request, writer, overruns: overruns)
                segments.closed(RecordedSegment(sequence: number, startedAt: startedAt, seconds: recording.durationSeconds, file: file, recording: recording))
                open = nil
            }
        }
    }

    /// On the device's thread: opens and starts the PCM once, then fills file after file —
    /// `next` opens one (told its number and when its first sample was taken, on the
    /// capture's own clock: the start plus the samples before it) and says how many frames
    /// it takes, `closed` finishes it and says whether another follows — until `closed`
    /// says no. When the device fails (not a cancellation) with samples in the open file,
    /// `interrupted` hears it before the error is thrown.
    private func capture(_ request: RecordingRequest, next: (Int, Date) throws -> (WAVFileWriter, Int),
                         closed: (WAVFileWriter, Int) throws -> Bool,
                         interrupted: (WAVFileWriter, Int) -> Void = { _, _ in }) throws {
        wakeup.drain()
        let pcm = try ALSAPCM(name: settings.pcm, direction: .capture, subject: subject)
        defer { pcm.close() }
        try pcm.configure(format: request.format, channels: request.channels, sampleRate: request.sampleRate,
                          period: settings.period, buffer: settings.buffer)
        let periodFrames = max(64, Int(settings.period.seconds * Double(request.sampleRate)))
        let chunk = UnsafeMutableRawPointer.allocate(byteCount: periodFrames * pcm.bytesPerFrame, alignment: 8)
        defer { chunk.deallocate() }
        try pcm.start()
        let started = Date()
        var files = 0
        var captured = 0
        repeat {
            let (writer, target) = try next(files, started.addingTimeInterval(Double(captured) / Double(request.sampleRate)))
            files += 1
            var overruns = 0
            do {
                while writer.framesWritten < target {
                    switch try pcm.transfer(chunk, frames: min(periodFrames, target - writer.framesWritten),
                                            timeout: settings.readTimeout, wakeup: wakeup) {
                    case .xrun: overruns += 1
                    case .frames(let count) where count > 0:
                        try writer.append(UnsafeRawBufferPointer(start: chunk, count: count * pcm.bytesPerFrame))
                    case .frames: continue
                    }
                }
            } catch {
                if writer.framesWritten > 0, !FieldHALError.isCancellation(error) { interrupted(writer, overruns) }
                throw error
            }
            captured += writer.framesWritten
            if try !closed(writer, overruns) { return }
        } while true
    }

    private static func recording(_ path: String, _ request: RecordingRequest, _ writer: WAVFileWriter, overruns: Int) -> AudioRecording {
        AudioRecording(path: path, sampleRate: request.sampleRate, channels: request.channels, format: request.format,
                       frames: writer.framesWritten, peakDBFS: writer.levels.peakDBFS, rmsDBFS: writer.levels.rmsDBFS, overruns: overruns)
    }

    func close() async { thread.stop() }
}
#endif
