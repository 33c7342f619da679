import FieldHAL
import FieldHALSystem

/// The V4L2 backend: cameras through Video4Linux2 and libv4l2, stills and Motion-JPEG video
/// encoded with libturbojpeg. Built with the `V4L2` trait.
public enum V4L2Plugin {
    #if V4L2
    public static let descriptor: PluginDescriptor? = PluginDescriptor(
        name: "v4l2",
        summary: "cameras through V4L2/libv4l2: stills as JPEG, video as Motion-JPEG AVI",
        capabilities: [.camera: parameters],
        open: { _, parameters, _ in .camera(try await V4L2Camera.open(try settings(from: parameters))) },
        detect: { _ in (try? await DeviceThread.runOnce(name: "fieldhal-v4l2-detect") { V4L2Detection.devices() }) ?? [] },
        locate: { _, parameters, _ in
            // The node named (a by-id link followed to it), or the first capture node as `open` takes it.
            let node: String? = if let device = parameters.string("device") { DevicePresence.node(at: device) }
                else { (try? await DeviceThread.runOnce(name: "fieldhal-v4l2-detect") { V4L2Camera.captureDevices().first }) ?? nil }
            return DevicePresence(subsystems: ["video4linux"], node: node)
        }
    )
    #else
    public static let descriptor: PluginDescriptor? = nil
    #endif

    static let parameters: [ParameterSpec] = [
        ParameterSpec("device", .string, help: "the capture node, such as /dev/video0 (default: the first capture device)"),
        ParameterSpec("prefer_mjpeg", .boolean, help: "pass the camera's own MJPEG through when it offers it (default true)"),
        ParameterSpec("buffers", .integer, help: "memory-mapped buffers while streaming, 2–32 (default 8, fewer for frames so large that 8 would pass 16 MiB; at least 4)"),
        ParameterSpec("frame_timeout_ms", .integer, help: "the longest wait for one frame, 100–60000 (default 2000)"),
    ]

    #if V4L2
    static func settings(from parameters: PluginParameters) throws -> V4L2Camera.Settings {
        var settings = V4L2Camera.Settings()
        settings.device = parameters.string("device")
        if let prefer = parameters.boolean("prefer_mjpeg") { settings.preferMJPEG = prefer }
        if let buffers = parameters.integer("buffers") {
            guard (2...32).contains(buffers) else { throw invalid("buffers", "must be 2–32") }
            settings.bufferCount = buffers
        }
        if let timeout = parameters.integer("frame_timeout_ms") {
            guard (100...60_000).contains(timeout) else { throw invalid("frame_timeout_ms", "must be 100–60000") }
            settings.frameTimeout = .milliseconds(timeout)
        }
        return settings
    }

    private static func invalid(_ key: String, _ detail: String) -> FieldHALError {
        FieldHALError(.invalidArgument, subject: "v4l2 plugin", detail: "\(key): \(detail)")
    }
    #endif
}
