import FieldHAL
import FieldHALMedia
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A camera that photographs a test pattern: eight colour bars over a grey ramp, with a
/// frame counter band, encoded as a real baseline JPEG of the requested size.
actor FakeCamera: Camera {
    nonisolated let deviceName: String
    /// Records at the request's frame rate, as a camera does (`realtime`); otherwise as fast
    /// as frames are made (flows and demos).
    nonisolated let realtime: Bool
    /// A recording longer than this ends early, as if the camera were unplugged then.
    nonisolated let unplugAfter: Duration?
    private var frameNumber = 0
    /// Recordings running now: a still asked for meanwhile is the next frame, at the
    /// recording's size, as a real camera's (the device is the recording's), not a wait for
    /// its end.
    private var recordings = 0
    private var stillsWaiting: [(quality: Int, continuation: CheckedContinuation<Photo, any Error>)] = []

    static let offeredFormats: [CameraFormat] = [
        CameraFormat(pixelFormat: "MJPG", width: 320, height: 240, framesPerSecond: [30]),
        CameraFormat(pixelFormat: "MJPG", width: 640, height: 480, framesPerSecond: [30, 15]),
        CameraFormat(pixelFormat: "MJPG", width: 1280, height: 720, framesPerSecond: [15]),
    ]

    init(deviceName: String, realtime: Bool = false, unplugAfter: Duration? = nil) {
        self.deviceName = deviceName
        self.realtime = realtime
        self.unplugAfter = unplugAfter
    }

    func formats() async throws -> [CameraFormat] { Self.offeredFormats }

    func captureStill(_ request: PhotoRequest) async throws -> Photo {
        let subject = "camera \(deviceName)"
        guard (16...4096).contains(request.width), (16...4096).contains(request.height) else {
            throw FieldHALError(.unsupported, subject: subject,
                                detail: "size \(request.width)x\(request.height) is outside 16x16…4096x4096")
        }
        guard (1...100).contains(request.quality) else {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "JPEG quality \(request.quality) is outside 1–100")
        }
        if recordings > 0 {
            return try await withCheckedThrowingContinuation { stillsWaiting.append((request.quality, $0)) }
        }
        frameNumber += 1 + max(0, request.warmUpFrames)
        let pixels = Self.testPattern(width: request.width, height: request.height, frame: frameNumber)
        let jpeg = BaselineJPEGEncoder(quality: request.quality).encode(rgb: pixels, width: request.width, height: request.height)
        try Task.checkCancellation()
        return Photo(jpeg: jpeg, width: request.width, height: request.height, capturedAt: Date())
    }

    /// Writes `duration × framesPerSecond` frames of the test pattern (its band changes
    /// shade each frame), each at its time when `realtime`, else without waiting.
    func recordVideo(_ request: VideoRequest, to destination: RecordingDestination) async throws -> VideoRecording {
        try request.validate(subject: "camera \(deviceName)")
        let wanted = max(1, Int((request.duration.seconds * Double(request.framesPerSecond)).rounded()))
        // Unplugged partway: the frames taken before it, then `endedEarly`.
        let unpluggedAt = unplugAfter.map { max(1, Int(($0.seconds * Double(request.framesPerSecond)).rounded())) }
        let frames = min(wanted, unpluggedAt ?? wanted)
        let endedEarly = unplugAfter.flatMap { frames < wanted ? FakePlugin.unplugged("camera \(deviceName)", after: $0) : nil }
        let writer = try MJPEGAVIWriter(destination, width: request.width, height: request.height)
        let encoder = BaselineJPEGEncoder(quality: request.quality)
        var full: MJPEGAVIWriter.Full?
        let start = ContinuousClock.now
        recordings += 1
        defer { endRecording(width: request.width, height: request.height) }
        for index in 0..<frames {
            try Task.checkCancellation()
            if realtime {
                try await sleepCancellable(until: start + .microseconds(index * 1_000_000 / request.framesPerSecond), subject: "camera \(deviceName)")
            } else {
                await Task.yield()  // a still asked for meanwhile gets in, for this frame
            }
            frameNumber += 1
            let pixels = Self.testPattern(width: request.width, height: request.height, frame: frameNumber)
            handStills(pixels, width: request.width, height: request.height)
            let jpeg = encoder.encode(rgb: pixels, width: request.width, height: request.height)
            full = writer.full(forFrameOf: jpeg.count)
            if full != nil { break }
            try jpeg.withUnsafeBytes { try writer.append(jpeg: $0) }
        }
        let duration = endedEarly == nil ? request.duration : .microseconds(frames * 1_000_000 / request.framesPerSecond)
        let bytes = try writer.finish(duration: duration)
        return VideoRecording(path: destination.name, width: request.width, height: request.height, frames: writer.frameCount,
                              durationSeconds: duration.seconds, bytes: bytes,
                              stoppedAtSizeLimit: full == .sizeLimit, stoppedForDiskSpace: full == .diskFull, endedEarly: endedEarly)
    }

    /// The stills waiting for this frame, each at its quality and the recording's size.
    private func handStills(_ pixels: [UInt8], width: Int, height: Int) {
        guard !stillsWaiting.isEmpty else { return }
        let waiting = stillsWaiting
        stillsWaiting = []
        for still in waiting {
            let jpeg = BaselineJPEGEncoder(quality: still.quality).encode(rgb: pixels, width: width, height: height)
            still.continuation.resume(returning: Photo(jpeg: jpeg, width: width, height: height, capturedAt: Date()))
        }
    }

    /// The recording is over: a still still waiting gets the frame after its last one.
    private func endRecording(width: Int, height: Int) {
        recordings -= 1
        guard !stillsWaiting.isEmpty else { return }
        frameNumber += 1
        handStills(Self.testPattern(width: width, height: height, frame: frameNumber), width: width, height: height)
    }

    /// SMPTE-like bars (white, yellow, cyan, green, magenta, red, blue, black) on the top
    /// two thirds, a horizontal grey ramp below, and a band whose shade follows the frame.
    static func testPattern(width: Int, height: Int, frame: Int) -> [UInt8] {
        let bars: [(UInt8, UInt8, UInt8)] = [
            (235, 235, 235), (235, 235, 16), (16, 235, 235), (16, 235, 16),
            (235, 16, 235), (235, 16, 16), (16, 16, 235), (16, 16, 16),
        ]
        var pixels = [UInt8](repeating: 0, count: width * height * 3)
        for y in 0..<height {
            for x in 0..<width {
                let color: (UInt8, UInt8, UInt8)
                if y < height * 2 / 3 {
                    color = bars[x * bars.count / width]
                } else if y < height * 5 / 6 {
                    let grey = UInt8(x * 255 / max(1, width - 1))
                    color = (grey, grey, grey)
                } else {
                    let shade = UInt8((frame * 37) % 200 + 28)
                    color = (shade, shade / 2, 255 - shade)
                }
                let index = (y * width + x) * 3
                pixels[index] = color.0
                pixels[index + 1] = color.1
                pixels[index + 2] = color.2
            }
        }
        return pixels
    }

    func close() {}
}
