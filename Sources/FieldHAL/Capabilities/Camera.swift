#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What a still capture asks for (expo-camera's `takePictureAsync` options, in pixels).
public struct PhotoRequest: Sendable, Equatable {
    public var width: Int
    public var height: Int
    /// JPEG quality, 1–100, where the backend encodes (raw formats); MJPEG passes through.
    public var quality: Int
    /// Frames to drop first so auto-exposure settles.
    public var warmUpFrames: Int

    public init(width: Int = 640, height: Int = 480, quality: Int = 85, warmUpFrames: Int = 3) {
        self.width = width
        self.height = height
        self.quality = quality
        self.warmUpFrames = warmUpFrames
    }
}

/// A captured still: a complete JPEG file's bytes.
public struct Photo: Sendable, Equatable {
    public var jpeg: [UInt8]
    public var width: Int
    public var height: Int
    public var capturedAt: Date

    public init(jpeg: [UInt8], width: Int, height: Int, capturedAt: Date) {
        self.jpeg = jpeg
        self.width = width
        self.height = height
        self.capturedAt = capturedAt
    }
}

/// A format a camera offers (V4L2's `VIDIOC_ENUM_FMT` × `ENUM_FRAMESIZES` × `ENUM_FRAMEINTERVALS`).
public struct CameraFormat: Sendable, Equatable, Codable {
    /// The FourCC: `MJPG`, `YUYV`, …
    public var pixelFormat: String
    public var width: Int
    public var height: Int
    public var framesPerSecond: [Double]

    public init(pixelFormat: String, width: Int, height: Int, framesPerSecond: [Double]) {
        self.pixelFormat = pixelFormat
        self.width = width
        self.height = height
        self.framesPerSecond = framesPerSecond
    }
}

public protocol Camera: Device {
    /// The formats, sizes and rates the device offers.
    func formats() async throws -> [CameraFormat]

    /// Captures one still. The backend picks the nearest size the device offers; the
    /// photo reports the size it actually has.
    func captureStill(_ request: PhotoRequest) async throws -> Photo

    /// Records video for `request.duration` to an AVI file (Motion-JPEG) at `destination`,
    /// frames streamed to it (`MJPEGAVIWriter` takes the destination as it is). A file at a
    /// path or in a directory appears only when complete; cancelling leaves none. When the
    /// camera fails partway, a backend that can finishes the file with the frames before
    /// and returns it with `endedEarly` (nothing recorded is lost); one that cannot throws.
    func recordVideo(_ request: VideoRequest, to destination: RecordingDestination) async throws -> VideoRecording

    /// Records video for `request.duration` in segments (`RecordingSegments`), each a
    /// complete AVI in memory handed over as it closes. A backend that can streams once
    /// and cuts between frames; the default records each segment on its own.
    func recordVideo(_ request: VideoRequest, in segments: RecordingSegments<VideoRecording>) async throws

    /// A live preview: JPEG frames at about `request.framesPerSecond`, each handed to `frame`
    /// until it returns false or the task is cancelled.
    func preview(_ request: PreviewRequest, frame: @escaping @Sendable (Photo) -> Bool) async throws
}

/// What a live preview asks for: a size, a rate and a JPEG quality.
public struct PreviewRequest: Sendable, Equatable {
    public var width: Int
    public var height: Int
    public var framesPerSecond: Int
    public var quality: Int

    public init(width: Int = 640, height: Int = 480, framesPerSecond: Int = 10, quality: Int = 70) {
        self.width = width
        self.height = height
        self.framesPerSecond = framesPerSecond
        self.quality = quality
    }

    public func validate(subject: String) throws(FieldHALError) {
        guard (16...4096).contains(width), (16...4096).contains(height) else {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "size \(width)x\(height) is outside 16x16…4096x4096")
        }
        guard (1...30).contains(framesPerSecond) else {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "\(framesPerSecond) frames per second is outside 1–30")
        }
        guard (1...100).contains(quality) else {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "JPEG quality \(quality) is outside 1–100")
        }
    }
}

extension Camera {
    /// Records video to an AVI file at `path` (`RecordingDestination.path`).
    public func recordVideo(_ request: VideoRequest, to path: String) async throws -> VideoRecording {
        try await recordVideo(request, to: .path(path))
    }

    /// A preview of stills, one per frame, on the camera's own schedule: every camera and
    /// plugin has it, and a still during a recording is the recording's frame, so a preview
    /// never takes the camera from the kit's evidence. A camera that can stream overrides it.
    public func preview(_ request: PreviewRequest, frame: @escaping @Sendable (Photo) -> Bool) async throws {
        try request.validate(subject: "camera preview")
        let interval = Duration.seconds(1) / request.framesPerSecond
        var next = ContinuousClock.now
        while !Task.isCancelled {
            let still = try await captureStill(PhotoRequest(width: request.width, height: request.height, quality: request.quality,
                                                            warmUpFrames: 1))
            guard frame(still) else { return }
            next += interval
            // Behind (a slow camera): the next frame at once, never a burst to catch up.
            if next < .now { next = .now } else { try await Task.sleep(until: next, clock: .continuous) }
        }
    }

    public func recordVideo(_ request: VideoRequest, in segments: RecordingSegments<VideoRecording>) async throws {
        try await recordVideoOneSegmentAtATime(request, in: segments)
    }

    /// The default: each segment a recording of its own (the device restarts between them).
    public func recordVideoOneSegmentAtATime(_ request: VideoRequest, in segments: RecordingSegments<VideoRecording>) async throws {
        try request.validate(subject: "video recording")
        try segments.validate(subject: "video recording")
        try await segments.recordOneAtATime(total: request.duration, seconds: \.durationSeconds, endedEarly: \.endedEarly) { length, destination in
            var segment = request
            segment.duration = length
            return try await recordVideo(segment, to: destination)
        }
    }
}

/// What a video recording asks for. The backend picks the nearest size and rate the device
/// offers; the recording reports what it got.
public struct VideoRequest: Sendable, Equatable {
    public var duration: Duration
    public var width: Int
    public var height: Int
    public var framesPerSecond: Int
    /// JPEG quality, 1–100, for frames the backend encodes (raw formats); MJPEG passes through.
    public var quality: Int

    public init(duration: Duration, width: Int = 640, height: Int = 480, framesPerSecond: Int = 30, quality: Int = 80) {
        self.duration = duration
        self.width = width
        self.height = height
        self.framesPerSecond = framesPerSecond
        self.quality = quality
    }

    public func validate(subject: String) throws {
        guard duration > .zero, duration <= .seconds(3600) else {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "duration \(duration.secondsDescription) is outside (0, 1 h]")
        }
        guard (16...4096).contains(width), (16...4096).contains(height) else {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "size \(width)x\(height) is outside 16x16…4096x4096")
        }
        guard (1...120).contains(framesPerSecond) else {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "\(framesPerSecond) frames per second is outside 1–120")
        }
        guard (1...100).contains(quality) else {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "JPEG quality \(quality) is outside 1–100")
        }
    }
}

/// A finished video on disk: Motion-JPEG in an AVI container.
public struct VideoRecording: Sendable, Equatable, Codable {
    public var path: String
    public var width: Int
    public var height: Int
    public var frames: Int
    public var durationSeconds: Double
    /// Frames the device skipped (gaps in its sequence numbers): the recorder fell behind.
    public var droppedFrames: Int
    public var bytes: Int
    /// The recording stopped early at the container's size limit (`MJPEGAVIWriter.sizeLimit`).
    public var stoppedAtSizeLimit: Bool
    /// The recording stopped early because the disk was nearly full; the clip up to there is kept.
    public var stoppedForDiskSpace: Bool
    /// The camera failed partway (unplugged, stalled): the file holds what came before, and
    /// this is why it ended. Nil for a recording that ran its length.
    public var endedEarly: FieldHALError?

    public init(path: String, width: Int, height: Int, frames: Int, durationSeconds: Double,
                droppedFrames: Int = 0, bytes: Int, stoppedAtSizeLimit: Bool = false, stoppedForDiskSpace: Bool = false,
                endedEarly: FieldHALError? = nil) {
        self.path = path
        self.width = width
        self.height = height
        self.frames = frames
        self.durationSeconds = durationSeconds
        self.droppedFrames = droppedFrames
        self.bytes = bytes
        self.stoppedAtSizeLimit = stoppedAtSizeLimit
        self.stoppedForDiskSpace = stoppedForDiskSpace
        self.endedEarly = endedEarly
    }

    public var framesPerSecond: Double { durationSeconds > 0 ? Double(frames) / durationSeconds : 0 }
}
