import FieldHAL
import FieldHALMedia
import FakePlugin
import FieldHALPluginHost
import FieldHALPluginProtocol
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif
import TestSupport
import Testing

/// The camera, the microphone and the speaker from external plugin processes (protocol
/// 1.3): their bytes travel as descriptors beside the messages — a still's JPEG and a
/// clip's PCM in sealed memfds, a recording into a directory passed as a descriptor.
///
/// Two plugins: the fake kit's built-in plugin out of process (`fieldhal plugin serve
/// fake`, through the Swift SDK), whose devices make real JPEGs and WAVs; and a Python
/// plugin (the standard library's `send_fds`/`recv_fds` and `memfd_create`) that gets the
/// descriptors wrong in each way a host must survive. The real devices out of process are
/// `VividCameraTests` and `LoopbackSoundTests` in the kernel lab.
@Suite(.timeLimit(.minutes(2))) struct ExternalMediaTests {
    /// The fake plugin as an external plugin, and a scratch directory for recordings.
    func fakeOutOfProcess() async throws -> (PluginDescriptor, String) {
        let manifest = try PluginManifest.load(try await ExternalBuiltin.install("fake", as: "fake-process"))
        let scratch = NSTemporaryDirectory() + "fieldhal-media-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        return (manifest.descriptor(), scratch)
    }

    func open(_ descriptor: PluginDescriptor, _ capability: Capability, _ values: [String: ConfigValue] = [:], in scratch: String) async throws -> CapabilityProvider {
        try await descriptor.open(capability, PluginParameters(values), PluginContext(configDirectory: scratch, stateDirectory: scratch))
    }

    @Test func theFakeCamerasStillFormatsAndVideoComeThroughAsTheyAreInProcess() async throws {
        let (descriptor, scratch) = try await fakeOutOfProcess()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        guard case .camera(let camera) = try await open(descriptor, .camera, in: scratch) else { throw CLIError("no camera") }
        #expect(camera.deviceName == "fake-camera0 (plugin fake-process)")
        guard case .camera(let inProcess) = try await FakePlugin.descriptor.open(.camera, PluginParameters([:]), PluginContext(configDirectory: scratch, stateDirectory: scratch)) else {
            throw CLIError("no camera in process")
        }
        #expect(try await camera.formats() == (try await inProcess.formats()))

        let request = PhotoRequest(width: 320, height: 240, quality: 80)
        let photo = try await camera.captureStill(request)
        let local = try await inProcess.captureStill(request)
        #expect(photo.width == local.width && photo.height == local.height)
        #expect(photo.jpeg.starts(with: [0xFF, 0xD8]) && photo.jpeg.suffix(2) == [0xFF, 0xD9])
        #expect(abs(photo.jpeg.count - local.jpeg.count) < local.jpeg.count / 10, "\(photo.jpeg.count) against \(local.jpeg.count) bytes")

        let path = scratch + "/clip.avi"
        let video = try await camera.recordVideo(VideoRequest(duration: .milliseconds(600), width: 320, height: 240, framesPerSecond: 10), to: path)
        #expect(video.path == path && video.frames > 0)
        let size = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? -1
        #expect(size == video.bytes, "the file at the path is the recording the plugin reported")
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)).prefix(4) == Data("RIFF".utf8))
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch) == ["clip.avi"], "the plugin's directory is gone")
        await camera.close()
    }

    @Test func theFakeMicrophoneRecordsAToneAndTheSpeakerGetsTheWholeClip() async throws {
        let (descriptor, scratch) = try await fakeOutOfProcess()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        guard case .microphone(let microphone) = try await open(descriptor, .microphone, ["realtime": .boolean(false), "tone_hz": .float(1000)], in: scratch) else {
            throw CLIError("no microphone")
        }
        let path = scratch + "/tone.wav"
        let recording = try await microphone.record(RecordingRequest(duration: .milliseconds(500), sampleRate: 16_000), to: path)
        #expect(recording.path == path && recording.frames == 8_000)
        #expect(abs(recording.peakDBFS - -12) < 0.2, "the fake's tone is at −12 dBFS: \(recording.peakDBFS)")
        let wav = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(wav.count == 44 + 16_000 && wav.prefix(44) == Data(WAVFileWriter.header(sampleRate: 16_000, channels: 1, format: .s16le, dataBytes: 16_000)))

        let log = scratch + "/played.jsonl"
        guard case .speaker(let speaker) = try await open(descriptor, .speaker, ["log_file": .string(log)], in: scratch) else {
            throw CLIError("no speaker")
        }
        let clip = SoundClip.softAlert()
        let started = ContinuousClock.now
        try await speaker.play(clip)
        #expect(ContinuousClock.now - started >= clip.duration, "answered once the clip was heard (the fake plays in real time)")
        let entry = try String(contentsOfFile: log, encoding: .utf8)
        #expect(entry.contains(#""sound":"soft-alert""#) && entry.contains(#""milliseconds":400"#), "\(entry)")
        await microphone.close()
        await speaker.close()
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch).sorted() == ["played.jsonl", "tone.wav"])
    }

    /// A recording into a directory the host holds open goes to the plugin as that directory
    /// and the file's name: the plugin writes it there, whole, and nothing else is left.
    @Test func aRecordingIntoADirectoryHeldOpenIsWrittenThereByThePlugin() async throws {
        let (descriptor, scratch) = try await fakeOutOfProcess()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        guard case .microphone(let microphone) = try await open(descriptor, .microphone, ["realtime": .boolean(false)], in: scratch) else {
            throw CLIError("no microphone")
        }
        try FileManager.default.createDirectory(atPath: scratch + "/held", withIntermediateDirectories: false)
        let directory = Glibc.open(scratch + "/held", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        try #require(directory >= 0)
        defer { close(directory) }
        let recording = try await microphone.record(RecordingRequest(duration: .milliseconds(250), sampleRate: 16_000),
                                                    to: .entry("take-1.wav", inDirectory: directory))
        #expect(recording.path == "take-1.wav" && recording.frames == 4_000)
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch + "/held") == ["take-1.wav"])
        let wav = try Data(contentsOf: URL(fileURLWithPath: scratch + "/held/take-1.wav"))
        #expect(wav.count == 44 + 8_000 && wav.prefix(4) == Data("RIFF".utf8))
        await microphone.close()
    }

    /// Protocol 1.4: a recording into a file in memory (evidence, issue 19) goes to the plugin
    /// as that file's descriptor; the plugin writes it in place and nothing touches the disk.
    /// A recording its device ended early (unplugged) crosses the protocol with why: the
    /// typed error comes back under the plugin's subject; one that ran its length has no
    /// `endedEarly`; an `endedEarly` that is no error is the plugin's fault, not a
    /// recording that ended well.
    @Test func aRecordingThatEndedEarlySaysWhyAcrossTheProtocol() throws {
        let unplugged = FieldHALError(.disconnected, subject: "camera /dev/video0", detail: "dequeue: no such device", advice: "check the cable")
        let video = VideoRecording(path: "", width: 320, height: 240, frames: 19, durationSeconds: 0.64, bytes: 90_000, endedEarly: unplugged)
        let back = try PluginProtocol.videoRecording(from: PluginProtocol.value(of: video), path: "/x.avi", plugin: "v4l2")
        #expect(back.endedEarly == FieldHALError(.disconnected, subject: "plugin v4l2: camera /dev/video0", detail: "dequeue: no such device", advice: "check the cable"))
        #expect(back.frames == 19 && back.path == "/x.avi")
        let whole = AudioRecording(path: "", sampleRate: 48_000, channels: 2, format: .s16le, frames: 48_000, peakDBFS: -6, rmsDBFS: -9)
        #expect(PluginProtocol.value(of: whole)["endedEarly"] == nil)
        #expect(try PluginProtocol.audioRecording(from: PluginProtocol.value(of: whole), path: "/x.wav", plugin: "alsa").endedEarly == nil)
        guard case .object(var hostile) = PluginProtocol.value(of: whole) else { Issue.record("not an object"); return }
        hostile["endedEarly"] = .string("unplugged")
        #expect { try PluginProtocol.audioRecording(from: .object(hostile), path: "/x.wav", plugin: "alsa") } throws: { error in
            (error as? FieldHALError)?.kind == .protocolError && "\(error)".contains("endedEarly that is not an error")
        }
    }

    @Test func aRecordingIntoMemoryIsWrittenByThePluginInPlace() async throws {
        let (descriptor, scratch) = try await fakeOutOfProcess()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        guard case .microphone(let microphone) = try await open(descriptor, .microphone, ["realtime": .boolean(false)], in: scratch),
              case .camera(let camera) = try await open(descriptor, .camera, in: scratch) else {
            throw CLIError("no microphone or camera")
        }
        let sound = try MemoryFile(name: "test-sound")
        let recording = try await microphone.record(RecordingRequest(duration: .milliseconds(500), sampleRate: 16_000), to: .memory(sound))
        #expect(recording.frames == 8_000 && sound.size == 44 + 16_000)
        #expect(try sound.read(at: 0, count: 44) == WAVFileWriter.header(sampleRate: 16_000, channels: 1, format: .s16le, dataBytes: 16_000))
        let clip = try MemoryFile(name: "test-video")
        let video = try await camera.recordVideo(VideoRequest(duration: .milliseconds(400), width: 160, height: 120, framesPerSecond: 10), to: .memory(clip))
        #expect(video.frames > 0 && clip.size == video.bytes)
        #expect(try clip.read(at: 8, count: 4) == Array("AVI ".utf8))
        // A second recording into the same file replaces the first, as a path's would.
        _ = try await microphone.record(RecordingRequest(duration: .milliseconds(100), sampleRate: 16_000), to: .memory(sound))
        #expect(sound.size == 44 + 3_200)
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch).isEmpty, "nothing on disk")
        await microphone.close()
        await camera.close()
    }

    /// Protocol 1.5: the plugin cuts one recording into segments and sends each as it
    /// closes, in a sealed memfd of its own; nothing reaches the disk. A finish asked
    /// mid-recording ends it at the next boundary, the segment under way kept whole.
    @Test func aRecordingInSegmentsComesSegmentBySegmentAndAFinishEndsItAtABoundary() async throws {
        let (descriptor, scratch) = try await fakeOutOfProcess()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        guard case .microphone(let fast) = try await open(descriptor, .microphone, ["realtime": .boolean(false)], in: scratch),
              case .camera(let camera) = try await open(descriptor, .camera, in: scratch) else {
            throw CLIError("no microphone or camera")
        }
        let sounds = Mutex<[RecordedSegment<AudioRecording>]>([])
        try await fast.record(RecordingRequest(duration: .milliseconds(1250), sampleRate: 16_000),
                              in: RecordingSegments(length: .milliseconds(500)) { segment in sounds.withLock { $0.append(segment) } })
        let audio = sounds.withLock { $0 }
        #expect(audio.map(\.sequence) == [0, 1, 2])
        #expect(audio.map(\.recording.frames) == [8_000, 8_000, 4_000])
        for segment in audio {
            #expect(segment.file.size == 44 + 2 * segment.recording.frames && segment.recording.path == "memory")
            #expect(try segment.file.read(at: 0, count: 4) == Array("RIFF".utf8))
        }
        let clips = Mutex<[RecordedSegment<VideoRecording>]>([])
        try await camera.recordVideo(VideoRequest(duration: .milliseconds(1000), width: 160, height: 120, framesPerSecond: 10),
                                     in: RecordingSegments(length: .milliseconds(500)) { segment in clips.withLock { $0.append(segment) } })
        let video = clips.withLock { $0 }
        #expect(video.map(\.sequence) == [0, 1])
        #expect(video.allSatisfy { $0.recording.frames > 0 && $0.file.size == $0.recording.bytes })
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch).isEmpty, "nothing on disk")
        await fast.close()

        // In real time: 30 s asked, finished 0.7 s in: it ends with the second segment, at 1 s.
        guard case .microphone(let live) = try await open(descriptor, .microphone, in: scratch) else { throw CLIError("no microphone") }
        let finish = RecordingFinish()
        let heard = Mutex(0)
        let start = ContinuousClock.now
        let recording = Task {
            try await live.record(RecordingRequest(duration: .seconds(30), sampleRate: 16_000),
                                  in: RecordingSegments(length: .milliseconds(500), finish: finish) { _ in heard.withLock { $0 += 1 } })
        }
        try await Task.sleep(for: .milliseconds(700))
        finish.finish()
        try await recording.value
        #expect(heard.withLock { $0 } == 2)
        #expect(ContinuousClock.now - start < .seconds(10), "ended at the finish, not at the recording's 30 s")
        await live.close()
        await camera.close()
    }

    @Test func cancellingARecordingOutOfProcessLeavesNoFileAndNoDirectory() async throws {
        let (descriptor, scratch) = try await fakeOutOfProcess()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        guard case .microphone(let microphone) = try await open(descriptor, .microphone, in: scratch) else { throw CLIError("no microphone") }
        let path = scratch + "/long.wav"
        let recording = Task { try await microphone.record(RecordingRequest(duration: .seconds(30), sampleRate: 16_000), to: path) }
        try await Task.sleep(for: .milliseconds(700))
        let cancelled = ContinuousClock.now
        recording.cancel()
        await #expect { try await recording.value } throws: { ($0 as? FieldHALError)?.kind == .cancelled }
        #expect(ContinuousClock.now - cancelled < .seconds(10), "ended by the cancel, not at the recording's 30 s")
        // The plugin's own partial file goes with its directory; nothing is left beside the path.
        try await Task.sleep(for: .milliseconds(300))
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch).isEmpty)
        // And the microphone records again.
        let again = try await microphone.record(RecordingRequest(duration: .milliseconds(200), sampleRate: 16_000), to: path)
        #expect(again.frames == 3_200)
        await microphone.close()
    }

    // MARK: - A Python plugin, and descriptors got wrong

    static let manifest = PluginFixtures.manifest(name: "media", minor: 3, capabilities: #"{"camera": {}, "microphone": {}, "speaker": {}}"#)

    func media(_ mode: String) async throws -> (Kit, PluginFixtures) {
        let fixtures = try PluginFixtures()
        try fixtures.plugin("media", mode: mode, manifest: Self.manifest, script: PluginFixtures.mediaScript)
        let kit = try await fixtures.kit("[camera]\nplugin = \"media\"\n[microphone]\nplugin = \"media\"\n[speaker]\nplugin = \"media\"\n")
        return (kit, fixtures)
    }

    @Test func aPythonPluginServesAllThreeInOneProcess() async throws {
        let (kit, fixtures) = try await media("good")
        let photo = try await kit.camera().captureStill(PhotoRequest())
        #expect(photo.width == 8 && photo.height == 8 && photo.jpeg.count == 159)
        #expect(try await kit.camera().formats() == [CameraFormat(pixelFormat: "MJPG", width: 8, height: 8, framesPerSecond: [30, 15])])
        let path = fixtures.root + "/out.wav"
        let recording = try await kit.microphone().record(RecordingRequest(duration: .milliseconds(10), sampleRate: 48_000), to: path)
        #expect(recording.frames == 480 && FileManager.default.fileExists(atPath: path))
        let clip = SoundClip(name: "ramp", sampleRate: 8_000, samples: (0..<4_000).map { Int16($0 - 2_000) })
        try await kit.speaker().play(clip)
        #expect(try String(contentsOfFile: fixtures.root + "/media/played", encoding: .utf8) == "ramp 8000 4000 \(clip.samples.reduce(0) { $0 + Int($1) })\n")
        let opens = try String(contentsOfFile: fixtures.root + "/media/opens", encoding: .utf8).split(separator: "\n")
        #expect(Set(opens.map { $0.split(separator: " ")[0] }).count == 1, "one process: \(opens)")
        await kit.close()
        #expect(fixtures.leftovers().isEmpty)
        #expect(!(try FileManager.default.contentsOfDirectory(atPath: fixtures.root)).contains { $0.hasPrefix(".fieldhal-plugin-") })
    }

    @Test(arguments: [("no-fds", #"whose "fds" is 1 with 0 descriptors"#), ("unsealed", "not a sealed memfd"),
                      ("not-jpeg", "does not hold a JPEG"), ("extra-fds", "more descriptors than its messages name")])
    func aStillWithItsDescriptorWrongIsTheProtocolError(mode: String, expected: String) async throws {
        let (kit, fixtures) = try await media(mode)
        defer { withExtendedLifetime(fixtures) {} }
        await #expect { try await kit.camera().captureStill(PhotoRequest()) } throws: { error in
            (error as? FieldHALError)?.kind == .protocolError && "\(error)".contains(expected) && "\(error)".contains("plugin media")
        }
        // The process is not trusted after a fault on the channel, but the capability comes back.
        if mode == "extra-fds" {
            try await Task.sleep(for: .milliseconds(600))
            #expect(try await kit.camera().formats().count == 1)
        }
        await kit.close()
    }

    /// A plugin of 1.5 that gets a segmented recording wrong: each fault is the plugin's
    /// `protocolError`, and the segments that came right before it are the caller's.
    @Test(arguments: [("segments-out-of-order", "sent segment 1 where 0 was due", 0), ("segments-unsealed", "not a sealed memfd", 0),
                      ("segments-miscounted", "with 4 segments after sending 3", 3)])
    func aSegmentedRecordingGotWrongIsTheProtocolError(mode: String, expected: String, kept: Int) async throws {
        let fixtures = try PluginFixtures()
        let manifest = PluginFixtures.manifest(name: "media", minor: 5, capabilities: #"{"microphone": {}}"#)
        try fixtures.plugin("media", mode: mode, manifest: manifest, script: PluginFixtures.mediaScript)
        let kit = try await fixtures.kit("[microphone]\nplugin = \"media\"\n")
        let got = Mutex(0)
        await #expect { try await kit.microphone().record(RecordingRequest(duration: .milliseconds(1500)),
                                                          in: RecordingSegments(length: .milliseconds(500)) { _ in got.withLock { $0 += 1 } }) } throws: { error in
            (error as? FieldHALError)?.kind == .protocolError && "\(error)".contains(expected) && "\(error)".contains("plugin media")
        }
        #expect(got.withLock { $0 } == kept)
        await kit.close()
    }

    @Test func aRecordingAnsweredWithoutItsFileIsTheProtocolErrorAndLeavesNothing() async throws {
        let (kit, fixtures) = try await media("no-file")
        let path = fixtures.root + "/never.wav"
        await #expect { try await kit.microphone().record(RecordingRequest(duration: .milliseconds(10)), to: path) } throws: { error in
            (error as? FieldHALError)?.kind == .protocolError && "\(error)".contains("without writing recording.wav")
        }
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(!(try FileManager.default.contentsOfDirectory(atPath: fixtures.root)).contains { $0.hasPrefix(".fieldhal-plugin-") })
        await kit.close()
    }
}
