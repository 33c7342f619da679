import FieldHAL
import FieldHALPluginProtocol
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A camera in an external plugin (protocol 1.3): its formats, a still (the JPEG comes
/// back in a sealed memfd) and a recording written into a directory passed as a descriptor.
final class ExternalCamera: Camera, ExternalRequestDevice {
    static let capability = Capability.camera
    let deviceName: String
    let link: RequestLink.Hold

    init(deviceName: String, link: RequestLink.Hold) {
        self.deviceName = deviceName
        self.link = link
    }

    func formats() async throws -> [CameraFormat] {
        let answer = try await link.call(PluginProtocol.CameraMethod.formats, .object([:]), timeout: .seconds(10))
        return try PluginProtocol.formats(from: answer, plugin: link.manifest.name)
    }

    /// A still may take the camera's start, its warm-up frames and an encode: 30 s bounds it.
    func captureStill(_ request: PhotoRequest) async throws -> Photo {
        let answer = try await link.call(PluginProtocol.CameraMethod.still, PluginProtocol.value(of: request), descriptors: [], timeout: .seconds(30))
        return try PluginProtocol.photo(from: answer.result, answer.descriptors, plugin: link.manifest.name)
    }

    func recordVideo(_ request: VideoRequest, to destination: RecordingDestination) async throws -> VideoRecording {
        try request.validate(subject: "video recording")
        return try await link.record(PluginProtocol.CameraMethod.record, PluginProtocol.value(of: request), to: destination, lasting: request.duration) {
            try PluginProtocol.videoRecording(from: $0, path: destination.name, plugin: link.manifest.name)
        }
    }

    /// In segments cut by the plugin from one stream (1.5); a plugin of 1.4 records each
    /// segment on its own.
    func recordVideo(_ request: VideoRequest, in segments: RecordingSegments<VideoRecording>) async throws {
        try request.validate(subject: "video recording")
        let plugin = link.manifest.name
        try await link.record(PluginProtocol.CameraMethod.record, PluginProtocol.value(of: request), lasting: request.duration, in: segments,
                              oneAtATime: { try await recordVideoOneSegmentAtATime(request, in: segments) }) { value, path throws(FieldHALError) in
            try PluginProtocol.videoRecording(from: value, path: path, plugin: plugin)
        }
    }
}

/// A microphone in an external plugin (protocol 1.3): each recording written by the plugin
/// into a directory passed as a descriptor, and appearing at its path when complete.
final class ExternalMicrophone: Microphone, ExternalRequestDevice {
    static let capability = Capability.microphone
    let deviceName: String
    let link: RequestLink.Hold

    init(deviceName: String, link: RequestLink.Hold) {
        self.deviceName = deviceName
        self.link = link
    }

    func record(_ request: RecordingRequest, to destination: RecordingDestination) async throws -> AudioRecording {
        try request.validate(subject: "recording")
        return try await link.record(PluginProtocol.MicrophoneMethod.record, PluginProtocol.value(of: request), to: destination, lasting: request.duration) {
            try PluginProtocol.audioRecording(from: $0, path: destination.name, plugin: link.manifest.name)
        }
    }

    /// In segments cut by the plugin from one capture (1.5); a plugin of 1.4 records each
    /// segment on its own.
    func record(_ request: RecordingRequest, in segments: RecordingSegments<AudioRecording>) async throws {
        try request.validate(subject: "recording")
        let plugin = link.manifest.name
        try await link.record(PluginProtocol.MicrophoneMethod.record, PluginProtocol.value(of: request), lasting: request.duration, in: segments,
                              oneAtATime: { try await recordOneSegmentAtATime(request, in: segments) }) { value, path throws(FieldHALError) in
            try PluginProtocol.audioRecording(from: value, path: path, plugin: plugin)
        }
    }
}

/// A speaker in an external plugin (protocol 1.3): the clip's samples go in a sealed memfd;
/// the answer comes when it has been heard.
final class ExternalSpeaker: Speaker, ExternalRequestDevice {
    static let capability = Capability.speaker
    let deviceName: String
    let link: RequestLink.Hold

    init(deviceName: String, link: RequestLink.Hold) {
        self.deviceName = deviceName
        self.link = link
    }

    func play(_ clip: SoundClip) async throws {
        let (parameters, samples) = try PluginProtocol.request(playing: clip)
        _ = try await link.call(PluginProtocol.SpeakerMethod.play, parameters, descriptors: [samples], timeout: clip.duration + .seconds(10))
    }
}

extension RequestLink.Hold {
    /// A recording by the plugin. The plugin has the duration plus 30 s (its device's start,
    /// the file's end) plus the link's grace.
    /// - To a path: it writes the file the request names into a directory made beside `path`
    ///   and passed as a descriptor; once it has answered, the file is moved to `path`.
    /// - Into a directory held open: it gets that directory and the file's name, and writes
    ///   the file there itself.
    /// - Into a file this process has open (a `MemoryFile`: evidence that must not reach a
    ///   disk in plaintext): it gets the file itself and writes it in place (protocol 1.4).
    ///   A plugin of 1.3 would take it for a directory, so it is refused first.
    func record<Recording>(_ method: String, _ parameters: JSONValue, to destination: RecordingDestination, lasting duration: Duration,
                           _ recording: (JSONValue) throws -> Recording) async throws -> Recording {
        switch destination {
        case .memory(let file):
            guard manifest.protocolVersion >= PluginProtocol.recordingIntoFile else {
                throw FieldHALError(.unsupported, subject: "plugin \(manifest.name)",
                                    detail: "recording into memory needs plugin protocol \(PluginProtocol.recordingIntoFile); the plugin speaks \(manifest.protocolVersion)",
                                    advice: "update the plugin (evidence is recorded into memory so that it never reaches the disk in plaintext)")
            }
            return try recording(try await call(method, parameters, adding: ["into": .string("file")], passing: file.descriptor, "file", lasting: duration))
        case .entry(let name, let directory):
            return try recording(try await call(method, parameters, adding: ["file": .string(name)], passing: directory, "directory", lasting: duration))
        case .path(let path):
            let directory = try RecordingDirectory(beside: path, plugin: manifest.name)
            let answer = try await call(method, parameters, descriptors: [try directory.descriptor()], timeout: duration + .seconds(30), holding: directory)
            let recorded = try recording(answer.result)
            try directory.commit(PluginProtocol.recordingFile(capability), to: path)
            return recorded
        }
    }

    /// The request with `fields` added and a copy of `descriptor` beside it (the channel
    /// closes what it sends; the caller's stays the caller's); the answer's result.
    private func call(_ method: String, _ parameters: JSONValue, adding fields: [String: JSONValue], passing descriptor: Int32,
                      _ what: String, lasting duration: Duration) async throws -> JSONValue {
        let copy = fcntl(descriptor, F_DUPFD_CLOEXEC, 0)
        guard copy >= 0 else {
            throw FieldHALError(.io, subject: "plugin \(manifest.name)", detail: "cannot pass the recording's \(what): \(SystemError.describe())")
        }
        let request = JSONValue.object((parameters.object ?? [:]).merging(fields) { _, added in added })
        return try await call(method, request, descriptors: [OwnedDescriptor(copy)], timeout: duration + .seconds(30)).result
    }
}

extension RequestLink.Hold {
    /// A recording in segments (protocol 1.5): each segment comes as a `$/progress` with its
    /// sealed memfd and is handed to `segments.closed` at once, in order; a finish asked of
    /// `segments` goes to the plugin as `camera.finish` / `microphone.finish`. A segment out
    /// of order, or an answer that does not count what was sent, is the plugin's fault: the
    /// segments received before it stay the caller's. A plugin of 1.4 records
    /// `oneAtATime` (each segment on its own, into a file it is given).
    func record<Recording: Sendable>(_ method: String, _ parameters: JSONValue, lasting duration: Duration, in segments: RecordingSegments<Recording>,
                                     oneAtATime: () async throws -> Void,
                                     _ recording: @escaping @Sendable (JSONValue, String) throws(FieldHALError) -> Recording) async throws {
        guard manifest.protocolVersion >= PluginProtocol.segmentedRecording else { return try await oneAtATime() }
        try segments.validate(subject: "plugin \(manifest.name)")
        let plugin = manifest.name
        // What the plugin sent, and the first fault in it (seen on the session's thread).
        let received = Mutex<(count: Int, fault: FieldHALError?)>((0, nil))
        segments.finish.onFinish { [self] in notify(PluginProtocol.finishMethod(capability), .object([:])) }
        let answer = try await call(method, PluginProtocol.segmented(parameters, length: segments.length), descriptors: [],
                                    timeout: duration + .seconds(30), progress: { value, descriptors in
            received.withLock { state in
                guard state.fault == nil else { return }
                do throws(FieldHALError) {
                    let segment = try PluginProtocol.segment(from: value, descriptors, plugin: plugin, recording)
                    guard segment.sequence == state.count else {
                        throw FieldHALError(.protocolError, subject: "plugin \(plugin)", detail: "sent segment \(segment.sequence) where \(state.count) was due",
                                            advice: "a fault in the plugin: segments go in order from 0")
                    }
                    state.count += 1
                    segments.closed(segment)
                } catch {
                    state.fault = error
                }
            }
        })
        let (count, fault) = received.withLock { ($0.count, $0.fault) }
        if let fault { throw fault }
        guard answer.result["segments"]?.integer == Int64(count) else {
            throw FieldHALError(.protocolError, subject: "plugin \(plugin)",
                                detail: "answered the recording with \(answer.result["segments"]?.integer.map { "\($0)" } ?? "no count of") segments after sending \(count)",
                                advice: "a fault in the plugin: docs/plugin-protocol.md, \"Recording in segments\"")
        }
    }
}

/// Where a plugin writes a recording: a private directory (0700) beside the recording's
/// path, so that the finished file is renamed into place on the same filesystem and
/// appears there whole, as an in-process recording does. The plugin gets the directory as
/// a descriptor (no path is sent). The directory and whatever is left in it go when the
/// last holder lets go: the recording's caller, and — when the caller was cancelled and
/// returned at once — the plugin session, until the plugin has answered (its own
/// cancellation may still be writing and removing files in it).
final class RecordingDirectory: Sendable {
    let path: String
    /// The destination's directory, where the finished file is renamed to.
    private let parent: String
    private let plugin: String

    init(beside destination: String, plugin: String) throws(FieldHALError) {
        self.plugin = plugin
        let directory = (destination as NSString).deletingLastPathComponent
        parent = directory.isEmpty ? "." : directory
        var template = Array("\(parent)/.fieldhal-plugin-XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw FieldHALError(.io, subject: "plugin \(plugin)", detail: "cannot make a directory for the recording beside \(destination): \(SystemError.describe())",
                                advice: "check that \(parent) exists and is writable")
        }
        path = String(cString: made)
    }

    /// The directory, opened for the plugin (`O_PATH` is not enough: it writes through it).
    func descriptor() throws(FieldHALError) -> OwnedDescriptor {
        let descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw FieldHALError(.io, subject: "plugin \(plugin)", detail: "cannot open \(path): \(SystemError.describe())")
        }
        return OwnedDescriptor(descriptor)
    }

    /// Moves the plugin's finished file to `destination` and makes the rename durable. A
    /// plugin that answered without writing it is at fault.
    func commit(_ file: String, to destination: String) throws(FieldHALError) {
        let written = "\(path)/\(file)"
        var status = stat()
        guard lstat(written, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
            throw FieldHALError(.protocolError, subject: "plugin \(plugin)", detail: "answered the recording without writing \(file) into the directory it was given",
                                advice: "a fault in the plugin: docs/plugin-protocol.md, \"Camera, microphone, speaker\"")
        }
        guard rename(written, destination) == 0 else {
            throw FieldHALError(.io, subject: "plugin \(plugin)", detail: "cannot move the recording to \(destination): \(SystemError.describe())")
        }
        let directory = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directory >= 0 {
            fsync(directory)
            Glibc.close(directory)
        }
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }
}
