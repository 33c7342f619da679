import FieldHAL
import FieldHALPluginProtocol
import FieldHALSystem
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// Serves one `PluginDescriptor` as an external plugin process: the plugin side of
/// docs/plugin-protocol.md, on standard input and output.
///
/// A plugin executable in Swift is this, with its descriptor:
///
/// ```swift
/// let status = await PluginServer(MyPlugin.descriptor, version: "1.0.0").serve()
/// exit(status)
/// ```
///
/// What it serves: the handshake (the descriptor's name and capabilities), `open` with the
/// section's parameters (checked against the descriptor's specs here too; each capability
/// once, several in one process since 1.2; since 1.6 any number of devices, each named by
/// the host's handle, which every request for it carries) and `close`, location
/// (`gps.watch`, `gps.fix`, `gps.lost`), NFC (`nfc.read`, `nfc.write`, `nfc.emulate`),
/// haptics (`haptics.play`), biometrics (`biometrics.availability`, `biometrics.verify`,
/// `biometrics.enroll` with its stages as `$/progress`), and since 1.3 the camera
/// (`camera.formats`, `camera.still`, `camera.record`), the microphone
/// (`microphone.record`) and the speaker (`speaker.play`), whose bytes travel as
/// descriptors beside the messages; `$/cancel`, `shutdown` and `exit`, and the end of
/// standard input. A failed request answers with the `FieldHALError` in `data`, so the
/// host reports the same typed error, advice and all.
///
/// Threads: standard input is read on a thread of its own (`DeviceThread`), never on
/// Swift's cooperative pool. A message is written at once, without waiting, by whoever
/// sends it (a fix on the receiver's thread); what the socket cannot take at once is
/// written by a writer thread that waits for room.
public final class PluginServer: Sendable {
    public let descriptor: PluginDescriptor
    /// The name the plugin says in `initialize`: its manifest's name.
    public let name: String
    public let version: String
    private let input: Int32
    private let output: Int32
    private let writer = DeviceThread(name: "plugin output")
    private let outbox = LockedValue(Outbox())
    private let state = LockedValue(State())

    private struct State {
        /// What the host opened: before 1.6 one device per capability (since 1.2 a process
        /// may serve several capabilities, e.g. an NFC chip's reader and emulator sharing
        /// one device); since 1.6 each device under the host's handle.
        var opened: [Opened: CapabilityProvider] = [:]
        /// Running requests (for `$/cancel`, and for `close` of the device they use)
        /// and streams, by the request's id.
        var requests: [Int64: (device: Opened?, task: Task<Void, Never>)] = [:]
        var streams: [Int64: (device: Opened, subscription: Subscription)] = [:]
        /// The segmented recording running on a camera or microphone (1.5): what its
        /// `camera.finish` / `microphone.finish` asks to end at the next boundary.
        var finishing: [Opened: RecordingFinish] = [:]
    }

    /// A device the host opened: its capability and (1.6) the handle the host named it by.
    private struct Opened: Hashable {
        var capability: Capability
        var handle: String?

        init(_ capability: Capability, _ parameters: JSONValue) {
            self.capability = capability
            self.handle = PluginProtocol.device(in: parameters)
        }

        /// How errors name it: `camera` or `camera camera-2`.
        var description: String { handle.map { "\(capability) \($0)" } ?? capability.rawValue }
    }

    /// The open device a request names, if there is one.
    private func provider(_ capability: Capability, _ parameters: JSONValue) -> CapabilityProvider? {
        state.withLock { $0.opened[Opened(capability, parameters)] }
    }

    /// `name` defaults to the descriptor's; `input` and `output` to standard input and output.
    public init(_ descriptor: PluginDescriptor, name: String? = nil, version: String, input: Int32 = 0, output: Int32 = 1) {
        self.descriptor = descriptor
        self.name = name ?? descriptor.name
        self.version = version
        self.input = input
        self.output = output
    }

    /// Serves until `exit` or the end of the input; returns the process's exit status
    /// (0, or 1 when the host sent something that is not the protocol).
    public func serve() async -> Int32 {
        let messages = AsyncStream<MessageReader.Incoming>.makeStream()
        let reader = DeviceThread(name: "plugin input")
        reader.submit { [input] in
            var incoming = MessageReader(descriptor: input)
            while let next = incoming.next() {
                messages.continuation.yield(next)
                if case .fault = next { break }
            }
            messages.continuation.finish()
        }
        defer { reader.stop() }
        var status: Int32 = 0
        reading: for await next in messages.stream {
            switch next {
            case .fault(let fault):
                StandardError.write("\(name): \(fault)")
                status = 1
                break reading
            case .message(let message, let descriptors):
                if await handle(message, descriptors) == .exit { break reading }
            }
        }
        await shutDown()
        writer.stop()
        return status
    }

    private enum Next { case goOn, exit }

    private func handle(_ message: JSONValue, _ descriptors: [OwnedDescriptor]) async -> Next {
        guard let method = message["method"]?.string else { return .goOn }  // a response: the host asks, it never answers
        let parameters = message["params"] ?? .object([:])
        guard let id = message["id"], id != .null else {
            switch method {
            case "exit": return .exit
            case "$/cancel":
                if let cancelled = parameters["id"]?.integer { cancel(cancelled) }
            case PluginProtocol.finishMethod(.camera):
                state.withLock { $0.finishing[Opened(.camera, parameters)] }?.finish()
            case PluginProtocol.finishMethod(.microphone):
                state.withLock { $0.finishing[Opened(.microphone, parameters)] }?.finish()
            default: break  // notifications not known are ignored
            }
            return .goOn
        }
        switch method {
        case "initialize":
            let capabilities = descriptor.capabilities.keys.sorted().map { JSONValue.string($0.rawValue) }
            send(PluginProtocol.response(id, result: .object([
                "name": .string(name), "version": .string(version),
                "protocol": PluginProtocol.version.json,
                "capabilities": .array(capabilities)])))
        case "open":
            track(id) { [self] in await open(id, parameters) }
        case "close":
            track(id) { [self] in await close(id, parameters) }
        case "gps.watch":
            watchLocation(id, parameters)
        case PluginProtocol.NFCMethod.read, PluginProtocol.NFCMethod.write, PluginProtocol.NFCMethod.emulate:
            let device = Opened(method == PluginProtocol.NFCMethod.emulate ? .nfcEmulator : .nfcReader, parameters)
            track(id, on: device) { [self] in await nfc(method, id, parameters) }
        case PluginProtocol.HapticsMethod.play:
            track(id, on: Opened(.haptics, parameters)) { [self] in await playHaptics(id, parameters) }
        case PluginProtocol.BiometricsMethod.availability, PluginProtocol.BiometricsMethod.verify, PluginProtocol.BiometricsMethod.enroll:
            track(id, on: Opened(.biometrics, parameters)) { [self] in await biometrics(method, id, parameters) }
        case PluginProtocol.CameraMethod.formats, PluginProtocol.CameraMethod.still, PluginProtocol.CameraMethod.record:
            let device = Opened(.camera, parameters)
            let finish = segmentedRecordingStarts(method == PluginProtocol.CameraMethod.record, parameters, on: device)
            track(id, on: device) { [self] in
                await camera(method, id, parameters, descriptors, finish)
                segmentedRecordingEnded(finish, on: device)
            }
        case PluginProtocol.MicrophoneMethod.record:
            let device = Opened(.microphone, parameters)
            let finish = segmentedRecordingStarts(true, parameters, on: device)
            track(id, on: device) { [self] in
                await recordAudio(id, parameters, descriptors, finish)
                segmentedRecordingEnded(finish, on: device)
            }
        case PluginProtocol.SpeakerMethod.play:
            track(id, on: Opened(.speaker, parameters)) { [self] in await playSound(id, parameters, descriptors) }
        case "shutdown":
            await shutDown()
            send(PluginProtocol.response(id, result: .null))
        default:
            send(PluginProtocol.response(id, code: -32601, message: "method not found: \(method)"))
        }
        return .goOn
    }

    /// Runs a request in a task of its own, so that `$/cancel` can reach it and the input
    /// is read on meanwhile.
    private func track(_ id: JSONValue, on device: Opened? = nil, _ work: @escaping @Sendable () async -> Void) {
        guard let number = id.integer else {
            Task { await work() }
            return
        }
        // Made under the lock, so that a request that ends at once finds itself there to
        // remove (else its entry would outlive it).
        state.withLock { state in
            state.requests[number] = (device, Task { [state = self.state] in
                await work()
                state.withLock { _ = $0.requests.removeValue(forKey: number) }
            })
        }
    }

    /// A segmented recording's finish, made as its request is read (before any later
    /// message: a finish sent right after the request must find it).
    private func segmentedRecordingStarts(_ recording: Bool, _ parameters: JSONValue, on device: Opened) -> RecordingFinish? {
        guard recording, parameters["into"]?.string == "segments" else { return nil }
        let finish = RecordingFinish()
        state.withLock { $0.finishing[device] = finish }
        return finish
    }

    /// Forgets the recording's finish once its request has been answered, however it ended
    /// (a request refused before it recorded included); a newer recording's stays.
    private func segmentedRecordingEnded(_ finish: RecordingFinish?, on device: Opened) {
        guard let finish else { return }
        state.withLock { if $0.finishing[device] === finish { $0.finishing[device] = nil } }
    }

    /// Runs a segmented recording (1.5): each segment goes to the host as it closes, as a
    /// `$/progress` with the file sealed beside it; the answer counts them.
    private func recordSegments<Recording: Sendable>(_ id: JSONValue, length: Duration, finish: RecordingFinish,
                                                      details: @escaping @Sendable (Recording) -> JSONValue,
                                                      _ record: (RecordingSegments<Recording>) async throws -> Void) async throws -> JSONValue {
        let sent = LockedValue(0)
        let failure = LockedValue<FieldHALError?>(nil)
        try await record(RecordingSegments(length: length, finish: finish) { [self] segment in
            do throws(FieldHALError) {
                let (value, memory) = try PluginProtocol.progress(of: segment, recording: details(segment.recording))
                send(PluginProtocol.notification(PluginProtocol.progress, .object(["id": id, "value": value, "fds": .integer(1)])), descriptors: [memory])
                sent.withLock { $0 += 1 }
            } catch {
                // The segment cannot be sent: end the recording rather than send a chain with a hole.
                failure.withLock { $0 = $0 ?? error }
                finish.finish()
            }
        })
        if let failure = failure.withLock({ $0 }) { throw failure }
        return .object(["segments": .integer(Int64(sent.withLock { $0 }))])
    }

    private func cancel(_ id: Int64) {
        let (request, stream) = state.withLock { ($0.requests.removeValue(forKey: id), $0.streams.removeValue(forKey: id)) }
        request?.task.cancel()
        stream?.subscription.cancel()
    }

    private func open(_ id: JSONValue, _ parameters: JSONValue) async {
        do throws(FieldHALError) {
            guard let capabilityName = parameters["capability"]?.string, let capability = Capability(rawValue: capabilityName) else {
                throw FieldHALError(.invalidArgument, subject: name, detail: "open without a capability this plugin knows")
            }
            guard let specs = descriptor.capabilities[capability] else {
                throw FieldHALError(.unsupported, subject: name, detail: "does not provide \(capability)")
            }
            let device = Opened(capability, parameters)
            guard state.withLock({ $0.opened[device] == nil }) else {
                throw FieldHALError(.busy, subject: name, detail: "\(device.description) is already open in this process",
                                    advice: "close it first (the host's close)")
            }
            // The host checked the section against the manifest; the plugin checks again,
            // since a manifest and its executable can disagree.
            let values = (parameters["parameters"]?.object ?? [:]).compactMapValues(ConfigValue.init)
            let checked: PluginParameters
            do {
                checked = try PluginParameters.checked(values, against: specs, section: capability.rawValue, source: "open from the host")
            } catch {
                throw FieldHALError(.invalidArgument, subject: "plugin \(name)", detail: "\(error)",
                                    advice: "the plugin's manifest and its executable disagree on [\(capability)]'s parameters")
            }
            let provider: CapabilityProvider
            do {
                provider = try await descriptor.open(capability, checked,
                                                     PluginContext(configDirectory: FileManager.default.currentDirectoryPath,
                                                                   stateDirectory: FileManager.default.currentDirectoryPath))
            } catch let error as FieldHALError {
                throw error
            } catch {
                throw FieldHALError(.unavailable, subject: name, detail: "\(error)")
            }
            if Task.isCancelled {
                await provider.device.close()
                throw FieldHALError.cancelled(name)
            }
            state.withLock { $0.opened[device] = provider }
            var answer: [String: JSONValue] = ["device": .string(provider.device.deviceName)]
            if let identity = provider.device.identity { answer["identity"] = PluginProtocol.value(of: identity) }
            send(PluginProtocol.response(id, result: .object(answer)))
        } catch {
            send(PluginProtocol.response(id, error: error))
        }
    }

    /// `close` (1.2): releases one device; the others stay open. Requests still running on
    /// it are cancelled first (each answers `cancelled`).
    private func close(_ id: JSONValue, _ parameters: JSONValue) async {
        await answer(id) { [self] in
            guard let capability = parameters["capability"]?.string.flatMap(Capability.init(rawValue:)) else {
                throw FieldHALError(.invalidArgument, subject: name, detail: "close without a capability")
            }
            let device = Opened(capability, parameters)
            let (provider, running, streams) = state.withLock { state in
                let running = state.requests.filter { $0.value.device == device }
                for id in running.keys { state.requests.removeValue(forKey: id) }
                let streams = state.streams.filter { $0.value.device == device }
                for id in streams.keys { state.streams.removeValue(forKey: id) }
                return (state.opened.removeValue(forKey: device), running.values.map(\.task), streams.values.map(\.subscription))
            }
            guard let provider else {
                throw FieldHALError(.notConfigured, subject: name, detail: "close of \(device.description), which is not open")
            }
            // Its streams and running requests end first (each request answers `cancelled`),
            // then the device closes.
            for stream in streams { stream.cancel() }
            for task in running { task.cancel() }
            for task in running { await task.value }
            await provider.device.close()
            return .null
        }
    }

    /// `gps.watch`: the stream's number is the request's id; every fix the provider hands
    /// over is a `gps.fix`, a source it lost a `gps.lost`.
    private func watchLocation(_ id: JSONValue, _ parameters: JSONValue) {
        let device = Opened(.location, parameters)
        guard case .location(let location)? = provider(.location, parameters), let number = id.integer else {
            send(PluginProtocol.response(id, error: FieldHALError(.notConfigured, subject: name, detail: "gps.watch before gps is open")))
            return
        }
        send(PluginProtocol.response(id, result: .object(["stream": .integer(number)])))
        let subscription = location.follow({ [self] fix in
            if fix.mode == .noFix, let problem = fix.sourceProblem {
                send(PluginProtocol.notification("gps.lost", .object(["stream": .integer(number), "reason": .string(problem)])))
            } else {
                send(PluginProtocol.notification("gps.fix", .object(["stream": .integer(number), "fix": PluginProtocol.value(of: fix)])))
            }
        }, end: { [self] error in
            let reason = error.map { "\($0)" } ?? "the receiver's stream ended"
            send(PluginProtocol.notification("gps.lost", .object(["stream": .integer(number), "reason": .string(reason)])))
        })
        state.withLock { $0.streams[number] = (device, subscription) }
    }

    /// `nfc.read`, `nfc.write`, `nfc.emulate`: one operation of the open reader or emulator,
    /// answered with its tag or outcome, or its typed error. `$/cancel` cancels the task
    /// it runs in, and with it the device's wait.
    private func nfc(_ method: String, _ id: JSONValue, _ parameters: JSONValue) async {
        let subject = "\(method) from the host"
        await answer(id) { [self] in
            let wanted: Capability = method == PluginProtocol.NFCMethod.emulate ? .nfcEmulator : .nfcReader
            switch (method, provider(wanted, parameters)) {
            case (PluginProtocol.NFCMethod.read, .nfcReader(let reader)?):
                let timeout = try PluginProtocol.timeout(in: parameters, subject: subject)
                return .object(["tag": try PluginProtocol.value(of: try await reader.readTag(timeout: timeout))])
            case (PluginProtocol.NFCMethod.write, .nfcReader(let reader)?):
                let timeout = try PluginProtocol.timeout(in: parameters, subject: subject)
                let message = try PluginProtocol.message(from: parameters["message"], subject: subject)
                return .object(["tag": try PluginProtocol.value(of: try await reader.write(message, timeout: timeout))])
            case (PluginProtocol.NFCMethod.emulate, .nfcEmulator(let emulator)?):
                let timeout = try PluginProtocol.timeout(in: parameters, subject: subject)
                let message = try PluginProtocol.message(from: parameters["message"], subject: subject)
                return PluginProtocol.value(of: try await emulator.emulate(message, timeout: timeout))
            default:
                throw FieldHALError(.notConfigured, subject: name, detail: "\(method) before \(wanted) is open")
            }
        }
    }

    /// `haptics.play`: the pattern, answered with what was played when it has finished;
    /// `$/cancel` stops it.
    private func playHaptics(_ id: JSONValue, _ parameters: JSONValue) async {
        await answer(id) { [self] in
            guard case .haptics(let engine)? = provider(.haptics, parameters) else {
                throw FieldHALError(.notConfigured, subject: name, detail: "haptics.play before haptics is open")
            }
            return PluginProtocol.value(of: try await engine.play(try PluginProtocol.pattern(from: parameters, subject: "haptics.play from the host")))
        }
    }

    /// `biometrics.availability`, `biometrics.verify`, `biometrics.enroll`: one operation
    /// of the open sensor. An enrollment's stages are `$/progress` notifications, each sent
    /// as the sensor reports it, before the answer; `$/cancel` stops either wait.
    private func biometrics(_ method: String, _ id: JSONValue, _ parameters: JSONValue) async {
        let subject = "\(method) from the host"
        await answer(id) { [self] in
            guard case .biometrics(let sensor)? = provider(.biometrics, parameters) else {
                throw FieldHALError(.notConfigured, subject: name, detail: "\(method) before biometrics is open")
            }
            switch method {
            case PluginProtocol.BiometricsMethod.availability:
                return PluginProtocol.value(of: try await sensor.availability())
            case PluginProtocol.BiometricsMethod.verify:
                return PluginProtocol.value(of: try await sensor.verify(timeout: try PluginProtocol.timeout(in: parameters, subject: subject)))
            default:
                let finger = try PluginProtocol.finger(in: parameters, subject: subject)
                try await sensor.enroll(finger) { [self] stage in
                    send(PluginProtocol.notification(PluginProtocol.progress, .object(["id": id, "value": PluginProtocol.value(of: stage)])))
                }
                return .null
            }
        }
    }

    /// `camera.formats`, `camera.still` (the JPEG answered in a sealed memfd) and
    /// `camera.record` (written into the directory the host passed).
    private func camera(_ method: String, _ id: JSONValue, _ parameters: JSONValue, _ descriptors: [OwnedDescriptor], _ finish: RecordingFinish?) async {
        let subject = "\(method) from the host"
        do {
            guard case .camera(let camera)? = provider(.camera, parameters) else {
                throw FieldHALError(.notConfigured, subject: name, detail: "\(method) before camera is open")
            }
            switch method {
            case PluginProtocol.CameraMethod.formats:
                send(PluginProtocol.response(id, result: PluginProtocol.value(of: try await camera.formats())))
            case PluginProtocol.CameraMethod.still:
                let photo = try await camera.captureStill(try PluginProtocol.photoRequest(from: parameters, subject: subject))
                let (answer, memory) = try PluginProtocol.answer(for: photo)
                send(PluginProtocol.response(id, result: answer), descriptors: [memory])
            default:
                let request = try PluginProtocol.videoRequest(from: parameters, subject: subject)
                if let finish, let length = try PluginProtocol.segmentLength(in: parameters, subject: subject) {
                    let answer = try await recordSegments(id, length: length, finish: finish, details: PluginProtocol.value(of:)) { segments in
                        try await camera.recordVideo(request, in: segments)
                    }
                    send(PluginProtocol.response(id, result: answer))
                    return
                }
                let recording = try await withRecordingDestination(parameters, descriptors, .camera, subject: subject) { destination in
                    try await camera.recordVideo(request, to: destination)
                }
                send(PluginProtocol.response(id, result: PluginProtocol.value(of: recording)))
            }
        } catch {
            send(PluginProtocol.response(id, error: typed(error)))
        }
    }

    /// `microphone.record`: written into the directory the host passed.
    private func recordAudio(_ id: JSONValue, _ parameters: JSONValue, _ descriptors: [OwnedDescriptor], _ finish: RecordingFinish?) async {
        let subject = "microphone.record from the host"
        await answer(id) { [self] in
            guard case .microphone(let microphone)? = provider(.microphone, parameters) else {
                throw FieldHALError(.notConfigured, subject: name, detail: "microphone.record before microphone is open")
            }
            let request = try PluginProtocol.recordingRequest(from: parameters, subject: subject)
            if let finish, let length = try PluginProtocol.segmentLength(in: parameters, subject: subject) {
                return try await recordSegments(id, length: length, finish: finish, details: PluginProtocol.value(of:)) { segments in
                    try await microphone.record(request, in: segments)
                }
            }
            return PluginProtocol.value(of: try await withRecordingDestination(parameters, descriptors, .microphone, subject: subject) { destination in
                try await microphone.record(request, to: destination)
            })
        }
    }

    /// `speaker.play`: the clip from its sealed memfd, answered (null) once it has been heard.
    private func playSound(_ id: JSONValue, _ parameters: JSONValue, _ descriptors: [OwnedDescriptor]) async {
        await answer(id) { [self] in
            guard case .speaker(let speaker)? = provider(.speaker, parameters) else {
                throw FieldHALError(.notConfigured, subject: name, detail: "speaker.play before speaker is open")
            }
            try await speaker.play(try PluginProtocol.clip(from: parameters, descriptors, subject: "speaker.play from the host"))
            return .null
        }
    }

    /// Runs a recording whose file goes where the host's descriptor says: into the directory
    /// it passed (the backend's own atomic write, relative to that descriptor, under a
    /// plain file name; the host moves it into place), or (1.4) into the file passed itself,
    /// written in place.
    private func withRecordingDestination<Result>(_ parameters: JSONValue, _ descriptors: [OwnedDescriptor], _ capability: Capability,
                                                  subject: String, _ record: (RecordingDestination) async throws -> Result) async throws -> Result {
        if parameters["into"]?.string == "file" {
            guard descriptors.count == 1 else {
                throw FieldHALError(.invalidArgument, subject: subject, detail: "a recording into a file needs its descriptor (\"fds\": 1)")
            }
            var status = stat()
            guard fstat(descriptors[0].descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
                throw FieldHALError(.invalidArgument, subject: subject, detail: "the descriptor for a recording into a file is not a regular file")
            }
            return try await record(.memory(MemoryFile(adopting: descriptors[0].take())))
        }
        let file = parameters["file"]?.string ?? PluginProtocol.recordingFile(capability)
        guard descriptors.count == 1, !file.isEmpty, !file.contains("/"), file != ".", file != ".." else {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "a recording needs one directory descriptor (\"fds\": 1) and a plain file name")
        }
        // The descriptor stays open (owned by `descriptors`) until the recording has ended.
        defer { withExtendedLifetime(descriptors) {} }
        return try await record(.entry(file, inDirectory: descriptors[0].descriptor))
    }

    /// Runs a request's work and answers with its result, or its error typed as the host
    /// expects (a cancellation is `cancelled`; anything not a `FieldHALError` is `io`).
    private func answer(_ id: JSONValue, _ work: () async throws -> JSONValue) async {
        do {
            send(PluginProtocol.response(id, result: try await work()))
        } catch {
            send(PluginProtocol.response(id, error: typed(error)))
        }
    }

    /// An error as the host expects it: a cancellation is `cancelled`; anything not a
    /// `FieldHALError` is `io`.
    private func typed(_ error: any Error) -> FieldHALError {
        switch error {
        case let error as FieldHALError: error
        case is CancellationError: .cancelled(name)
        default: FieldHALError(.io, subject: name, detail: "\(error)")
        }
    }

    /// Ends the streams and running requests and releases the device (`shutdown`, `exit`,
    /// the end of the input). Safe to call twice.
    private func shutDown() async {
        let (requests, streams, opened) = state.withLock { state in
            defer { state.requests = [:]; state.streams = [:]; state.opened = [:] }
            return (Array(state.requests.values), Array(state.streams.values), Array(state.opened.values))
        }
        for stream in streams { stream.subscription.cancel() }
        for request in requests { request.task.cancel() }
        for request in requests { await request.task.value }
        for provider in opened { await provider.device.close() }
    }

    /// What is still to be written, in order, and whether the host has gone.
    private struct Outbox {
        var queued: [OutgoingMessage] = []
        var broken = false
    }

    /// Writes a message. The caller's thread writes it at once when the socket takes it
    /// (never waiting: a fix goes out from the receiver's thread with no hop); what the
    /// socket cannot take now is queued for the writer thread, which waits for room. One
    /// lock keeps messages whole and in order. Once the host has gone (EPIPE), the rest is
    /// dropped: the end of the input follows.
    private func send(_ bytes: [UInt8], descriptors: [OwnedDescriptor] = []) {
        let wakeWriter = outbox.withLock { box -> Bool in
            guard !box.broken else { return false }
            let message = OutgoingMessage(bytes, descriptors: descriptors)
            guard box.queued.isEmpty else {
                box.queued.append(message)  // the writer is on it
                return false
            }
            var queue = [message]
            switch PluginProtocol.write(&queue, to: output) {
            case .all: return false
            case .failed: box.broken = true; return false
            case .wouldBlock: box.queued = queue; return true
            }
        }
        if wakeWriter { writer.submit { [self] in flushQueued() } }
    }

    /// On the writer thread: waits for room and writes until nothing is queued.
    private func flushQueued() {
        while true {
            let done = outbox.withLock { box -> Bool in
                guard !box.broken, !box.queued.isEmpty else { return true }
                switch PluginProtocol.write(&box.queued, to: output) {
                case .all: return true
                case .failed: box.broken = true; box.queued = []; return true
                case .wouldBlock: return false
                }
            }
            if done { return }
            // Room on the host's side, or a second to look at `done` again.
            var room = [pollfd(fd: output, events: Int16(POLLOUT), revents: 0)]
            _ = SystemCall.poll(&room, timeout: .seconds(1))
        }
    }
}

/// Messages from the host with blocking reads, each with the descriptors it names.
struct MessageReader {
    enum Incoming: Sendable {
        case message(JSONValue, [OwnedDescriptor])
        /// The host broke the protocol: what to say on standard error before exiting 1.
        case fault(String)
    }

    let descriptor: Int32
    private var buffered: [UInt8] = []
    private var descriptors: [OwnedDescriptor] = []
    private var ended = false
    /// Where each read lands: made once, not per line.
    private var chunk = [UInt8](repeating: 0, count: 65536)

    init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    /// The next message, a fault, or nil at the end of the input.
    mutating func next() -> Incoming? {
        let limit = PluginProtocol.maximumMessage
        while true {
            if let newline = buffered.firstIndex(of: 10) {
                let line = Array(buffered[..<newline])
                buffered.removeSubrange(...newline)
                if line.allSatisfy({ $0 == 32 || $0 == 13 || $0 == 9 }) { continue }
                guard line.count <= limit else { return .fault("a message over \(limit) bytes from the host") }
                guard let message = PluginProtocol.message(line) else { return .fault("the host sent something that is not JSON-RPC 2.0") }
                guard let taken = PluginProtocol.take(for: message, from: &descriptors) else {
                    return .fault("the host sent a message whose \"fds\" is \(PluginProtocol.descriptorCount(of: message)) with \(descriptors.count) descriptors beside it")
                }
                return .message(message, taken)
            }
            if buffered.count > limit { return .fault("a message over \(limit) bytes from the host") }
            if ended { return nil }
            let got = chunk.withUnsafeMutableBytes { PluginProtocol.receive(from: descriptor, into: $0) }
            if !PluginProtocol.accept(got, into: &descriptors) {
                return .fault("the host sent more descriptors than its messages name")
            }
            if got.count > 0 { buffered += chunk[..<got.count]; continue }
            ended = true  // the end of the input, or the host gone: a last line without a newline is dropped
        }
    }
}
