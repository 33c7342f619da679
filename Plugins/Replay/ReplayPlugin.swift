import FieldHAL
import FieldHALMedia
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A kit played back from a trace (`fieldhal record`, `KitTrace`): a receiver gives the
/// trace's fixes at the times they came, a reader the trace's tags in the order they were
/// found, and the haptics, the speaker, the fingerprint sensor, the camera and the
/// microphone answer each request as the field's device answered the same request, in turn,
/// after as long (a pattern's steps, a verification's outcome, a still or a recording of the
/// same size and length, the same error), at the recorded speed or faster. A field fault,
/// brought back to the bench.
public enum ReplayPlugin {
    public static let descriptor = PluginDescriptor(
        name: "replay",
        summary: "a kit recorded with `fieldhal record`, played back",
        capabilities: [.location: parameters, .nfcReader: parameters, .haptics: parameters, .speaker: parameters,
                       .biometrics: parameters, .camera: parameters, .microphone: parameters],
        open: open
    )

    static let parameters: [ParameterSpec] = [
        ParameterSpec("trace", .string, required: true, help: "the trace file `fieldhal record --output` wrote (relative to the configuration file's folder)"),
        ParameterSpec("device", .string, help: "the trace's device to play, by name (default: the first of this capability in the trace)"),
        ParameterSpec("speed", .number, range: 0.01...1000, help: "how many times faster than recorded (default 1)"),
        ParameterSpec("loop", .boolean, help: "play the trace again when it ends (default false: the device falls silent)"),
    ]

    static func open(_ capability: Capability, _ parameters: PluginParameters, _ context: PluginContext) async throws -> CapabilityProvider {
        guard let file = parameters.string("trace") else {
            throw FieldHALError(.invalidArgument, subject: "replay", detail: "no trace", advice: "set trace = \"PATH\" to a file `fieldhal record` wrote")
        }
        let path = file.hasPrefix("/") ? file : context.configDirectory + "/" + file
        let (_, entries) = try KitTrace.read(path)
        let kind = capability.rawValue
        let wanted = parameters.string("device")
        let devices = entries.map(\.device).filter { $0.hasPrefix(kind + ".") }
        guard let device = wanted.map({ "\(kind).\($0)" }) ?? devices.first, devices.contains(device) else {
            let names = Array(Set(devices)).sorted().joined(separator: ", ")
            throw FieldHALError(.deviceNotFound, subject: "replay \(path)",
                                detail: wanted.map { "holds no \(kind) device named \($0)" } ?? "holds no \(kind) device",
                                advice: names.isEmpty ? "record the kit while its \(kind) device works" : "its \(kind) devices: \(names)")
        }
        let mine = entries.filter { $0.device == device }
        let speed = parameters.number("speed") ?? 1
        let loop = parameters.boolean("loop") ?? false
        let name = "\(device) from \(path.split(separator: "/").last.map(String.init) ?? path)"
        let uses = ReplayedUses(deviceName: name, mine.compactMap(\.use), speed: speed, loop: loop)
        switch capability {
        case .location:
            return .location(ReplayedReceiver(deviceName: name, fixes: mine.compactMap { entry in entry.fix.map { (entry.t, $0) } },
                                              speed: speed, loop: loop))
        case .haptics: return .haptics(ReplayedHaptics(uses: uses))
        case .speaker: return .speaker(ReplayedSpeaker(uses: uses))
        case .biometrics: return .biometrics(ReplayedSensor(uses: uses))
        case .camera: return .camera(ReplayedCamera(uses: uses))
        case .microphone: return .microphone(ReplayedMicrophone(uses: uses))
        default:
            return .nfcReader(ReplayedReader(deviceName: name, tags: mine.compactMap { entry in
                entry.tagState == "found" ? entry.tag.map { (entry.t, $0) } : nil
            }, speed: speed, loop: loop))
        }
    }
}

/// The trace's fixes, each at its recorded time (divided by the speed) from the first watch:
/// a replay starts when someone listens, so that what is played back is what was recorded,
/// from its first fix.
final class ReplayedReceiver: LocationProvider {
    let deviceName: String
    private let recorded: [(Double, Fix)]
    private let speed: Double
    private let loop: Bool
    private let fixes = Broadcaster<Fix>(bufferLimit: 64)
    private let last = LockedValue<ReceivedFix?>(nil)
    private let playing = LockedValue<Task<Void, Never>?>(nil)

    init(deviceName: String, fixes recorded: [(Double, Fix)], speed: Double, loop: Bool) {
        self.deviceName = deviceName
        self.recorded = recorded
        self.speed = speed
        self.loop = loop
    }

    /// Starts playing, once: after the first subscriber is in, so that it hears the first fix.
    private func play() {
        let recorded = recorded, speed = speed, loop = loop, fixes = fixes, last = last
        playing.withLock { playing in
            guard playing == nil else { return }
            playing = Task {
                guard let start = recorded.first?.0 else { return }
                repeat {
                    let began = ContinuousClock.now
                    for (t, fix) in recorded {
                        do { try await Task.sleep(until: began + .seconds((t - start) / speed), clock: .continuous) } catch { return }
                        if fix.hasPosition { last.withLock { $0 = ReceivedFix(fix: fix) } }
                        fixes.yield(fix)
                    }
                } while loop && !Task.isCancelled
            }
        }
    }

    func watch() -> AsyncThrowingStream<Fix, any Error> {
        defer { play() }
        return fixes.subscribe()
    }

    func follow(_ handler: @escaping @Sendable (Fix) -> Void, end: @escaping @Sendable ((any Error)?) -> Void) -> Subscription {
        defer { play() }
        return fixes.subscribe(handler, end: end)
    }

    func lastKnownFix() async -> ReceivedFix? { last.value }

    func close() async {
        playing.value?.cancel()
        fixes.finish()
    }
}

/// The trace's tags, one per read in the order they were found, none before its recorded
/// time (divided by the speed) from the open.
actor ReplayedReader: NFCReader {
    nonisolated let deviceName: String
    private let tags: [(Double, NFCTag)]
    private let speed: Double
    private let loop: Bool
    /// When the current pass of the trace began: the open, or the last wrap (`loop`).
    private var passStarted = ContinuousClock.now
    private var next = 0

    init(deviceName: String, tags: [(Double, NFCTag)], speed: Double, loop: Bool) {
        self.deviceName = deviceName
        self.tags = tags
        self.speed = speed
        self.loop = loop
    }

    func readTag(timeout: Duration) async throws -> NFCTag {
        let subject = "nfc \(deviceName)"
        let deadline = ContinuousClock.now + timeout
        if next == tags.count, loop, !tags.isEmpty {
            next = 0
            passStarted = .now
        }
        if next < tags.count {
            let (t, tag) = tags[next]
            let at = passStarted + .seconds((t - tags[0].0) / speed)
            if at <= deadline {
                try await sleepCancellable(until: at, subject: subject)
                next += 1
                return try Self.readAgain(tag, subject: subject)
            }
        }
        try await sleepCancellable(until: deadline, subject: subject)
        throw FieldHALError(.timeout, subject: subject, detail: "no tag within \(timeout.secondsDescription)")
    }

    /// A tag whose exchanges the trace kept is read again from them, by the procedure a
    /// reader on a chip uses: the same bytes parse the same way, and a tag whose data did
    /// not decode in the field fails the same way here. Each command must be the one the
    /// trace has next (a read that asks otherwise is not the read that was recorded).
    static func readAgain(_ tag: NFCTag, subject: String) throws -> NFCTag {
        guard let exchanges = tag.exchanges, let sak = tag.sak else { return tag }
        let found = NFCTag(type: NFCTagType(sak: sak), uid: tag.uid, atqa: tag.atqa, sak: sak)
        var remaining = exchanges[...]
        func recorded(_ command: [UInt8]) throws -> [UInt8] {
            guard let exchange = remaining.popFirst() else {
                throw FieldHALError(.malformedData, subject: subject, detail: "tag \(tag.uidString): the read sends more commands than the trace kept",
                                    advice: "a trace is what `fieldhal record` writes")
            }
            guard exchange.command == command else {
                throw FieldHALError(.malformedData, subject: subject,
                                    detail: "tag \(tag.uidString): the read sends \(hex(command)) where the trace has \(hex(exchange.command))",
                                    advice: "a trace is what `fieldhal record` writes")
            }
            guard let response = exchange.response else {
                throw FieldHALError(.disconnected, subject: subject, detail: "tag \(tag.uidString) did not answer \(hex(command)) (as recorded)")
            }
            return response
        }
        do {
            var read = try TagReading.read(found, transceive: recorded)
            read.exchanges = exchanges
            return read
        } catch let error as NDEFError {
            throw TagReading.error(error, reading: found, subject: subject)
        }
    }

    private static func hex(_ bytes: [UInt8]) -> String { bytes.map { $0.hex(width: 2, uppercase: true) }.joined() }

    func write(_ message: NDEFMessage, timeout: Duration) async throws -> NFCTag {
        throw FieldHALError(.unsupported, subject: "nfc \(deviceName)", detail: "a replayed reader writes no tag",
                            advice: "write with the kit's own reader")
    }

    func close() async {}

    private func sleepCancellable(until instant: ContinuousClock.Instant, subject: String) async throws {
        do { try await Task.sleep(until: instant, clock: .continuous) } catch { throw FieldHALError.cancelled(subject) }
    }
}

/// A device's uses in the trace, handed out in turn per request: each after as long as the
/// field's device took (divided by the speed), with its answer or its failure. Past the
/// last one the device says so (`unavailable`), or starts again with `loop`.
actor ReplayedUses {
    nonisolated let deviceName: String
    private let uses: [DeviceUse]
    private let speed: Double
    private let loop: Bool
    private var next: [DeviceUse.Request: Int] = [:]

    init(deviceName: String, _ uses: [DeviceUse], speed: Double, loop: Bool) {
        self.deviceName = deviceName
        self.uses = uses
        self.speed = speed
        self.loop = loop
    }

    /// The next use of `request`, once its time has passed; `answer` reads what it answered.
    func play<T: Sendable>(_ request: DeviceUse.Request, _ answer: (DeviceUse) -> T?) async throws -> T {
        let subject = "\(request.capability) \(deviceName)"
        let recorded = uses.filter { $0.request == request }
        var index = next[request, default: 0]
        if index == recorded.count, loop { index = 0 }
        guard index < recorded.count else {
            throw FieldHALError(.unavailable, subject: subject,
                                detail: recorded.isEmpty ? "the trace holds no \(request.rawValue)" : "the trace's \(recorded.count) \(request.rawValue) have been played",
                                advice: "record a session that uses it, or set loop = true to play them again")
        }
        next[request] = index + 1
        let use = recorded[index]
        do { try await Task.sleep(for: .milliseconds(Double(use.milliseconds) / speed)) } catch { throw FieldHALError.cancelled(subject) }
        if let failure = use.failure { throw failure }
        guard let value = answer(use) else {
            throw FieldHALError(.malformedData, subject: subject, detail: "the trace's \(request.rawValue) says neither an answer nor a failure",
                                advice: "a trace is what `fieldhal record` writes")
        }
        return value
    }

    /// The last recorded answer to `request`, at once: for a question whose answer is a
    /// state (the enrolled fingers), not an event.
    func latest<T: Sendable>(_ request: DeviceUse.Request, _ answer: (DeviceUse) -> T?) throws -> T {
        guard let value = uses.last(where: { $0.request == request }).flatMap(answer) else {
            throw FieldHALError(.unavailable, subject: "\(request.capability) \(deviceName)", detail: "the trace holds no \(request.rawValue) answered",
                                advice: "record a session that asks it")
        }
        return value
    }

    func refuse(_ what: String, capability: Capability) -> FieldHALError {
        FieldHALError(.unsupported, subject: "\(capability) \(deviceName)", detail: "a replayed device does not \(what)",
                      advice: "use the kit's own device")
    }
}

struct ReplayedHaptics: HapticsEngine {
    let uses: ReplayedUses
    var deviceName: String { uses.deviceName }

    func play(_ pattern: HapticPattern) async throws -> HapticsPlayed {
        try await uses.play(.hapticsPlay) { $0.played }
    }

    func close() async {}
}

struct ReplayedSpeaker: Speaker {
    let uses: ReplayedUses
    var deviceName: String { uses.deviceName }

    func play(_ clip: SoundClip) async throws {
        try await uses.play(.speakerPlay) { _ in () }
    }

    func close() async {}
}

struct ReplayedSensor: BiometricAuthenticator {
    let uses: ReplayedUses
    var deviceName: String { uses.deviceName }

    func availability() async throws -> BiometricAvailability {
        try await uses.latest(.biometricsAvailability) { $0.availability }
    }

    func verify(timeout: Duration) async throws -> BiometricResult {
        try await uses.play(.biometricsVerify) { $0.biometricResult }
    }

    func enroll(_ finger: Finger, progress: @Sendable (EnrollStage) -> Void) async throws {
        throw await uses.refuse("enroll a finger", capability: .biometrics)
    }

    func close() async {}
}

/// Stills and recordings of the recorded sizes and lengths (a trace keeps them by
/// reference, not their pixels): mid-grey frames, encoded at the quality asked for.
struct ReplayedCamera: Camera {
    let uses: ReplayedUses
    var deviceName: String { uses.deviceName }

    func formats() async throws -> [CameraFormat] { [] }

    func captureStill(_ request: PhotoRequest) async throws -> Photo {
        let still = try await uses.play(.cameraPhoto) { $0.still }
        guard still.width > 0, still.height > 0, still.width <= 4096, still.height <= 4096 else {
            throw FieldHALError(.malformedData, subject: "camera \(deviceName)", detail: "the trace's still is \(still.width)×\(still.height)",
                                advice: "a trace is what `fieldhal record` writes")
        }
        let grey = [UInt8](repeating: 128, count: still.width * still.height * 3)
        return Photo(jpeg: BaselineJPEGEncoder(quality: request.quality).encode(rgb: grey, width: still.width, height: still.height),
                     width: still.width, height: still.height, capturedAt: Date())
    }

    /// The recorded recording's frames, grey, in a Motion-JPEG AVI at `destination`; its report as
    /// the field's camera gave it.
    func recordVideo(_ request: VideoRequest, to destination: RecordingDestination) async throws -> VideoRecording {
        var video = try await uses.play(.cameraRecord) { $0.video }
        guard (1...4096).contains(video.width), (1...4096).contains(video.height), (0...1_000_000).contains(video.frames) else {
            throw FieldHALError(.malformedData, subject: "camera \(deviceName)", detail: "the trace's recording is \(video.width)×\(video.height), \(video.frames) frames",
                                advice: "a trace is what `fieldhal record` writes")
        }
        let frame = BaselineJPEGEncoder(quality: request.quality).encode(rgb: [UInt8](repeating: 128, count: video.width * video.height * 3),
                                                                         width: video.width, height: video.height)
        let writer = try MJPEGAVIWriter(destination, width: video.width, height: video.height)
        for _ in 0..<video.frames { try frame.withUnsafeBytes { try writer.append(jpeg: $0) } }
        try writer.finish(duration: .seconds(video.durationSeconds))
        video.path = destination.name
        return video
    }

    func close() async {}
}

/// Recordings of the recorded lengths, formats and channels, silent (a trace keeps a
/// recording by reference, not its sound); the report as the field's microphone gave it.
struct ReplayedMicrophone: Microphone {
    let uses: ReplayedUses
    var deviceName: String { uses.deviceName }

    func record(_ request: RecordingRequest, to destination: RecordingDestination) async throws -> AudioRecording {
        var audio = try await uses.play(.microphoneRecord) { $0.audio }
        let frameBytes = audio.channels * audio.format.bytesPerSample
        guard (1...8).contains(audio.channels), (1...768_000).contains(audio.sampleRate), (0...audio.sampleRate * 3600).contains(audio.frames) else {
            throw FieldHALError(.malformedData, subject: "microphone \(deviceName)",
                                detail: "the trace's recording is \(audio.frames) frames of \(audio.channels) channels at \(audio.sampleRate) Hz",
                                advice: "a trace is what `fieldhal record` writes")
        }
        let writer = try WAVFileWriter(destination, sampleRate: audio.sampleRate, channels: audio.channels, format: audio.format)
        let second = [UInt8](repeating: 0, count: audio.sampleRate * frameBytes)
        var left = audio.frames
        while left > 0 {
            let frames = min(left, audio.sampleRate)
            try second.withUnsafeBytes { try writer.append(UnsafeRawBufferPointer(rebasing: $0.prefix(frames * frameBytes))) }
            left -= frames
        }
        try writer.finish()
        audio.path = destination.name
        return audio
    }

    func close() async {}
}
