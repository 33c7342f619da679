@testable import ALSAPlugin
import FieldHAL
import FieldHALMedia
import FieldHALPluginHost
import FieldHALSystem
import Foundation
import TestSupport
import Testing

/// The alsa plugin's microphone; out of process, each recording is written into a
/// directory passed as a descriptor (protocol 1.3).
func openMicrophone(_ pcm: String, _ extra: [String: ConfigValue] = [:], way: Way = .inProcess) async throws -> any Microphone {
    var values = extra
    values["pcm"] = .string(pcm)
    guard case .microphone(let microphone) = try await way.descriptor(ALSAPlugin.descriptor!, "alsa").open(.microphone, PluginParameters(values), KernelLab.context) else {
        throw LabError("the alsa plugin did not open a microphone")
    }
    return microphone
}

/// The alsa plugin's speaker; out of process, a clip's samples travel in a sealed memfd.
func openSpeaker(_ pcm: String, way: Way = .inProcess) async throws -> any Speaker {
    guard case .speaker(let speaker) = try await way.descriptor(ALSAPlugin.descriptor!, "alsa").open(.speaker, PluginParameters(["pcm": .string(pcm)]), KernelLab.context) else {
        throw LabError("the alsa plugin did not open a speaker")
    }
    return speaker
}

/// Writes a mono 16-bit sine tone WAV (for aplay to play into the loopback). A whole
/// number of hertz is a whole number of cycles a second, so one second is computed and
/// written `seconds` times: a debug build in the emulated guest takes about a second per
/// second of tone to compute it sample by sample.
func writeTone(_ path: String, frequency: Int, amplitude: Double, seconds: Int, sampleRate: Int = 48_000) throws {
    let writer = try WAVFileWriter(path: path, sampleRate: sampleRate, channels: 1, format: .s16le)
    let second = (0..<sampleRate).map {
        Int16((amplitude * 32767 * sin(2 * Double.pi * Double(frequency) * Double($0) / Double(sampleRate))).rounded())
    }
    try second.withUnsafeBytes { bytes in
        for _ in 0..<seconds { try writer.append(bytes) }
    }
    try writer.finish()
}

/// The ALSA plugin against snd-aloop (play into one side, capture the other) and snd-dummy.
@Suite("ALSA on snd-aloop and snd-dummy (kernel lab)", .enabled(if: KernelLab.isGuest), .serialized)
struct LoopbackSoundTests {
    static let playbackSide = "hw:Loopback,0,0"
    static let captureSide = "hw:Loopback,1,0"

    /// `fieldhal plugin test`'s checks against the alsa backend out of process on snd-aloop:
    /// its microphone's and speaker's open and close, a 1 s recording of its length, a
    /// recording out of bounds refused, a clip played.
    @Test func theConformanceChecksPassOnTheLoopback() async throws {
        let manifest = try PluginManifest.load(try await ExternalBuiltin.install("alsa", as: "alsa-conformance"))
        let report = await PluginConformance.run(manifest, parameters: [
            .microphone: ["pcm": .string(Self.captureSide)], .speaker: ["pcm": .string(Self.playbackSide)],
        ])
        #expect(report.passed, "\(report.checks.filter { $0.outcome != .passed })")
        #expect(report.checks.filter { $0.outcome == .passed && $0.name.hasPrefix("close answers") }.count == 2, "\(report.checks)")
        #expect(report.checks.contains { $0.outcome == .passed && $0.name.hasPrefix("microphone.record writes") }, "\(report.checks)")
        #expect(report.checks.contains { $0.outcome == .passed && $0.name.hasPrefix("speaker.play answers") }, "\(report.checks)")
    }

    @Test(arguments: Way.allCases) func recordsAKnownToneAtItsFrequencyAndLevel(way: Way) async throws {
        let tone = KernelLab.scratch("tone.wav")
        // The tone outlasts any start-up (a plugin process spawned in an emulated guest on a
        // loaded host took over 5 s once, and the recording caught the end of a 6 s tone:
        // 916 Hz, −9.41 dBFS). aplay is killed once the recording is in, and its 1 s buffer
        // keeps a slow guest from underrunning into silence.
        try writeTone(tone, frequency: 1000, amplitude: 0.5, seconds: 30)
        let player = try KernelLab.start("/usr/bin/aplay", ["-q", "--buffer-time=1000000", "-D", Self.playbackSide, tone])
        try await Task.sleep(for: .milliseconds(500))
        let path = KernelLab.scratch("tone-recorded.wav")
        if way == .inProcess {
            // What it is: snd-aloop's card, and its id-based name (the same after renumbering).
            let microphone = try await openMicrophone(Self.captureSide, way: way)
            let identity = microphone.identity
            await microphone.close()
            #expect(identity?.model == "Loopback" && identity?.link == "hw:CARD=Loopback,DEV=1", "\(String(describing: identity))")
        }
        let recording: AudioRecording
        do {
            recording = try await openMicrophone(Self.captureSide, way: way)
                .record(RecordingRequest(duration: .seconds(1), sampleRate: 48_000, channels: 1), to: path)
            try await KernelLab.finish(player)
        } catch {
            try? await KernelLab.finish(player)
            throw error
        }
        #expect(recording.frames == 48_000)
        // A sine at half scale: peak −6.02 dBFS, RMS 3.01 dB lower.
        #expect(abs(recording.peakDBFS - -6.02) < 0.3, "peak \(recording.peakDBFS)")
        #expect(abs(recording.rmsDBFS - -9.03) < 0.3, "RMS \(recording.rmsDBFS)")
        let samples = try KernelLab.samples(ofWAV: path)
        #expect(samples.count == 48_000)
        let frequency = KernelLab.frequency(of: samples, sampleRate: 48_000)
        #expect(abs(frequency - 1000) < 5, "\(frequency) Hz")
        #expect(recording.overruns == 0)
    }

    @Test(arguments: Way.allCases) func theAlertSoundArrivesAsTwoFallingNotes(way: Way) async throws {
        let microphone = try await openMicrophone(Self.captureSide, way: way)
        let speaker = try await openSpeaker(Self.playbackSide, way: way)
        let path = KernelLab.scratch("alert-recorded.wav")
        let recording = Task { try await microphone.record(RecordingRequest(duration: .seconds(2), sampleRate: 48_000), to: path) }
        try await Task.sleep(for: .milliseconds(400))
        try await speaker.play(.softAlert())
        let recorded = try await recording.value
        #expect(abs(recorded.peakDBFS - -12.04) < 0.5, "the soft alert plays at −12 dBFS: \(recorded.peakDBFS)")
        // Find the two notes: 880 Hz, then 660 Hz.
        let samples = try KernelLab.samples(ofWAV: path)
        let start = try #require(samples.firstIndex { abs($0) > 200 })
        let first = samples[(start + 960)..<(start + 7680)]  // 20–160 ms into the first note
        let second = samples[(start + 10560)..<(start + 17280)]  // 20–160 ms into the second (after a 40 ms gap)
        #expect(abs(KernelLab.frequency(of: first, sampleRate: 48_000) - 880) < 15)
        #expect(abs(KernelLab.frequency(of: second, sampleRate: 48_000) - 660) < 15)
    }

    /// Two sound cards in one kit (issue 43), snd-aloop and snd-dummy: each named
    /// microphone records on its own card at once, and when one card goes away mid-recording
    /// the other's recording is whole.
    @Test func twoCardsRecordAtOnceAndOneGoneLeavesTheOther() async throws {
        let registry = PluginRegistry([try #require(ALSAPlugin.descriptor)])
        let configuration = try KitConfiguration.parse("""
            [microphone.loop]
            plugin = "alsa"
            pcm = "\(Self.captureSide)"
            [microphone.dummy]
            plugin = "alsa"
            pcm = "hw:Dummy,0,0"
            read_timeout_ms = 1000
            """, file: "two-cards.toml", directory: "/tmp", registry: registry)
        let kit = await Kit.load(configuration, registry: registry, context: KernelLab.context)
        #expect(kit.devices.compactMap { $0.identity?.link } == ["hw:CARD=Loopback,DEV=1", "hw:CARD=Dummy,DEV=0"], "\(kit.devices)")
        let loopPath = KernelLab.scratch("two-cards-loop.wav"), dummyPath = KernelLab.scratch("two-cards-dummy.wav")
        let tone = KernelLab.scratch("two-cards-tone.wav")
        defer { for path in [loopPath, dummyPath, tone] { try? FileManager.default.removeItem(atPath: path) } }
        // Something playing into the loopback, so that its capture side has sound to give.
        try writeTone(tone, frequency: 1000, amplitude: 0.5, seconds: 30)
        let player = try KernelLab.start("/usr/bin/aplay", ["-q", "--buffer-time=1000000", "-D", Self.playbackSide, tone])
        let whole: AudioRecording
        do {
            let loop = Task { try await kit.microphone(named: "loop").record(RecordingRequest(duration: .seconds(3), sampleRate: 48_000), to: loopPath) }
            let dummy = Task {
                try await kit.microphone(named: "dummy").record(RecordingRequest(duration: .seconds(20), sampleRate: 48_000, channels: 2), to: dummyPath)
            }
            try await Self.dummyCaptureRuns()
            try await Task.sleep(for: .milliseconds(500))
            try KernelLab.writeSysfs("/sys/bus/platform/drivers/snd_dummy/unbind", "snd_dummy.0")
            defer { try? KernelLab.writeSysfs("/sys/bus/platform/drivers/snd_dummy/bind", "snd_dummy.0") }
            let cut = try await dummy.value
            #expect(cut.endedEarly?.kind == .disconnected, "\(cut)")
            whole = try await loop.value
            try await KernelLab.finish(player)
        } catch {
            try? await KernelLab.finish(player)
            throw error
        }
        #expect(whole.endedEarly == nil && whole.frames == 3 * 48_000, "\(whole)")
        await kit.close()
        #expect(await KernelLab.pluginDirectoriesGo(), "\(KernelLab.pluginDirectoriesLeft)")
    }

    /// Unplugged half a second into a 20 s recording: the recording ends early, `disconnected`,
    /// and keeps the samples before in a WAV that plays.
    @Test(arguments: Way.allCases) func aCardThatVanishesMidRecordingEndsEarlyAndKeepsTheSound(way: Way) async throws {
        let microphone = try await openMicrophone("hw:Dummy,0,0", ["read_timeout_ms": .integer(1000)], way: way)
        let path = KernelLab.scratch("vanished.wav")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let recording = Task { try await microphone.record(RecordingRequest(duration: .seconds(20), sampleRate: 48_000, channels: 2), to: path) }
        // Half a second after the capture runs, however long a plugin process took to start it.
        try await Self.dummyCaptureRuns()
        try await Task.sleep(for: .milliseconds(500))
        let unplugged = ContinuousClock.now
        try KernelLab.writeSysfs("/sys/bus/platform/drivers/snd_dummy/unbind", "snd_dummy.0")
        defer { try? KernelLab.writeSysfs("/sys/bus/platform/drivers/snd_dummy/bind", "snd_dummy.0") }
        let sound = try await recording.value
        #expect(ContinuousClock.now - unplugged < .seconds(10), "ended at the unplug, not at the recording's 20 s")
        let failure = try #require(sound.endedEarly, "a recording the card left is not a whole one")
        #expect(failure.kind == .disconnected && "\(failure)".contains("the sound device went away"), "\(failure)")
        #expect(sound.durationSeconds > 0.3 && sound.durationSeconds < 3, "\(sound)")
        let (probe, seconds) = try await SegmentedEvidenceLabTests.probedSeconds(path)
        #expect(probe.status == 0 && abs(seconds - sound.durationSeconds) < 0.05, "ffprobe \(probe.output), recorded \(sound.durationSeconds) s")
        print("unplugged mid-recording (\(way)): \(String(format: "%.2f", sound.durationSeconds)) s of sound kept")
        #expect(await KernelLab.pluginDirectoriesGo(), "\(KernelLab.pluginDirectoriesLeft)")
    }

    /// `fieldhal mic record` when the card goes mid-recording: the WAV up to there is kept,
    /// the line about it printed, and the exit status (69) and message say what failed and
    /// where the sound before it is.
    @Test func theCLIKeepsTheSoundBeforeTheCardWent() async throws {
        let config = KernelLab.scratch("dummy-mic.toml")
        try "[microphone]\nplugin = \"alsa\"\npcm = \"hw:Dummy,0,0\"\nread_timeout_ms = 1000\n".write(toFile: config, atomically: true, encoding: .utf8)
        let path = KernelLab.scratch("cli-vanished.wav")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let run = Task { try await KernelLab.run(CLI.binary.path, ["mic", "record", "--config", config, "--seconds", "20", "--rate", "48000", "-o", path]) }
        // The CLI's start takes seconds in this guest: unplug once the kernel says the
        // capture runs, and half a second of sound is in.
        try await Self.dummyCaptureRuns()
        try await Task.sleep(for: .milliseconds(500))
        try KernelLab.writeSysfs("/sys/bus/platform/drivers/snd_dummy/unbind", "snd_dummy.0")
        defer { try? KernelLab.writeSysfs("/sys/bus/platform/drivers/snd_dummy/bind", "snd_dummy.0") }
        let result = try await run.value
        #expect(result.status == 69, "\(result.output)")
        #expect(result.output.contains("the sound device went away") && result.output.contains("recorded before it are kept in \(path)"), "\(result.output)")
        #expect(result.output.contains("\(path): "), "the recording's line: \(result.output)")
        let (probe, seconds) = try await SegmentedEvidenceLabTests.probedSeconds(path)
        #expect(probe.status == 0 && seconds > 0.3, "ffprobe \(probe.output)")
        print("the CLI when the card went (exit \(result.status)): \(result.output)")
    }

    /// Waits until the kernel says snd-dummy's capture runs: a test that unplugs the card
    /// mid-recording waits for this, not a fixed time (an unplug before the capture starts
    /// has nothing to keep, and a slow host takes seconds to start a CLI or a plugin).
    static func dummyCaptureRuns(within limit: Duration = .seconds(15)) async throws {
        let status = "/proc/asound/Dummy/pcm0c/sub0/status"
        let deadline = ContinuousClock.now + limit
        while !((try? String(contentsOfFile: status, encoding: .utf8)) ?? "").contains("RUNNING") {
            guard ContinuousClock.now < deadline else { throw LabError("\(status) did not say RUNNING within \(limit)") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// A reader that stops reading for longer than the device's buffer overruns. The PCM
    /// reports the overrun once (the microphone counts it in `AudioRecording.overruns`),
    /// recovers by itself, and audio flows again — no error, no restart.
    @Test func anOverrunIsReportedOnceAndRecovered() async throws {
        let outcomes = try await offPool { () -> [String] in
            let pcm = try ALSAPCM(name: "hw:Dummy,0,0", direction: .capture, subject: "microphone hw:Dummy,0,0")
            defer { pcm.close() }
            try pcm.configure(format: .s16le, channels: 2, sampleRate: 48_000, period: .milliseconds(20), buffer: .milliseconds(100))
            let wakeup = try WakeupEvent()
            let frames = 960
            let chunk = UnsafeMutableRawPointer.allocate(byteCount: frames * pcm.bytesPerFrame, alignment: 8)
            defer { chunk.deallocate() }
            func read() throws -> String {
                switch try pcm.transfer(chunk, frames: frames, timeout: .seconds(2), wakeup: wakeup) {
                case .xrun: return "xrun"
                case .frames(let count): return count > 0 ? "audio" : "nothing"
                }
            }
            try pcm.start()
            var outcomes = [try read()]
            usleep(500_000)  // five buffers' worth of not reading
            for _ in 0..<6 { outcomes.append(try read()) }
            return outcomes
        }
        #expect(outcomes.first == "audio", "\(outcomes)")
        #expect(outcomes.dropFirst().first == "xrun", "the stall is reported at the next read: \(outcomes)")
        #expect(outcomes.filter { $0 == "xrun" }.count == 1, "\(outcomes)")
        #expect(outcomes.suffix(3).allSatisfy { $0 == "audio" }, "audio flows again: \(outcomes)")
    }

    @Test(arguments: Way.allCases) func cancellingARecordingReturnsAtOnceAndLeavesNoFile(way: Way) async throws {
        let microphone = try await openMicrophone(Self.captureSide, way: way)
        let path = KernelLab.scratch("cancelled.wav")
        let recording = Task { try await microphone.record(RecordingRequest(duration: .seconds(20), sampleRate: 48_000), to: path) }
        try await Task.sleep(for: .milliseconds(800))
        let cancelled = ContinuousClock.now
        recording.cancel()
        await #expect { try await recording.value } throws: { FieldHALError.Kind.cancelled.matches($0) }
        #expect(ContinuousClock.now - cancelled < .seconds(10), "ended by the cancel, not at the recording's 20 s")
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(await KernelLab.pluginDirectoriesGo(), "\(KernelLab.pluginDirectoriesLeft)")
    }

    @Test func theCLIRecordsAndPlays() async throws {
        let config = KernelLab.scratch("alsa.toml")
        try """
        [microphone]
        plugin = "alsa"
        pcm = "\(Self.captureSide)"
        [speaker]
        plugin = "alsa"
        pcm = "\(Self.playbackSide)"
        """.write(toFile: config, atomically: true, encoding: .utf8)
        let path = KernelLab.scratch("cli.wav")
        let record = try await CLI.run(["mic", "record", "--config", config, "--seconds", "0.5", "--rate", "48000", "-o", path])
        #expect(record.status == 0 && record.stdout.contains("0.50 s, 48000 Hz"), "\(record.stderr)")
        let play = try await CLI.run(["sound", "play", "--config", config])
        #expect(play.status == 0 && play.stdout == "played soft-alert (400 ms)\n", "\(play.stderr)")
        try "[microphone]\nplugin = \"alsa\"\npcm = \"hw:NoSuchCard\"\n".write(toFile: config, atomically: true, encoding: .utf8)
        let absent = try await CLI.run(["mic", "record", "--config", config, "--seconds", "1", "-o", path])
        #expect(absent.status == 69)
        #expect(absent.stderr == "fieldhal: microphone: alsa plugin: microphone hw:NoSuchCard: no such PCM or sound card — "
                + "aplay -L lists the PCM names, arecord -l the cards; set pcm in the configuration\n", "\(absent.stderr)")
    }
}

/// ALSA capture on any machine, no sound card: alsa-lib's `file` plugin reads the capture
/// data from a file, through libasound's real code path. Runs through the CLI so the
/// private ALSA configuration (a HOME with an .asoundrc) stays out of the test process.
@Suite("ALSA capture through the file plugin (host)")
struct ALSAFilePluginTests {
    /// Out of process: the CLI loads the alsa plugin installed as an external plugin
    /// (`fieldhal plugin manifest alsa --output`), which records into the directory the
    /// host passes it; the CLI's output and the WAV are the same either way.
    @Test(arguments: Way.allCases) func recordsTheFilesToneToWAVWithItsLevels(way: Way) async throws {
        let home = KernelLab.scratch("home")
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        // 2 s of a 440 Hz tone at a quarter of full scale, raw S16_LE mono at 16 kHz.
        let raw = home + "/tone.raw"
        let samples = (0..<32_000).map { Int16((0.25 * 32767 * sin(2 * Double.pi * 440 * Double($0) / 16_000)).rounded()) }
        try samples.withUnsafeBytes { try Data($0).write(to: URL(fileURLWithPath: raw)) }
        try "pcm.fieldtest { type file; slave.pcm \"null\"; file \"/dev/null\"; infile \"\(raw)\"; format \"raw\" }\n"
            .write(toFile: home + "/.asoundrc", atomically: true, encoding: .utf8)
        var environment = ["HOME": home]
        var plugin = "alsa"
        if way == .outOfProcess {
            let installed = try await CLI.run(["plugin", "manifest", "alsa", "--output", home + "/plugins/alsa-process"])
            #expect(installed.status == 0, "\(installed.stderr)")
            environment["FIELDHAL_PLUGIN_PATH"] = home + "/plugins"
            plugin = "alsa-process"
        }
        let config = home + "/kit.toml"
        try "[microphone]\nplugin = \"\(plugin)\"\npcm = \"fieldtest\"\n".write(toFile: config, atomically: true, encoding: .utf8)
        let path = home + "/out.wav"
        let result = try await CLI.run(["mic", "record", "--config", config, "--seconds", "1", "--rate", "16000", "-o", path, "--json"],
                                       environment: environment)
        #expect(result.status == 0, "\(result.stderr)")
        let report = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as! [String: Any]
        #expect(report["frames"] as? Int == 16_000)
        #expect(abs((report["peakDBFS"] as! Double) - -12.04) < 0.1)
        #expect(abs((report["rmsDBFS"] as! Double) - -15.05) < 0.1)
        let recorded = try KernelLab.samples(ofWAV: path)
        #expect(Array(recorded) == Array(samples.prefix(16_000)), "the WAV holds exactly the file's first second")
        let header = try Data(contentsOf: URL(fileURLWithPath: path)).prefix(44)
        #expect(header == Data(WAVFileWriter.header(sampleRate: 16_000, channels: 1, format: .s16le, dataBytes: 32_000)))
    }
}
