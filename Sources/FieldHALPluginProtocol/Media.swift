import FieldHAL
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The camera, the microphone and the speaker on the channel (docs/plugin-protocol.md,
/// "Camera, microphone, speaker", protocol 1.3). Their bytes never travel in JSON:
///
/// - a still comes back as a sealed memfd holding the JPEG (`SealedMemory`);
/// - a clip to play goes out as a sealed memfd of 16-bit little-endian mono PCM;
/// - a recording is written by the plugin into a directory the host passes as a
///   descriptor (the plugin creates the file relative to it), so the host keeps the file's
///   atomic appearance at its path. The path is not part of the protocol; this is not a
///   sandbox (a plugin runs as the daemon's user, and /proc shows where the directory is).
extension PluginProtocol {
    public enum CameraMethod {
        public static let formats = "camera.formats"
        public static let still = "camera.still"
        public static let record = "camera.record"
    }

    public enum MicrophoneMethod {
        public static let record = "microphone.record"
    }

    public enum SpeakerMethod {
        public static let play = "speaker.play"
    }

    /// The largest still a plugin may hand over, and the largest clip the host sends.
    public static let largestStill = 32 << 20
    public static let largestClip = 16 << 20

    /// The name a recording is written under in the directory the host passes.
    public static func recordingFile(_ capability: Capability) -> String {
        capability == .camera ? "video.avi" : "recording.wav"
    }

    // MARK: - Camera

    public static func value(of formats: [CameraFormat]) -> JSONValue {
        .object(["formats": .array(formats.map { format in
            .object(["pixelFormat": .string(format.pixelFormat), "width": .integer(Int64(format.width)),
                     "height": .integer(Int64(format.height)), "framesPerSecond": .array(format.framesPerSecond.map { .number($0) })])
        })])
    }

    public static func formats(from value: JSONValue, plugin: String) throws(FieldHALError) -> [CameraFormat] {
        guard let items = value["formats"]?.array else { throw wrongAnswer(plugin, "camera.formats without formats") }
        var formats: [CameraFormat] = []
        for item in items {
            guard let pixelFormat = item["pixelFormat"]?.string, let width = item["width"]?.integer, let height = item["height"]?.integer,
                  let rates = item["framesPerSecond"]?.array else {
                throw wrongAnswer(plugin, "a format without pixelFormat, width, height or framesPerSecond")
            }
            formats.append(CameraFormat(pixelFormat: pixelFormat, width: Int(clamping: width), height: Int(clamping: height),
                                        framesPerSecond: rates.compactMap { number($0) }))
        }
        return formats
    }

    public static func value(of request: PhotoRequest) -> JSONValue {
        .object(["width": .integer(Int64(request.width)), "height": .integer(Int64(request.height)),
                 "quality": .integer(Int64(request.quality)), "warmUpFrames": .integer(Int64(request.warmUpFrames))])
    }

    public static func photoRequest(from parameters: JSONValue, subject: String) throws(FieldHALError) -> PhotoRequest {
        PhotoRequest(width: try whole(parameters, "width", 16...4096, subject: subject),
                     height: try whole(parameters, "height", 16...4096, subject: subject),
                     quality: try whole(parameters, "quality", 1...100, subject: subject),
                     warmUpFrames: try whole(parameters, "warmUpFrames", 0...100, subject: subject))
    }

    /// A still's answer: its size and time, the JPEG in a sealed memfd beside it.
    public static func answer(for photo: Photo) throws(FieldHALError) -> (JSONValue, OwnedDescriptor) {
        let memory = try SealedMemory.make(photo.jpeg, name: "fieldhal-still")
        return (.object(["width": .integer(Int64(photo.width)), "height": .integer(Int64(photo.height)),
                         "capturedAt": .string(timeText(photo.capturedAt)), "fds": .integer(1)]), memory)
    }

    /// The still a plugin answered: the JPEG read from its sealed memfd and checked to be
    /// one (a JPEG's start and end markers).
    public static func photo(from answer: JSONValue, _ descriptors: [OwnedDescriptor], plugin: String) throws(FieldHALError) -> Photo {
        guard let width = answer["width"]?.integer, let height = answer["height"]?.integer, width > 0, height > 0,
              let time = answer["capturedAt"]?.string.flatMap(date) else {
            throw wrongAnswer(plugin, "camera.still without width, height or capturedAt")
        }
        guard descriptors.count == 1 else { throw wrongAnswer(plugin, "camera.still without its memfd (\"fds\": 1)") }
        let jpeg = try SealedMemory.read(descriptors[0], limit: largestStill, subject: "plugin \(plugin)")
        guard jpeg.count >= 4, jpeg[0] == 0xFF, jpeg[1] == 0xD8, jpeg[jpeg.count - 2] == 0xFF, jpeg[jpeg.count - 1] == 0xD9 else {
            throw wrongAnswer(plugin, "camera.still's memfd does not hold a JPEG (\(jpeg.count) bytes)")
        }
        return Photo(jpeg: jpeg, width: Int(clamping: width), height: Int(clamping: height), capturedAt: time)
    }

    public static func value(of request: VideoRequest) -> JSONValue {
        .object(["durationMs": .integer(Int64(request.duration.milliseconds)), "width": .integer(Int64(request.width)),
                 "height": .integer(Int64(request.height)), "framesPerSecond": .integer(Int64(request.framesPerSecond)),
                 "quality": .integer(Int64(request.quality)), "file": .string(recordingFile(.camera)), "fds": .integer(1)])
    }

    public static func videoRequest(from parameters: JSONValue, subject: String) throws(FieldHALError) -> VideoRequest {
        let request = VideoRequest(duration: .milliseconds(try whole(parameters, "durationMs", 1...3_600_000, subject: subject)),
                                   width: try whole(parameters, "width", 16...4096, subject: subject),
                                   height: try whole(parameters, "height", 16...4096, subject: subject),
                                   framesPerSecond: try whole(parameters, "framesPerSecond", 1...120, subject: subject),
                                   quality: try whole(parameters, "quality", 1...100, subject: subject))
        do { try request.validate(subject: subject) } catch { throw error as? FieldHALError ?? wrongRequest(subject, "\(error)") }
        return request
    }

    public static func value(of recording: VideoRecording) -> JSONValue {
        var value: [String: JSONValue] = [
            "width": .integer(Int64(recording.width)), "height": .integer(Int64(recording.height)),
            "frames": .integer(Int64(recording.frames)), "durationSeconds": .number(recording.durationSeconds),
            "droppedFrames": .integer(Int64(recording.droppedFrames)), "bytes": .integer(Int64(recording.bytes)),
            "stoppedAtSizeLimit": .bool(recording.stoppedAtSizeLimit), "stoppedForDiskSpace": .bool(recording.stoppedForDiskSpace)]
        if let failure = recording.endedEarly { value["endedEarly"] = self.value(of: failure) }
        return .object(value)
    }

    public static func videoRecording(from answer: JSONValue, path: String, plugin: String) throws(FieldHALError) -> VideoRecording {
        guard let width = answer["width"]?.integer, let height = answer["height"]?.integer, let frames = answer["frames"]?.integer,
              let duration = answer["durationSeconds"].flatMap(number), let bytes = answer["bytes"]?.integer else {
            throw wrongAnswer(plugin, "camera.record without width, height, frames, durationSeconds or bytes")
        }
        return VideoRecording(path: path, width: Int(clamping: width), height: Int(clamping: height), frames: Int(clamping: frames),
                              durationSeconds: duration, droppedFrames: Int(clamping: answer["droppedFrames"]?.integer ?? 0),
                              bytes: Int(clamping: bytes), stoppedAtSizeLimit: answer["stoppedAtSizeLimit"]?.bool ?? false,
                              stoppedForDiskSpace: answer["stoppedForDiskSpace"]?.bool ?? false,
                              endedEarly: try endedEarly(answer, plugin: plugin, capability: "camera"))
    }

    // MARK: - Microphone

    public static func value(of request: RecordingRequest) -> JSONValue {
        .object(["durationMs": .integer(Int64(request.duration.milliseconds)), "sampleRate": .integer(Int64(request.sampleRate)),
                 "channels": .integer(Int64(request.channels)), "format": .string(request.format.rawValue),
                 "file": .string(recordingFile(.microphone)), "fds": .integer(1)])
    }

    public static func recordingRequest(from parameters: JSONValue, subject: String) throws(FieldHALError) -> RecordingRequest {
        guard let format = parameters["format"]?.string.flatMap(SampleFormat.init(rawValue:)) else {
            throw wrongRequest(subject, "format must be S16_LE or S32_LE")
        }
        let request = RecordingRequest(duration: .milliseconds(try whole(parameters, "durationMs", 1...21_600_000, subject: subject)),
                                       sampleRate: try whole(parameters, "sampleRate", 8_000...192_000, subject: subject),
                                       channels: try whole(parameters, "channels", 1...8, subject: subject), format: format)
        do { try request.validate(subject: subject) } catch { throw error as? FieldHALError ?? wrongRequest(subject, "\(error)") }
        return request
    }

    public static func value(of recording: AudioRecording) -> JSONValue {
        var value: [String: JSONValue] = [
            "sampleRate": .integer(Int64(recording.sampleRate)), "channels": .integer(Int64(recording.channels)),
            "format": .string(recording.format.rawValue), "frames": .integer(Int64(recording.frames)),
            "peakDBFS": .number(recording.peakDBFS), "rmsDBFS": .number(recording.rmsDBFS),
            "overruns": .integer(Int64(recording.overruns))]
        if let failure = recording.endedEarly { value["endedEarly"] = self.value(of: failure) }
        return .object(value)
    }

    /// A recording's `endedEarly`: absent or null when it ran its length; an
    /// error the host cannot read is the plugin's fault, not a recording that ended well.
    static func endedEarly(_ answer: JSONValue, plugin: String, capability: String) throws(FieldHALError) -> FieldHALError? {
        guard let value = answer["endedEarly"], value != .null else { return nil }
        guard let failure = error(from: value, subject: "plugin \(plugin)") else {
            throw wrongAnswer(plugin, "\(capability).record with an endedEarly that is not an error (kind and detail)")
        }
        return failure
    }

    public static func audioRecording(from answer: JSONValue, path: String, plugin: String) throws(FieldHALError) -> AudioRecording {
        guard let rate = answer["sampleRate"]?.integer, let channels = answer["channels"]?.integer,
              let format = answer["format"]?.string.flatMap(SampleFormat.init(rawValue:)), let frames = answer["frames"]?.integer,
              let peak = answer["peakDBFS"].flatMap(number), let rms = answer["rmsDBFS"].flatMap(number) else {
            throw wrongAnswer(plugin, "microphone.record without sampleRate, channels, format, frames, peakDBFS or rmsDBFS")
        }
        return AudioRecording(path: path, sampleRate: Int(clamping: rate), channels: Int(clamping: channels), format: format,
                              frames: Int(clamping: frames), peakDBFS: peak, rmsDBFS: rms,
                              overruns: Int(clamping: answer["overruns"]?.integer ?? 0),
                              endedEarly: try endedEarly(answer, plugin: plugin, capability: "microphone"))
    }

    // MARK: - Speaker

    /// `speaker.play`'s parameters, the clip's samples in a sealed memfd beside them.
    public static func request(playing clip: SoundClip) throws(FieldHALError) -> (JSONValue, OwnedDescriptor) {
        guard clip.samples.count * 2 <= largestClip else {
            throw FieldHALError(.invalidArgument, subject: "sound clip \(clip.name)", detail: "\(clip.samples.count) samples: at most \(largestClip / 2) go to a plugin")
        }
        // Little-endian on the wire: the samples' own bytes on every machine Swift on Linux runs.
        #if _endian(little)
        let made = clip.samples.withUnsafeBytes { bytes in Result { () throws(FieldHALError) in try SealedMemory.make(bytes, name: "fieldhal-clip") } }
        let memory = try made.get()
        #else
        let memory = try SealedMemory.make(clip.samples.flatMap { withUnsafeBytes(of: $0.littleEndian, Array.init) }, name: "fieldhal-clip")
        #endif
        return (.object(["name": .string(clip.name), "sampleRate": .integer(Int64(clip.sampleRate)),
                         "frames": .integer(Int64(clip.samples.count)), "fds": .integer(1)]), memory)
    }

    /// The clip a `speaker.play` carries: the memfd must hold exactly `frames` samples.
    public static func clip(from parameters: JSONValue, _ descriptors: [OwnedDescriptor], subject: String) throws(FieldHALError) -> SoundClip {
        let rate = try whole(parameters, "sampleRate", 8_000...192_000, subject: subject)
        let frames = try whole(parameters, "frames", 1...(largestClip / 2), subject: subject)
        guard descriptors.count == 1 else { throw wrongRequest(subject, "speaker.play without its memfd (\"fds\": 1)") }
        let bytes = try SealedMemory.read(descriptors[0], limit: largestClip, subject: subject)
        guard bytes.count == frames * 2 else {
            throw wrongRequest(subject, "the memfd holds \(bytes.count) bytes for \(frames) 16-bit samples")
        }
        let samples = [Int16](unsafeUninitializedCapacity: frames) { buffer, count in
            bytes.withUnsafeBytes { raw in
                for index in 0..<frames { buffer[index] = Int16(littleEndian: raw.loadUnaligned(fromByteOffset: 2 * index, as: Int16.self)) }
            }
            count = frames
        }
        return SoundClip(name: parameters["name"]?.string ?? "clip", sampleRate: rate, samples: samples)
    }

    // MARK: - Checks

    private static func number(_ value: JSONValue) -> Double? {
        switch value {
        case .integer(let whole): Double(whole)
        case .number(let real): real
        default: nil
        }
    }

    private static func whole(_ parameters: JSONValue, _ key: String, _ range: ClosedRange<Int>, subject: String) throws(FieldHALError) -> Int {
        guard let value = parameters[key]?.integer, range.contains(Int(clamping: value)) else {
            throw wrongRequest(subject, "\(key) must be an integer from \(range.lowerBound) to \(range.upperBound)")
        }
        return Int(value)
    }

    private static func wrongRequest(_ subject: String, _ detail: String) -> FieldHALError {
        FieldHALError(.invalidArgument, subject: subject, detail: detail, advice: "docs/plugin-protocol.md gives each method's fields")
    }

    private static func wrongAnswer(_ plugin: String, _ detail: String) -> FieldHALError {
        FieldHALError(.protocolError, subject: "plugin \(plugin)", detail: "answered \(detail)",
                      advice: "a fault in the plugin: docs/plugin-protocol.md gives the answer's fields")
    }
}
