#if V4L2
import CV4L2
import FieldHAL
import FieldHALMedia
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

/// A V4L2 capture device. Every capture opens the node, streams through memory-mapped
/// buffers on the camera's own thread, and closes it again, so the camera is free between
/// captures and a replugged camera works on the next one. MJPEG frames pass through as
/// JPEG; raw formats reach libturbojpeg as planar 4:2:0 (libv4l2 converts what the device
/// does not offer natively).
final class V4L2Camera: Camera {
    struct Settings: Sendable {
        var device: String?
        var preferMJPEG = true
        /// Nil: `V4L2Stream.defaultBufferCount`, 8 within 16 MiB. A recording shares the
        /// CPUs with the audio, the sealing of each segment and the uploads, and their
        /// bursts outlast 4 frames on a slow machine (640x480 on the kernel lab's emulated
        /// guest: 11 of 501 frames dropped with 4 buffers; with 8, 2 of 2 004 in four runs;
        /// with 16, 1 of 2 505 in five: what is left is vivid's own generator thread late
        /// under emulation — it numbers frames by its clock, so a late frame is a skipped
        /// number whatever the buffers).
        var bufferCount: Int?
        /// The longest wait for one frame before the camera counts as stalled.
        var frameTimeout: Duration = .seconds(2)
    }

    let deviceName: String
    /// What QUERYCAP and udev said at open.
    private let said = Mutex<DeviceIdentity?>(nil)
    var identity: DeviceIdentity? { said.withLock { $0 } }
    private let settings: Settings
    /// Who shares the open stream: stills, preview viewers, recordings during a preview.
    private let taps = StreamTaps()
    /// Who runs the stream now, if anyone.
    var serving: StreamTaps.Serving { taps.serving }
    private let running = RunningStream()
    private let thread: DeviceThread
    private let wakeup: WakeupEvent

    private var subject: String { "camera \(deviceName)" }

    /// Opens the configured node (or the first capture device) once to check it is there,
    /// readable and able to stream, so a wrong configuration fails when the kit loads.
    static func open(_ settings: Settings) async throws -> V4L2Camera {
        let path = try settings.device ?? captureDevices().first ?? {
            throw FieldHALError(.deviceNotFound, subject: "camera", detail: "no V4L2 capture device in /dev",
                                advice: "plug in a camera (v4l2-ctl --list-devices lists them), or set device in [camera]")
        }()
        let camera = try V4L2Camera(path: path, settings: settings)
        do {
            let identity = try await camera.onThread { handle in try Self.checkCanCapture(handle) }
            camera.said.withLock { $0 = identity }
        } catch {
            await camera.close()
            throw error
        }
        return camera
    }

    private init(path: String, settings: Settings) throws {
        deviceName = path
        self.settings = settings
        thread = DeviceThread(name: "fieldhal-v4l2")
        wakeup = try WakeupEvent()
    }

    /// Capture-capable nodes among /dev/video*, in number order (a UVC camera also has a
    /// metadata node, which this skips).
    static func captureDevices() -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/dev")) ?? []
        return names.filter { $0.hasPrefix("video") && Int($0.dropFirst(5)) != nil }
            .sorted { Int($0.dropFirst(5))! < Int($1.dropFirst(5))! }
            .map { "/dev/" + $0 }
            .filter { path in (try? checkCanCapture(V4L2Handle(path: path))) != nil }
    }

    /// Throws unless the node captures by streaming; returns what it is: the card and bus
    /// QUERYCAP gives, the USB descriptor's vendor and serial, and udev's stable link.
    @discardableResult
    private static func checkCanCapture(_ handle: V4L2Handle) throws -> DeviceIdentity {
        var capability = v4l2_capability()
        try handle.control(FIELDHAL_VIDIOC_QUERYCAP, &capability, doing: "query capabilities")
        let caps = capability.capabilities & UInt32(V4L2_CAP_DEVICE_CAPS) != 0 ? capability.device_caps : capability.capabilities
        guard caps & UInt32(V4L2_CAP_VIDEO_CAPTURE) != 0, caps & UInt32(V4L2_CAP_STREAMING) != 0 else {
            throw FieldHALError(.unsupported, subject: handle.subject, detail: "not a streaming video capture device",
                                advice: "pick another /dev/video node (v4l2-ctl --list-devices)")
        }
        func text<T>(_ field: T) -> String {
            withUnsafeBytes(of: field) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        }
        let node = URL(fileURLWithPath: handle.path).resolvingSymlinksInPath().lastPathComponent
        let link = DeviceIdentity.stableLink(for: handle.path, in: ["/dev/v4l/by-id", "/dev/v4l/by-path"])
        return DeviceIdentity(model: text(capability.card), link: link ?? "v4l2 \(text(capability.bus_info))")
            .filled(from: DeviceIdentity.usb(above: "/sys/class/video4linux/\(node)/device"))
    }

    // MARK: Camera

    func formats() async throws -> [CameraFormat] {
        try await onThread { handle in Self.enumerateFormats(handle).flatMap(\.formats) }
    }

    func captureStill(_ request: PhotoRequest) async throws -> Photo {
        guard (1...100).contains(request.quality) else {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "JPEG quality \(request.quality) is outside 1–100")
        }
        guard (16...4096).contains(request.width), (16...4096).contains(request.height) else {
            throw FieldHALError(.unsupported, subject: subject, detail: "size \(request.width)x\(request.height) is outside 16x16…4096x4096")
        }
        // A recording or a preview holds the device: the still is its next frame, at its
        // size, within a frame or two — not a wait for its end, and not EBUSY.
        if let photo = try await taps.still(quality: request.quality) {
            return photo
        }
        return try await onThread { [self] handle in
            let stream = try openStream(handle, width: request.width, height: request.height, framesPerSecond: nil)
            defer { stream.release() }
            let encoder = try FrameEncoder(stream: stream, subject: subject)
            for _ in 0..<max(0, request.warmUpFrames) {
                try stream.nextFrame(timeout: settings.frameTimeout, wakeup: wakeup) { _ in }
            }
            let jpeg = try stream.nextFrame(timeout: settings.frameTimeout, wakeup: wakeup) { frame in
                try encoder.jpeg(frame, quality: request.quality) { Array($0) }
            }
            return Photo(jpeg: jpeg, width: stream.width, height: stream.height, capturedAt: Date())
        }
    }

    func recordVideo(_ request: VideoRequest, to destination: RecordingDestination) async throws -> VideoRecording {
        try request.validate(subject: subject)
        return try await onStream { [self] handle in
            var writer: MJPEGAVIWriter?
            var full: MJPEGAVIWriter.Full?
            var size = (width: 0, height: 0)
            var lastFrameAt = Duration.zero
            var dropped = 0
            let elapsed: Duration
            var endedEarly: FieldHALError?
            do {
                let streamed = try stream(request, handle, opened: { width, height in
                    size = (width, height)
                    writer = try MJPEGAVIWriter(destination, width: width, height: height)
                }, frame: { jpeg, at, _, droppedSoFar in
                    guard let writer else { return false }
                    full = writer.full(forFrameOf: jpeg.count)
                    if full != nil { return false }
                    try writer.append(jpeg: jpeg)
                    (lastFrameAt, dropped) = (at, droppedSoFar)
                    return true
                })
                (elapsed, dropped) = (streamed.elapsed, streamed.dropped)
            } catch let failure as FieldHALError where !FieldHALError.isCancellation(failure) && (writer?.frameCount ?? 0) > 0 {
                // The camera failed partway (unplugged, stalled): the frames before are kept,
                // the file finished at the last one, and the failure told with it.
                elapsed = Self.endOfLastFrame(first: .zero, last: lastFrameAt, frames: writer?.frameCount ?? 1)
                endedEarly = failure
            }
            guard let writer else { throw FieldHALError(.io, subject: subject, detail: "the stream opened without a size") }
            let bytes = try writer.finish(duration: elapsed)
            return VideoRecording(path: destination.name, width: size.width, height: size.height, frames: writer.frameCount,
                                  durationSeconds: elapsed.seconds, droppedFrames: dropped, bytes: bytes,
                                  stoppedAtSizeLimit: full == .sizeLimit, stoppedForDiskSpace: full == .diskFull, endedEarly: endedEarly)
        }
    }

    /// One stream for the whole recording, cut into segments between two frames: a frame
    /// taken at or after a segment's end starts the next one, so no frame is lost at a
    /// boundary (restarting the stream per segment lost 0.4–0.7 s each time on vivid).
    /// Boundaries fall at whole multiples of the length from the first frame, so segments
    /// do not drift however long the recording.
    func recordVideo(_ request: VideoRequest, in segments: RecordingSegments<VideoRecording>) async throws {
        try request.validate(subject: subject)
        try segments.validate(subject: subject)
        try await onStream { [self] handle in
            struct Open {
                let file: MemoryFile
                let writer: MJPEGAVIWriter
                let sequence: Int
                let startedAt: Date
                /// Since the recording's first frame: this segment's first frame, and its end.
                let first: Duration
                let end: Duration
                let droppedBefore: Int
            }
            var size = (width: 0, height: 0)
            var current: Open?
            var lastFrameAt = Duration.zero
            var sequence = 0
            var dropped = 0
            var full: MJPEGAVIWriter.Full?
            func close(_ open: Open, at end: Duration) throws {
                let bytes = try open.writer.finish(duration: end - open.first)
                let recording = VideoRecording(path: RecordingDestination.memory(open.file).name, width: size.width, height: size.height, frames: open.writer.frameCount,
                                               durationSeconds: (end - open.first).seconds, droppedFrames: dropped - open.droppedBefore,
                                               bytes: bytes, stoppedAtSizeLimit: full == .sizeLimit, stoppedForDiskSpace: full == .diskFull)
                segments.closed(RecordedSegment(sequence: open.sequence, startedAt: open.startedAt, seconds: recording.durationSeconds,
                                                file: open.file, recording: recording))
            }
            let streamed: Streamed
            do {
                streamed = try stream(request, handle, opened: { size = ($0, $1) }, frame: { jpeg, at, date, droppedSoFar in
                    dropped = droppedSoFar
                    if let open = current, at >= open.end {
                        current = nil  // closed once, even if closing fails
                        try close(open, at: at)
                        if segments.finish.isFinished { return false }
                    }
                    if current == nil {
                        // One neutral name: /proc/PID/fd shows it and must say no more than the devices do.
                        let file = try MemoryFile(name: "fieldhal")
                        current = Open(file: file, writer: try MJPEGAVIWriter(.memory(file), width: size.width, height: size.height),
                                       sequence: sequence, startedAt: date, first: at,
                                       end: segments.length * (Int(at / segments.length) + 1), droppedBefore: dropped)
                        sequence += 1
                    }
                    guard let open = current else { return false }
                    full = open.writer.full(forFrameOf: jpeg.count)
                    if full != nil { return false }
                    try open.writer.append(jpeg: jpeg)
                    lastFrameAt = at
                    return true
                })
            } catch {
                // The camera failed mid-segment (unplugged, stalled): the frames the segment
                // holds are evidence, closed and handed over before the failure is told. A
                // cancellation drops them, as `RecordingSegments` promises.
                if let open = current, open.writer.frameCount > 0, !FieldHALError.isCancellation(error) {
                    try? close(open, at: Self.endOfLastFrame(first: open.first, last: lastFrameAt, frames: open.writer.frameCount))
                }
                throw error
            }
            if let open = current { try close(open, at: max(streamed.elapsed, open.first)) }
        }
    }

    /// Where a recording cut short by a failure ends: its last frame lasts as long as its
    /// frames did on average (a lone frame, no time at all), as a frame of a whole
    /// recording lasts to the next one.
    static func endOfLastFrame(first: Duration, last: Duration, frames: Int) -> Duration {
        last + (frames > 1 ? (last - first) / (frames - 1) : .zero)
    }

    private struct Streamed {
        var width: Int
        var height: Int
        /// From the first frame to the last one's end.
        var elapsed: Duration
        var dropped: Int
    }

    /// Streams `request`'s frames as JPEG for its duration: `opened` hears the size the
    /// device gave, then `frame` each frame with its time since the first, that time as a
    /// date (the first frame's date plus it: one clock for the whole recording) and the
    /// frames the device skipped so far, until it returns false. A frame taken at or past
    /// the duration is not part of the recording. Stills and previews asked for meanwhile
    /// are served from the frames as they pass. Inside the preview loop it records from the
    /// loop's open stream, at its size.
    private func stream(_ request: VideoRequest, _ handle: V4L2Handle, opened: (Int, Int) throws -> Void,
                        frame take: (UnsafeRawBufferPointer, Duration, Date, Int) throws -> Bool) throws -> Streamed {
        let shared = running.stream
        let stream = try shared ?? openStream(handle, width: request.width, height: request.height, framesPerSecond: request.framesPerSecond)
        if shared == nil { taps.beginServing(.recording, width: stream.width, height: stream.height) }
        defer {
            if shared == nil {
                stream.release()
                taps.endRecording()
            }
        }
        let encoder = try FrameEncoder(stream: stream, subject: subject)
        try opened(stream.width, stream.height)
        var started: ContinuousClock.Instant?
        var startedDate = Date()
        var lastSequence: UInt32?
        var dropped = 0
        while started.map({ ContinuousClock.now - $0 < request.duration }) ?? true {
            let more = try stream.nextFrame(timeout: settings.frameTimeout, wakeup: wakeup) { frame -> Bool in
                let now = ContinuousClock.now
                if started == nil { (started, startedDate) = (now, Date()) }
                let at = now - started!
                if at >= request.duration { return false }
                if let lastSequence, frame.sequence > lastSequence + 1 { dropped += Int(frame.sequence - lastSequence - 1) }
                lastSequence = frame.sequence
                taps.serve(width: stream.width, height: stream.height) { quality in
                    try encoder.jpeg(frame, quality: quality) { Array($0) }
                }
                return try encoder.jpeg(frame, quality: request.quality) { jpeg in
                    try take(jpeg, at, startedDate.addingTimeInterval(at.seconds), dropped)
                }
            }
            if !more { break }
        }
        return Streamed(width: stream.width, height: stream.height, elapsed: started.map { ContinuousClock.now - $0 } ?? .zero, dropped: dropped)
    }

    /// A live preview on one open stream at the camera's own rate, each viewer given frames
    /// at its rate: MJPEG frames pass through as the camera sent them, raw ones are
    /// compressed once per quality asked. A preview asked for during a recording is the
    /// recording's frames, at its size; a recording asked for during a preview runs on the
    /// preview's stream at once.
    func preview(_ request: PreviewRequest, frame: @escaping @Sendable (Photo) -> Bool) async throws {
        try request.validate(subject: subject)
        while true {
            let end = try await taps.watch(request, frame: frame, startLoop: { [self] in
                thread.submit { [self] in previewLoop() }
            })
            if end == .finished { return }
        }
    }

    /// The preview loop, on the camera's thread: opens the stream at the first viewer's
    /// size, serves every viewer and still from it, and runs each recording asked for
    /// meanwhile on it; ends when nobody watches and no recording waits.
    private func previewLoop() {
        wakeup.drain()
        do {
            let handle = try V4L2Handle(path: deviceName)
            defer { handle.close() }
            /// Runs the next recording waiting, if one is; true when there was one.
            func runGuest() -> Bool {
                guard let guest = taps.nextGuest() else { return false }
                guest.run(handle)
                taps.guestEnded()
                // A recording cancelled as it ended may have signalled after its last wait.
                wakeup.drain()
                return true
            }
            while true {
                // A recording that came before any viewer (they left): on its own stream.
                if runGuest() { continue }
                guard let size = taps.wantedSize() else {
                    if taps.endPreviewIfIdle() { return }
                    continue
                }
                // The camera's own rate, whatever the viewers ask: a recording that joins
                // records at it, and each viewer skips to its own.
                let stream = try openStream(handle, width: size.width, height: size.height, framesPerSecond: nil)
                defer { stream.release() }
                let encoder = try FrameEncoder(stream: stream, subject: subject)
                taps.beginServing(.preview, width: stream.width, height: stream.height)
                running.stream = stream
                defer { running.stream = nil }
                while true {
                    // A recording asked for meanwhile: on this stream, at once.
                    if runGuest() { continue }
                    if taps.endPreviewIfIdle() { return }
                    do {
                        try stream.nextFrame(timeout: settings.frameTimeout, wakeup: wakeup) { frame in
                            taps.serve(width: stream.width, height: stream.height) { quality in
                                try encoder.jpeg(frame, quality: quality) { Array($0) }
                            }
                        }
                    } catch let error as FieldHALError where FieldHALError.isCancellation(error) {
                        // Only a recording's cancellation signals the wakeup: not the loop's end.
                        wakeup.drain()
                    }
                }
            }
        } catch {
            taps.fail(error)
        }
    }

    func close() async {
        // Viewers and waiting recordings hear it now; the preview loop then ends at its next frame.
        taps.fail(FieldHALError(.disconnected, subject: subject, detail: "the camera has been closed"))
        thread.stop()
    }

    // MARK: Internals

    /// Runs a recording's `job`: inside the preview loop when one runs (on its open
    /// stream, at once), else on the camera's thread like any other job.
    private func onStream<T: Sendable>(_ job: @escaping @Sendable (V4L2Handle) throws -> T) async throws -> T {
        if let result = try await taps.asGuest(job, wakeup: wakeup) { return result }
        return try await onThread(job)
    }

    /// Runs `job` on the camera's thread with the node open; cancelling the task wakes
    /// whatever wait the job is in.
    private func onThread<T: Sendable>(_ job: @escaping @Sendable (V4L2Handle) throws -> T) async throws -> T {
        try await thread.run(interrupt: { [wakeup] in wakeup.signal() }) { [self] in
            wakeup.drain()
            let handle = try V4L2Handle(path: deviceName)
            defer { handle.close() }
            return try job(handle)
        }
    }

    /// MJPEG straight through when the device has it (and the settings allow), else 4:2:0
    /// for the compressor.
    private func openStream(_ handle: V4L2Handle, width: Int, height: Int, framesPerSecond: Int?) throws -> V4L2Stream {
        let native = Self.enumerateFormats(handle).map(\.fourCC)
        let format: FourCC = settings.preferMJPEG && native.contains(.mjpeg) ? .mjpeg
            : settings.preferMJPEG && native.contains(.jpeg) ? .jpeg : .yuv420
        return try V4L2Stream(handle: handle, pixelFormat: format, width: width, height: height,
                              framesPerSecond: framesPerSecond, bufferCount: settings.bufferCount)
    }

    /// The device's own pixel formats (not libv4l2's emulated ones), in the driver's order.
    static func pixelFormats(_ handle: V4L2Handle) -> [FourCC] {
        var result: [FourCC] = []
        var description = v4l2_fmtdesc()
        description.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        while handle.tryControl(FIELDHAL_VIDIOC_ENUM_FMT, &description) == 0 {
            defer { description.index += 1 }
            if description.flags & UInt32(V4L2_FMT_FLAG_EMULATED) == 0 { result.append(FourCC(description.pixelformat)) }
        }
        return result
    }

    /// The device's own formats (not libv4l2's emulated ones), with sizes and rates.
    private static func enumerateFormats(_ handle: V4L2Handle) -> [(fourCC: FourCC, formats: [CameraFormat])] {
        pixelFormats(handle).map { fourCC in
            var formats: [CameraFormat] = []
            var size = v4l2_frmsizeenum()
            size.pixel_format = fourCC.code
            while handle.tryControl(FIELDHAL_VIDIOC_ENUM_FRAMESIZES, &size) == 0 {
                defer { size.index += 1 }
                let sizes: [(UInt32, UInt32)] = size.type == V4L2_FRMSIZE_TYPE_DISCRETE.rawValue
                    ? [(size.discrete.width, size.discrete.height)]
                    : [(size.stepwise.min_width, size.stepwise.min_height), (size.stepwise.max_width, size.stepwise.max_height)]
                for (width, height) in sizes {
                    formats.append(CameraFormat(pixelFormat: fourCC.description, width: Int(width), height: Int(height),
                                                framesPerSecond: frameRates(handle, fourCC, width, height)))
                }
                if size.type != V4L2_FRMSIZE_TYPE_DISCRETE.rawValue { break }
            }
            return (fourCC, formats)
        }
    }

    private static func frameRates(_ handle: V4L2Handle, _ fourCC: FourCC, _ width: UInt32, _ height: UInt32) -> [Double] {
        var interval = v4l2_frmivalenum()
        interval.pixel_format = fourCC.code
        interval.width = width
        interval.height = height
        var rates: [Double] = []
        while handle.tryControl(FIELDHAL_VIDIOC_ENUM_FRAMEINTERVALS, &interval) == 0 {
            defer { interval.index += 1 }
            let fraction = interval.type == V4L2_FRMIVAL_TYPE_DISCRETE.rawValue ? interval.discrete : interval.stepwise.min
            if fraction.numerator > 0 {
                rates.append((Double(fraction.denominator) / Double(fraction.numerator) * 100).rounded() / 100)
            }
            if interval.type != V4L2_FRMIVAL_TYPE_DISCRETE.rawValue { break }
        }
        return rates
    }
}
/// The stream the preview loop has open, for the recordings it runs: touched on the
/// camera's thread only (the loop sets it, a recording's job reads it there).
private final class RunningStream: @unchecked Sendable {
    var stream: V4L2Stream?
}

/// Turns a stream's frames into JPEG: MJPEG passes through (checked, standard Huffman
/// tables added when the camera left them out), 4:2:0 is compressed.
private struct FrameEncoder {
    let stream: V4L2Stream
    let subject: String
    let compressor: JPEGCompressor?

    init(stream: V4L2Stream, subject: String) throws {
        self.stream = stream
        self.subject = subject
        compressor = stream.pixelFormat == .yuv420 ? try JPEGCompressor(subject: subject) : nil
    }

    /// The frame as JPEG bytes, passed to `body` (no copy for MJPEG).
    func jpeg<T>(_ frame: V4L2Frame, quality: Int, _ body: (UnsafeRawBufferPointer) throws -> T) throws -> T {
        guard let compressor else {
            // Most UVC cameras omit the Huffman tables; a still or clip without them shows
            // nothing in a browser. Frames that carry their own pass through uncopied.
            if let completed = try MotionJPEG.withStandardHuffmanTables(frame.bytes, subject: subject) {
                return try completed.withUnsafeBytes(body)
            }
            return try body(frame.bytes)
        }
        return try compressor.compressYUV420(frame.bytes, width: stream.width, height: stream.height,
                                             quality: quality, subject: subject, body)
    }
}
#endif
