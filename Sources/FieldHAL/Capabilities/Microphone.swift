#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// PCM sample formats FieldHAL records (ALSA's names).
public enum SampleFormat: String, Sendable, Codable {
    case s16le = "S16_LE"
    case s32le = "S32_LE"

    public var bytesPerSample: Int { self == .s16le ? 2 : 4 }
}

/// What a recording asks for.
public struct RecordingRequest: Sendable, Equatable {
    public var duration: Duration
    public var sampleRate: Int
    public var channels: Int
    public var format: SampleFormat

    public init(duration: Duration, sampleRate: Int = 44_100, channels: Int = 1, format: SampleFormat = .s16le) {
        self.duration = duration
        self.sampleRate = sampleRate
        self.channels = channels
        self.format = format
    }

    /// Rejects rates, channel counts and durations no backend should be asked for.
    public func validate(subject: String) throws {
        guard (8_000...192_000).contains(sampleRate) else {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "sample rate \(sampleRate) Hz is outside 8000–192000")
        }
        guard (1...8).contains(channels) else {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "\(channels) channels is outside 1–8")
        }
        guard duration > .zero, duration <= .seconds(6 * 3600) else {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "duration \(duration.secondsDescription) is outside (0, 6 h]")
        }
    }

    public var frameCount: Int { Int((duration.seconds * Double(sampleRate)).rounded()) }
}

/// A finished recording on disk (expo-av's `Recording` status, with levels).
public struct AudioRecording: Sendable, Equatable, Codable {
    public var path: String
    public var sampleRate: Int
    public var channels: Int
    public var format: SampleFormat
    public var frames: Int
    /// Peak and RMS level over the whole recording, dBFS in expo-av's range −160…0.
    public var peakDBFS: Double
    public var rmsDBFS: Double
    /// Capture overruns the backend recovered from.
    public var overruns: Int
    /// The device failed partway (unplugged, stalled): the file holds what came before, and
    /// this is why it ended. Nil for a recording that ran its length.
    public var endedEarly: FieldHALError?

    public init(path: String, sampleRate: Int, channels: Int, format: SampleFormat, frames: Int,
                peakDBFS: Double, rmsDBFS: Double, overruns: Int = 0, endedEarly: FieldHALError? = nil) {
        self.path = path
        self.sampleRate = sampleRate
        self.channels = channels
        self.format = format
        self.frames = frames
        self.peakDBFS = peakDBFS
        self.rmsDBFS = rmsDBFS
        self.overruns = overruns
        self.endedEarly = endedEarly
    }

    public var durationSeconds: Double { Double(frames) / Double(sampleRate) }
}

public protocol Microphone: Device {
    /// Records to a WAV file at `destination`, streamed to it (`WAVFileWriter` takes the
    /// destination as it is). A file at a path or in a directory appears only when complete
    /// (written beside it, then renamed); cancelling leaves none. When the device fails
    /// partway, a backend that can finishes the file with the samples before and returns
    /// it with `endedEarly`; one that cannot throws.
    func record(_ request: RecordingRequest, to destination: RecordingDestination) async throws -> AudioRecording

    /// Records for `request.duration` in segments (`RecordingSegments`), each a complete WAV
    /// in memory handed over as it closes. A backend that can keeps one capture running and
    /// cuts between samples; the default records each segment on its own.
    func record(_ request: RecordingRequest, in segments: RecordingSegments<AudioRecording>) async throws
}

extension Microphone {
    /// Records to a WAV file at `path` (`RecordingDestination.path`).
    public func record(_ request: RecordingRequest, to path: String) async throws -> AudioRecording {
        try await record(request, to: .path(path))
    }

    public func record(_ request: RecordingRequest, in segments: RecordingSegments<AudioRecording>) async throws {
        try await recordOneSegmentAtATime(request, in: segments)
    }

    /// The default: each segment a recording of its own (the capture restarts between them).
    public func recordOneSegmentAtATime(_ request: RecordingRequest, in segments: RecordingSegments<AudioRecording>) async throws {
        try request.validate(subject: "recording")
        try segments.validate(subject: "recording")
        try await segments.recordOneAtATime(total: request.duration, seconds: \.durationSeconds, endedEarly: \.endedEarly) { length, destination in
            var segment = request
            segment.duration = length
            return try await record(segment, to: destination)
        }
    }
}
