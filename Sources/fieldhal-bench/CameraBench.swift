import ArgumentParser
import FieldHAL
import FieldHALComposition
import FieldHALPlugins
import Foundation
import FieldHALCommandLine
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// `fieldhal-bench camera`: sustained capture through the V4L2 plugin next to
/// `v4l2-ctl --stream-mmap` on the same device, size and rate, in the same run.
struct CameraBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "camera",
        abstract: "Sustained V4L2 capture: frames per second and CPU per frame vs v4l2-ctl --stream-mmap.",
        discussion: """
        Needs a capture device and v4l2-ctl (v4l-utils); in the kernel lab, vivid: \
        lab/kernel-lab .build/release/fieldhal-bench camera. FieldHAL records Motion-JPEG AVI \
        for --seconds through the v4l2 plugin (dequeue, libv4l2's conversion to 4:2:0, \
        libturbojpeg, streamed to a file in /tmp); then previews the same camera at the same \
        size, rate and quality for --seconds (the live preview's path: the same stream, each \
        frame a JPEG handed to a viewer); v4l2-ctl streams the same number of frames of the \
        device's own YUYV into /dev/null. Each is timed wall and CPU (user + system). The \
        ratios say what FieldHAL's product path costs over bare streaming, and what a \
        preview costs a frame beside a recording.
        """)

    @Option(help: "The capture node (default: the first capture device).") var device: String?
    @Option(help: "Seconds of capture for each side.") var seconds = 10.0
    @Option(help: "Width in pixels.") var width = 640
    @Option(help: "Height in pixels.") var height = 360
    @Option(help: "Frames per second to ask for.") var fps = 30
    @Flag(help: "Print the result as JSON.") var json = false

    struct Side: Encodable { var frames: Int; var seconds, framesPerSecond, cpuMillisecondsPerFrame: Double; var peakRSSKiB: Int }
    struct Report: Encodable {
        var device: String
        var size: String
        var fieldhal, preview, v4l2ctl: Side
        var fpsRatio, cpuPerFrameRatio: Double
        /// The preview's CPU per frame over the recording's.
        var previewCPUPerFrameRatio: Double
    }

    func run() async throws {
        try await reportingFailures { try await measure() }
    }

    func measure() async throws {
        guard let v4l2 = BuiltinPlugins.registry.plugin(named: "v4l2") else {
            throw FieldHALError(.unavailable, subject: "bench camera", detail: "this fieldhal was built without the V4L2 trait")
        }
        let tool = "/usr/bin/v4l2-ctl"
        guard FileManager.default.isExecutableFile(atPath: tool) else {
            throw FieldHALError(.unavailable, subject: "bench camera", detail: "\(tool) is missing", advice: "apt install v4l-utils")
        }
        guard seconds > 0, seconds <= 600 else {
            throw FieldHALError(.invalidArgument, subject: "bench camera", detail: "--seconds must be in (0, 600]")
        }
        var parameters: [String: ConfigValue] = [:]
        if let device { parameters["device"] = .string(device) }
        guard case .camera(let camera) = try await v4l2.open(.camera, PluginParameters(parameters),
                                                               PluginContext(configDirectory: "/tmp", stateDirectory: "/tmp")) else {
            throw FieldHALError(.unavailable, subject: "bench camera", detail: "the v4l2 plugin opened no camera")
        }

        let path = NSTemporaryDirectory() + "fieldhal-bench-camera-\(getpid()).avi"
        defer { unlink(path) }
        let before = Self.ownUsage()
        let video = try await camera.recordVideo(VideoRequest(duration: .milliseconds(Int64(seconds * 1000)), width: width,
                                                              height: height, framesPerSecond: fps), to: path)
        let cpu = Self.ownUsage().cpuSeconds - before.cpuSeconds
        let ours = Side(frames: video.frames, seconds: video.durationSeconds, framesPerSecond: video.framesPerSecond,
                        cpuMillisecondsPerFrame: cpu * 1000 / Double(max(1, video.frames)),
                        peakRSSKiB: GPSBench.peakRSSKiB(of: "self"))

        // The preview: the camera's frames at the recording's size, rate and quality, each
        // handed over as a JPEG, for as long.
        let previewed = Atomic<Int>(0)
        let previewBefore = Self.ownUsage()
        let previewStart = ContinuousClock.now
        let previewEnd = previewStart + .milliseconds(Int64(seconds * 1000))
        try await camera.preview(PreviewRequest(width: width, height: height, framesPerSecond: min(30, fps), quality: 80)) { _ in
            previewed.add(1, ordering: .relaxed)
            return ContinuousClock.now < previewEnd
        }
        let previewSeconds = (ContinuousClock.now - previewStart).seconds
        let previewCPU = Self.ownUsage().cpuSeconds - previewBefore.cpuSeconds
        let frames = previewed.load(ordering: .relaxed)
        let preview = Side(frames: frames, seconds: previewSeconds, framesPerSecond: Double(frames) / previewSeconds,
                           cpuMillisecondsPerFrame: previewCPU * 1000 / Double(max(1, frames)), peakRSSKiB: GPSBench.peakRSSKiB(of: "self"))
        await camera.close()

        let count = max(1, Int(seconds * Double(fps)))
        let outcome = try EvidenceBench.Child.run(tool, ["-d", camera.deviceName,
                                                         "--set-fmt-video=width=\(width),height=\(height),pixelformat=YUYV",
                                                         "--set-parm=\(fps)", "--stream-mmap=4", "--stream-count=\(count)",
                                                         "--stream-to=/dev/null"])
        let theirs = Side(frames: count, seconds: outcome.seconds, framesPerSecond: Double(count) / outcome.seconds,
                          cpuMillisecondsPerFrame: outcome.cpuSeconds * 1000 / Double(count), peakRSSKiB: outcome.peakRSSKiB)
        let report = Report(device: camera.deviceName, size: "\(video.width)x\(video.height)", fieldhal: ours, preview: preview, v4l2ctl: theirs,
                            fpsRatio: ours.framesPerSecond / theirs.framesPerSecond,
                            cpuPerFrameRatio: ours.cpuMillisecondsPerFrame / max(0.0001, theirs.cpuMillisecondsPerFrame),
                            previewCPUPerFrameRatio: preview.cpuMillisecondsPerFrame / max(0.0001, ours.cpuMillisecondsPerFrame))
        try Output.emit(report, json: json) {
            func side(_ name: String, _ s: Side) -> String {
                String(format: "%@ %5d frames in %5.2f s  %6.2f fps  %6.2f ms CPU/frame  peak RSS %d KiB",
                       name, s.frames, s.seconds, s.framesPerSecond, s.cpuMillisecondsPerFrame, s.peakRSSKiB)
            }
            return [
                "camera \(report.device), \(report.size), \(fps) fps asked",
                side("FieldHAL (record MJPEG AVI)     ", ours),
                side("FieldHAL (live preview, JPEG)   ", preview),
                side("v4l2-ctl --stream-mmap (YUYV)   ", theirs),
                String(format: "ratio FieldHAL / v4l2-ctl: %.2f× the frame rate, %.2f× the CPU per frame",
                       report.fpsRatio, report.cpuPerFrameRatio),
                String(format: "ratio preview / recording: %.2f× the CPU per frame", report.previewCPUPerFrameRatio),
            ].joined(separator: "\n")
        }
    }

    private static func ownUsage() -> rusage {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return usage
    }
}
