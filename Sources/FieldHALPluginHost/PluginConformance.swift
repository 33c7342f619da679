import FieldHAL
import FieldHALMedia
import FieldHALPluginProtocol
import Foundation

/// `fieldhal plugin test`: the plugin protocol's conformance checks, run against a plugin as
/// it is — built in out of process, or external in any language — per capability it
/// declares: what `docs/plugin-protocol.md` says a plugin answers, each check passed, failed
/// (with what was seen and what the docs say) or skipped (with why). One suite for every
/// implementation, as Android's VTS is.
///
/// The checks talk to the plugin as the host does (a `PluginSession`), so what fails here
/// fails in a kit. A plugin whose capability needs settings (a reader's port) gets them from
/// `parameters`; without them that capability's device checks are skipped, not failed.
public enum PluginConformance {
    public enum Outcome: String, Sendable, Codable {
        case passed, failed, skipped
    }

    /// One check: what was checked (`nfc: nfc.read answers within its bound`), for which
    /// capability (nil: the plugin as a whole), how it went, and what was seen.
    public struct Check: Sendable, Codable, Equatable {
        public var name: String
        public var capability: String?
        public var outcome: Outcome
        public var detail: String
    }

    public struct Report: Sendable, Codable {
        public var plugin: String
        public var version: String
        public var `protocol`: String
        public var checks: [Check]
        public var passed: Bool { !checks.contains { $0.outcome == .failed } }

        enum CodingKeys: String, CodingKey { case plugin, version, `protocol`, checks, passed }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(plugin, forKey: .plugin)
            try container.encode(version, forKey: .version)
            try container.encode(self.protocol, forKey: .protocol)
            try container.encode(checks, forKey: .checks)
            try container.encode(passed, forKey: .passed)
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            plugin = try container.decode(String.self, forKey: .plugin)
            version = try container.decode(String.self, forKey: .version)
            self.protocol = try container.decode(String.self, forKey: .protocol)
            checks = try container.decode([Check].self, forKey: .checks)
        }

        init(plugin: String, version: String, protocol: String, checks: [Check]) {
            self.plugin = plugin
            self.version = version
            self.protocol = `protocol`
            self.checks = checks
        }
    }

    /// Runs every check against `manifest`'s plugin; `parameters` are each capability's
    /// settings, as a configuration section would give them. `progress` hears each check as
    /// it ends (a terminal shows them one by one).
    public static func run(_ manifest: PluginManifest, parameters: [Capability: [String: ConfigValue]] = [:],
                           progress: @escaping @Sendable (Check) -> Void = { _ in }) async -> Report {
        let run = Run(manifest: manifest, progress: progress)
        await run.all(parameters)
        return Report(plugin: manifest.name, version: manifest.version, protocol: manifest.protocolVersion.description, checks: run.checks)
    }

    /// One run's checks, in order.
    final class Run: @unchecked Sendable {
        let manifest: PluginManifest
        let progress: @Sendable (Check) -> Void
        private(set) var checks: [Check] = []
        /// Notifications of the session, for the streams' checks.
        let notifications = LockedValue<[(String, JSONValue)]>([])

        init(manifest: PluginManifest, progress: @escaping @Sendable (Check) -> Void) {
            self.manifest = manifest
            self.progress = progress
        }

        var namesDevices: Bool { manifest.protocolVersion >= PluginProtocol.namedDevices }

        func say(_ name: String, _ capability: Capability?, _ outcome: Outcome, _ detail: String) {
            let check = Check(name: name, capability: capability?.rawValue, outcome: outcome, detail: detail)
            checks.append(check)
            progress(check)
        }

        /// `body` passes when it returns (its words the detail) and fails with what it threw.
        @discardableResult
        func check(_ name: String, _ capability: Capability?, _ body: () async throws -> String) async -> Bool {
            do {
                say(name, capability, .passed, try await body())
                return true
            } catch {
                say(name, capability, .failed, "\(error)")
                return false
            }
        }

        func all(_ parameters: [Capability: [String: ConfigValue]]) async {
            let handshake = await check("initialize: answers within 10 s and agrees with the manifest", nil) {
                let said = try await PluginCheck.handshake(manifest)
                return "\(said.name) \(said.version), protocol \(said.protocolVersion), in \(Self.milliseconds(said.duration))"
            }
            guard handshake else { return }
            let notifications = notifications
            let session: PluginSession
            do {
                session = try await PluginSession.start(manifest, onNotification: { method, parameters in
                    notifications.withLock { $0.append((method, parameters)) }
                })
            } catch {
                say("a session starts", nil, .failed, "\(error)")
                return
            }
            await check("an unknown method is answered with an error", nil) {
                do {
                    _ = try await session.call("fieldhal.noSuchMethod", .object([:]), timeout: .seconds(5))
                } catch let error as FieldHALError where error.kind != .timeout && session.ended == nil {
                    return "answered: \(error.detail)"
                }
                throw Failure("no error for a method it does not know (docs/plugin-protocol.md: -32601, method not found)")
            }
            for capability in manifest.capabilities.keys.sorted() where session.ended == nil {
                await device(capability, parameters[capability], on: session)
            }
            await check("no stray, malformed or late message while serving", nil) {
                if let ended = session.ended { throw ended }
                return "the session served every check"
            }
            await session.stop()
        }

        struct Failure: Error, CustomStringConvertible {
            let description: String
            init(_ description: String) { self.description = description }
        }

        /// The device checks of one capability: open, its methods, close.
        func device(_ capability: Capability, _ settings: [String: ConfigValue]?, on session: PluginSession) async {
            let specs = manifest.capabilities[capability] ?? []
            let missing = specs.filter { $0.required && settings?[$0.name] == nil }.map(\.name)
            guard missing.isEmpty else {
                let how = missing.map { "--set \(capability.rawValue).\($0)=VALUE" }.joined(separator: " ")
                say("open and serve a device", capability, .skipped, "needs its settings: \(how)")
                return
            }
            let handle = namesDevices ? "\(capability.rawValue)-1" : nil
            func named(_ parameters: JSONValue, _ device: String? = nil) -> JSONValue {
                PluginProtocol.naming(parameters, device: device ?? handle)
            }
            let section = JSONValue(settings ?? [:])
            let opened = await check("open answers within 10 s with the device's name", capability) {
                let answer = try await session.call("open", named(.object(["capability": .string(capability.rawValue), "parameters": section])),
                                                    timeout: .seconds(10))
                guard answer["device"] == nil || answer["device"]?.string != nil else { throw Failure("its \"device\" is not a string: \(answer)") }
                let identity = try PluginProtocol.identity(from: answer["identity"], plugin: manifest.name)
                return "\(answer["device"]?.string ?? "(no name)")" + (identity.map { ", identity: " + Self.words($0) } ?? "")
            }
            guard opened else { return }
            if handle != nil {
                await check("a second open of the same handle is busy (1.6)", capability) {
                    try await expect(.busy) {
                        _ = try await session.call("open", named(.object(["capability": .string(capability.rawValue), "parameters": section])),
                                                   timeout: .seconds(10))
                    }
                }
                if let (method, parameters) = Self.probe(capability) {
                    await check("a request naming a handle not open is notConfigured (1.6)", capability) {
                        try await expect(.notConfigured) {
                            _ = try await session.call(method, named(parameters, "\(capability.rawValue)-999"), timeout: .seconds(10))
                        }
                    }
                }
            }
            switch capability {
            case .location: await location(on: session, named)
            case .nfcReader: await reader(on: session, named)
            case .nfcEmulator: await emulator(on: session, named)
            case .haptics: await haptics(on: session, named)
            case .biometrics: await biometrics(on: session, named)
            case .camera: await camera(on: session, named)
            case .microphone: await microphone(on: session, named)
            case .speaker: await speaker(on: session, named)
            }
            guard session.ended == nil else { return }
            await check("close answers null within 5 s", capability) {
                let answer = try await session.call("close", named(.object(["capability": .string(capability.rawValue)])), timeout: .seconds(5))
                guard case .null = answer else { throw Failure("answered \(answer), not null") }
                return "closed"
            }
            if handle != nil, let (method, parameters) = Self.probe(capability), session.ended == nil {
                await check("a request after close is notConfigured (1.6)", capability) {
                    try await expect(.notConfigured) { _ = try await session.call(method, named(parameters), timeout: .seconds(10)) }
                }
            }
        }

        static func milliseconds(_ duration: Duration) -> String {
            let (seconds, attoseconds) = duration.components
            return "\(Int((Double(seconds) * 1000 + Double(attoseconds) / 1e15).rounded())) ms"
        }

        /// An identity as a technician reads it: `vendor NXP, model PN532, serial A1B2`.
        static func words(_ identity: DeviceIdentity) -> String {
            [("vendor", identity.vendor), ("model", identity.model), ("serial", identity.serial), ("link", identity.link)]
                .compactMap { name, value in value.map { "\(name) \($0)" } }.joined(separator: ", ")
        }

        /// A quick request of each capability, for the handle checks.
        static func probe(_ capability: Capability) -> (String, JSONValue)? {
            switch capability {
            case .location: ("gps.watch", .object([:]))
            case .nfcReader: (PluginProtocol.NFCMethod.read, .object(["timeoutMs": .integer(100)]))
            case .nfcEmulator: nil  // an emulation needs a message: its own check covers it
            case .haptics: (PluginProtocol.HapticsMethod.play, .object(["pattern": .string("light")]))
            case .biometrics: (PluginProtocol.BiometricsMethod.availability, .object([:]))
            case .camera: (PluginProtocol.CameraMethod.formats, .object([:]))
            case .microphone, .speaker: nil  // a recording needs a directory, a play a clip: their own checks cover them
            }
        }

        func expect(_ kind: FieldHALError.Kind, _ body: () async throws -> Void) async throws -> String {
            do {
                try await body()
            } catch let error as FieldHALError where error.kind == kind {
                return "\(kind): \(error.detail)"
            } catch {
                throw Failure("expected \(kind), got \(error)")
            }
            throw Failure("expected \(kind), got an answer")
        }

        func location(on session: PluginSession, _ named: (JSONValue, String?) -> JSONValue) async {
            var stream: Int64?
            await check("gps.watch answers with a stream number within 5 s", .location) {
                let answer = try await session.call("gps.watch", named(.object([:]), nil), timeout: .seconds(5))
                guard let number = answer["stream"]?.integer else { throw Failure("its answer has no \"stream\" number: \(answer)") }
                stream = number
                return "stream \(number)"
            }
            guard let stream else { return }
            // A receiver with nothing to say sends nothing (the docs: a fix "as the receiver
            // gives them"): no report in 10 s is a skip, not a failure.
            let name = "the stream's first gps.fix or gps.lost is well formed"
            let by = ContinuousClock.now + .seconds(10)
            while ContinuousClock.now < by {
                let first = notifications.withLock { $0.first { $0.1["stream"]?.integer == stream } }
                if let (method, parameters) = first {
                    await check(name, .location) {
                        if method == "gps.lost" {
                            guard let reason = parameters["reason"]?.string else { throw Failure("gps.lost without a \"reason\" string") }
                            return "gps.lost: \(reason)"
                        }
                        let fix = try PluginProtocol.fix(from: parameters["fix"] ?? .null, plugin: manifest.name)
                        return "gps.fix: \(fix.mode.rawValue)" + (fix.hasPosition ? " at \(fix.latitude ?? 0), \(fix.longitude ?? 0)" : "")
                    }
                    return
                }
                try? await Task.sleep(for: .milliseconds(20))
            }
            say(name, .location, .skipped, "no gps.fix or gps.lost for stream \(stream) in 10 s: the receiver said nothing")
        }

        func reader(on session: PluginSession, _ named: (JSONValue, String?) -> JSONValue) async {
            await check("nfc.read answers a tag or a typed error within its bound plus 5 s", .nfcReader) {
                do {
                    let answer = try await session.call(PluginProtocol.NFCMethod.read, named(.object(["timeoutMs": .integer(300)]), nil),
                                                        timeout: .milliseconds(300) + .seconds(5))
                    let tag = try PluginProtocol.tag(from: answer["tag"], plugin: manifest.name)
                    return "a tag: \(tag.uidString)"
                } catch let error as FieldHALError where error.kind != .protocolError && session.ended == nil {
                    return "\(error.kind): \(error.detail)"
                }
            }
            guard session.ended == nil else { return }
            await check("nfc.read stops at $/cancel: the next read answers within its bound", .nfcReader) {
                let long = named(.object(["timeoutMs": .integer(60_000)]), nil)
                let waiting = Task { try await session.call(PluginProtocol.NFCMethod.read, long, timeout: .seconds(65)) }
                try await Task.sleep(for: .milliseconds(300))
                waiting.cancel()
                _ = await waiting.result
                let started = ContinuousClock.now
                do {
                    _ = try await session.call(PluginProtocol.NFCMethod.read, named(.object(["timeoutMs": .integer(300)]), nil),
                                               timeout: .milliseconds(300) + .seconds(5))
                } catch let error as FieldHALError where error.kind == .timeout && session.ended == nil {
                    // The plugin's own timeout answer: it read on after the cancel only if it took long.
                } catch let error as FieldHALError where error.kind == .busy {
                    throw Failure("the next read was busy: the cancelled read still holds the reader")
                } catch let error as FieldHALError where session.ended == nil && error.kind != .protocolError {
                    return "the next read answered \(error.kind) in \(Self.milliseconds(ContinuousClock.now - started))"
                }
                if let ended = session.ended { throw ended }
                return "the next read answered in \(Self.milliseconds(ContinuousClock.now - started))"
            }
        }

        func emulator(on session: PluginSession, _ named: (JSONValue, String?) -> JSONValue) async {
            await check("nfc.emulate answers {wasRead, commandCount} or a typed error within its bound plus 5 s", .nfcEmulator) {
                let message = NDEFMessage(records: [try NDEFRecord.text("fieldhal plugin test", language: "en")])
                do {
                    let answer = try await session.call(PluginProtocol.NFCMethod.emulate,
                                                        named(try PluginProtocol.nfcParameters(timeout: .milliseconds(300), message: message), nil),
                                                        timeout: .milliseconds(300) + .seconds(5))
                    let outcome = try PluginProtocol.outcome(from: answer, plugin: manifest.name)
                    return "wasRead \(outcome.wasRead), \(outcome.commandCount) commands"
                } catch let error as FieldHALError where error.kind != .protocolError && session.ended == nil {
                    return "\(error.kind): \(error.detail)"
                }
            }
        }

        func haptics(on session: PluginSession, _ named: (JSONValue, String?) -> JSONValue) async {
            await check("haptics.play answers with what it played (or null) when the pattern ends", .haptics) {
                let answer = try await session.call(PluginProtocol.HapticsMethod.play, named(.object(["pattern": .string("light")]), nil),
                                                    timeout: PluginProtocol.bound(of: .light))
                guard let played = try PluginProtocol.played(from: answer, plugin: manifest.name) else {
                    return "null: allowed, but the CLI and the API then report FieldHAL's theme, not the plugin's"
                }
                return "\(played.steps) steps, \(played.milliseconds) ms"
            }
            guard session.ended == nil else { return }
            await check("a pattern out of bounds is invalidArgument", .haptics) {
                try await expect(.invalidArgument) {
                    _ = try await session.call(PluginProtocol.HapticsMethod.play,
                                               named(.object(["steps": .array([.object(["effect": .string("rumble"), "strong": .number(2),
                                                                                        "weak": .number(0), "durationMs": .integer(10)])])]), nil),
                                               timeout: .seconds(5))
                }
            }
        }

        func camera(on session: PluginSession, _ named: (JSONValue, String?) -> JSONValue) async {
            await check("camera.formats answers {formats: [{pixelFormat, width, height, framesPerSecond}]}", .camera) {
                let answer = try await session.call(PluginProtocol.CameraMethod.formats, named(.object([:]), nil), timeout: .seconds(10))
                let formats = try PluginProtocol.formats(from: answer, plugin: manifest.name)
                return formats.isEmpty ? "no formats" : formats.prefix(3).map { "\($0.pixelFormat) \($0.width)×\($0.height)" }.joined(separator: ", ")
                    + (formats.count > 3 ? ", … (\(formats.count))" : "")
            }
            guard session.ended == nil else { return }
            await check("camera.still answers a JPEG in a sealed memfd, of the size it says, within 30 s", .camera) {
                let request = PhotoRequest(width: 320, height: 240, quality: 80, warmUpFrames: 1)
                let answer = try await session.call(PluginProtocol.CameraMethod.still, named(PluginProtocol.value(of: request), nil), descriptors: [],
                                                    timeout: .seconds(30))
                let photo = try PluginProtocol.photo(from: answer.result, answer.descriptors, plugin: manifest.name)
                guard let size = JPEGSize.of(photo.jpeg) else { throw Failure("its JPEG has no frame header (SOF) to say its size") }
                guard size == (photo.width, photo.height) else {
                    throw Failure("it says \(photo.width)×\(photo.height), its JPEG is \(size.0)×\(size.1)")
                }
                return "\(photo.width)×\(photo.height) asked 320×240, \(photo.jpeg.count) bytes"
            }
            guard session.ended == nil else { return }
            await check("a still out of bounds (8×8) is invalidArgument", .camera) {
                try await expect(.invalidArgument) {
                    _ = try await session.call(PluginProtocol.CameraMethod.still,
                                               named(.object(["width": .integer(8), "height": .integer(8), "quality": .integer(80), "warmUpFrames": .integer(0)]), nil),
                                               timeout: .seconds(30))
                }
            }
        }

        func microphone(on session: PluginSession, _ named: (JSONValue, String?) -> JSONValue) async {
            await check("microphone.record writes its file and answers what it recorded, within 1 s plus 30 s", .microphone) {
                let request = RecordingRequest(duration: .seconds(1), sampleRate: 48_000, channels: 1)
                let directory = try RecordingDirectory(beside: NSTemporaryDirectory() + "/fieldhal-plugin-test.wav", plugin: manifest.name)
                let answer = try await session.call(PluginProtocol.MicrophoneMethod.record, named(PluginProtocol.value(of: request), nil),
                                                    descriptors: [try directory.descriptor()], timeout: .seconds(31), holding: directory)
                let file = directory.path + "/" + PluginProtocol.recordingFile(.microphone)
                let recording = try PluginProtocol.audioRecording(from: answer.result, path: file, plugin: manifest.name)
                let size = (try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? nil
                guard let size, size > 44 else { throw Failure("it answered, but wrote no WAV file (\(PluginProtocol.recordingFile(.microphone))) into the directory") }
                let seconds = Double(recording.frames) / Double(max(1, recording.sampleRate))
                guard recording.endedEarly != nil || (0.9...1.5).contains(seconds) else {
                    throw Failure("1 s asked, \(recording.frames) frames at \(recording.sampleRate) Hz recorded (\(seconds) s)")
                }
                return "\(recording.frames) frames at \(recording.sampleRate) Hz, \(recording.channels) channel(s), peak \(String(format: "%.1f", recording.peakDBFS)) dBFS, \(size) bytes"
            }
            guard session.ended == nil else { return }
            await check("a recording out of bounds (0 ms) is invalidArgument", .microphone) {
                try await expect(.invalidArgument) {
                    let directory = try RecordingDirectory(beside: NSTemporaryDirectory() + "/fieldhal-plugin-test.wav", plugin: manifest.name)
                    var parameters = PluginProtocol.value(of: RecordingRequest(duration: .seconds(1))).object ?? [:]
                    parameters["durationMs"] = .integer(0)
                    _ = try await session.call(PluginProtocol.MicrophoneMethod.record, named(.object(parameters), nil),
                                               descriptors: [try directory.descriptor()], timeout: .seconds(10), holding: directory)
                }
            }
        }

        func speaker(on session: PluginSession, _ named: (JSONValue, String?) -> JSONValue) async {
            await check("speaker.play answers once the clip has been heard, within its length plus 10 s", .speaker) {
                let clip = SoundClip.softAlert()
                let (parameters, samples) = try PluginProtocol.request(playing: clip)
                let started = ContinuousClock.now
                _ = try await session.call(PluginProtocol.SpeakerMethod.play, named(parameters, nil), descriptors: [samples], timeout: clip.duration + .seconds(10))
                return "\(clip.name) (\(Self.milliseconds(clip.duration))) answered after \(Self.milliseconds(ContinuousClock.now - started))"
            }
        }

        func biometrics(on session: PluginSession, _ named: (JSONValue, String?) -> JSONValue) async {
            await check("biometrics.availability answers {hasSensor, enrolledFingers}", .biometrics) {
                let answer = try await session.call(PluginProtocol.BiometricsMethod.availability, named(.object([:]), nil), timeout: .seconds(15))
                let availability = try PluginProtocol.availability(from: answer, plugin: manifest.name)
                return "hasSensor \(availability.hasSensor), \(availability.enrolledFingers.count) fingers enrolled"
            }
        }
    }
}
