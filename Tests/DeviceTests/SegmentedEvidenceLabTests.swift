@testable import ALSAPlugin
import FieldHAL
@testable import FieldHALFlows
import FieldHALSystem
import FieldHALVault
import Foundation
import TestSupport
import Testing
import Transrify
@testable import V4L2Plugin

/// Issue 19 on the real backends: evidence recorded in segments from vivid and snd-aloop at
/// the same time, through plugin processes (protocol 1.5: one stream per device, cut into
/// segments by the plugin, each passed to the host in a sealed memfd as it closes). Every
/// segment plays (ffprobe), the audio holds the tone played into the loopback with nothing
/// lost at the joins, the chain links, and nothing under the state directory is plaintext.
@Suite("Evidence in segments on vivid and snd-aloop (kernel lab)", .enabled(if: KernelLab.isGuest), .serialized)
struct SegmentedEvidenceLabTests {
    /// Out of process only: the backends' writing into a `MemoryFile` is the same code either
    /// way, and this way also crosses the host's memfd to the plugin (one way keeps CI's
    /// device stage ~50 s shorter).
    @Test func audioAndVideoRecordInChainedSegmentsThatPlay() async throws {
        let way = Way.outOfProcess
        let state = KernelLab.scratch("evidence-state")
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: state) }
        let directory = StateDirectory(path: state)
        let queue = try EvidenceQueue(stateDirectory: directory, vault: try Vault(stateDirectory: directory))
        let node = try KernelLab.vividCaptureNode(instance: 0)
        guard case .camera(let camera) = try await way.descriptor(V4L2Plugin.descriptor!, "v4l2")
            .open(.camera, PluginParameters(["device": .string(node)]), KernelLab.context) else { throw LabError("no camera") }
        let microphone = try await openMicrophone(LoopbackSoundTests.captureSide, way: way)
        let tone = KernelLab.scratch("evidence-tone.wav")
        // 997 Hz: a gap of whole milliseconds would not shift a 1000 Hz tone's phase, and
        // the joins below look for a shift.
        try writeTone(tone, frequency: 997, amplitude: 0.5, seconds: 8, sampleRate: 44_100)
        let player = try KernelLab.start("/usr/bin/aplay", ["-q", "-D", LoopbackSoundTests.playbackSide, tone])
        try await Task.sleep(for: .milliseconds(300))

        var capture = EvidenceCapture(queue: queue, camera: camera, microphone: microphone, location: nil)
        capture.audioDuration = .seconds(3)
        capture.video = VideoRequest(duration: .seconds(3), width: 320, height: 240, framesPerSecond: 30)
        // The overruns each audio segment reports, in order: samples the device lost while
        // the capture could not keep up (a busy guest), which the recording says.
        let overruns = LockedValue<[Int]>([])
        capture.segmentRecorded = { kind, _, lost in if kind == .audio { overruns.withLock { $0.append(lost) } } }
        let started = ContinuousClock.now
        let scanning = PlaintextScan.watch(state, every: .milliseconds(200))
        let items = await capture.captureInSegments(incidentId: "lab", note: "kernel lab", segmentLength: .seconds(1))
        let took = ContinuousClock.now - started
        scanning.cancel()
        try? await KernelLab.finish(player)
        #expect(await scanning.value.isEmpty, "plaintext evidence under the state directory")
        #expect(items.filter { $0.failedKind != nil }.isEmpty, "\(items.filter { $0.failedKind != nil })")
        // Audio beside the photo and the video: not their sum (3 s + photo + 3 s).
        #expect(took < .seconds(9), "the capture took \(took)")

        for kind in [EvidenceKind.audio, .video] {
            let segments = items.filter { $0.kind == kind }
            #expect(segments.map { $0.segment?.sequence } == [0, 1, 2], "\(kind) \(way)")
            for (previous, next) in zip(segments, segments.dropFirst()) {
                #expect(next.segment?.previousSHA256 == previous.sha256)
            }
            for segment in segments {
                let out = KernelLab.scratch("segment-\(segment.segment?.sequence ?? -1).\(kind == .audio ? "wav" : "avi")")
                defer { try? FileManager.default.removeItem(atPath: out) }
                try queue.decrypt(segment, to: out)
                let (probe, seconds) = try await Self.probedSeconds(out)
                #expect(probe.status == 0 && abs(seconds - 1) < 0.2, "\(kind) segment \(segment.segment?.sequence ?? -1) \(way): ffprobe \(probe.output)")
                if kind == .audio {
                    let samples = try KernelLab.samples(ofWAV: out)
                    let frequency = KernelLab.frequency(of: samples, sampleRate: 44_100)
                    #expect(abs(frequency - 997) < 20, "the loopback's tone in audio segment \(segment.segment?.sequence ?? -1): \(frequency) Hz")
                } else {
                    let decode = try await KernelLab.run("/usr/bin/ffmpeg", ["-v", "error", "-i", out, "-f", "null", "-"])
                    #expect(decode.status == 0 && decode.output.isEmpty, "every frame decodes: \(decode.output)")
                }
            }
        }
        // One stream cut between frames (protocol 1.5): each segment starts where the one
        // before it ended. Restarting the stream per segment left 0.4–0.7 s between video
        // segments in this guest.
        for kind in [EvidenceKind.audio, .video] {
            let places = items.filter { $0.kind == kind }.compactMap(\.segment)
            let gaps = zip(places, places.dropFirst()).map { $1.startedAt.timeIntervalSince($0.startedAt) - $0.durationSeconds }
            #expect(gaps.allSatisfy { abs($0) < (kind == .video ? 0.1 : 0.05) }, "\(kind): gaps between segments \(gaps.map { String(format: "%.3f", $0) }) s")
        }
        let audioSeconds = items.filter { $0.kind == .audio }.compactMap(\.segment?.durationSeconds).reduce(0, +)
        #expect(abs(audioSeconds - 3) < 0.001, "every sample of the 3 s in the segments: \(audioSeconds) s")
        // The tone runs on across each join: a sine obeys x[n+1] = 2cos(w)x[n] − x[n−1] to a
        // sample's rounding, and samples lost at a join would break it there.
        var joined: [Int16] = []
        var joins: [Int] = []
        for segment in items.filter({ $0.kind == .audio }) {
            let out = KernelLab.scratch("join.wav")
            defer { try? FileManager.default.removeItem(atPath: out) }
            try queue.decrypt(segment, to: out)
            if !joined.isEmpty { joins.append(joined.count) }
            joined += try KernelLab.samples(ofWAV: out)
        }
        let step = 2 * cos(2 * Double.pi * 997 / 44_100)
        func residual(_ n: Int) -> Double { abs(Double(joined[n + 1]) - step * Double(joined[n]) + Double(joined[n - 1])) }
        let residuals = joins.map { join in (join - 2...join + 1).map(residual).max() ?? 0 }
        let atJoins = residuals.max() ?? 0
        let elsewhere = (1..<joined.count - 1).lazy.map(residual).sorted()[joined.count * 99 / 100]
        #expect(elsewhere < 50, "the tone's residual, 99th percentile away from the joins: \(elsewhere)")
        // Nothing lost at a join unless the recording says so: a join whose tone breaks must
        // border a segment that reports an overrun (a guest too busy to read in time loses
        // samples anywhere, and says it), never a silent gap.
        let reported = overruns.value
        for (index, value) in residuals.enumerated() where value >= 50 {
            let said = reported.indices.contains(index + 1) && (reported[index] > 0 || reported[index + 1] > 0)
            #expect(said, "the tone breaks at join \(index + 1) (residual \(value)) with no overrun reported: \(reported)")
        }
        // Where the time goes: each segment's start after the first's, and its length.
        let timeline = items.compactMap { item in item.segment.map { "\(item.kind.rawValue) \($0.sequence) at \(String(format: "%.2f", $0.startedAt.timeIntervalSince(items[0].createdAt))) s for \(String(format: "%.2f", $0.durationSeconds)) s" } }
        print("segments on vivid and snd-aloop (\(way)): capture \(took), \(items.count) items; \(timeline.joined(separator: "; ")); the tone's residual at the joins \(atJoins), elsewhere \(elsewhere); overruns per audio segment \(overruns.value)")
        await camera.close()
        await microphone.close()
    }

    /// A camera and a microphone unplugged in the middle of their second segment: each
    /// segment under way is closed where its device went and handed over — it plays, and
    /// holds what was recorded — before the recording ends with `disconnected`. Out of
    /// process: the plugin's backend closes it, and the segment crosses to the host before
    /// the error does.
    @Test func aDeviceUnpluggedMidSegmentKeepsWhatTheSegmentHolds() async throws {
        let node = try KernelLab.vividCaptureNode(instance: 0)
        guard case .camera(let camera) = try await Way.outOfProcess.descriptor(V4L2Plugin.descriptor!, "v4l2")
            .open(.camera, PluginParameters(["device": .string(node)]), KernelLab.context) else { throw LabError("no camera") }
        let clips = try await Self.unplugMidSegment(driver: "vivid") { closed in
            try await camera.recordVideo(VideoRequest(duration: .seconds(20), width: 320, height: 240, framesPerSecond: 30),
                                         in: RecordingSegments(length: .seconds(1)) { closed(($0.sequence, $0.seconds, $0.file)) })
        }
        await camera.close()
        let microphone = try await openMicrophone("hw:Dummy,0,0", ["read_timeout_ms": .integer(1000)], way: .outOfProcess)
        let sounds = try await Self.unplugMidSegment(driver: "snd_dummy") { closed in
            try await microphone.record(RecordingRequest(duration: .seconds(20), sampleRate: 48_000, channels: 2),
                                        in: RecordingSegments(length: .seconds(1)) { closed(($0.sequence, $0.seconds, $0.file)) })
        }
        await microphone.close()

        var kept: [String] = []
        for (kind, segments) in [("video", clips), ("audio", sounds)] {
            #expect(segments.count >= 2 && segments.map(\.sequence) == Array(0..<segments.count), "\(kind) segments \(segments.map(\.sequence))")
            guard let last = segments.last, segments.count >= 2 else { continue }
            // The segments before whole; the last cut short where the device went.
            #expect(segments.dropLast().allSatisfy { abs($0.seconds - 1) < 0.1 }, "\(kind) segments last \(segments.map(\.seconds)) s")
            #expect(last.seconds > 0 && last.seconds < 1, "\(kind) segment \(last.sequence) (the one under way) lasts \(last.seconds) s")
            let out = KernelLab.scratch("unplugged-segment.\(kind == "audio" ? "wav" : "avi")")
            defer { try? FileManager.default.removeItem(atPath: out) }
            try Data(last.file.read(at: 0, count: last.file.size)).write(to: URL(fileURLWithPath: out))
            let (probe, seconds) = try await Self.probedSeconds(out)
            #expect(probe.status == 0 && abs(seconds - last.seconds) < 0.1, "\(kind) segment \(last.sequence): ffprobe \(probe.output), recorded \(last.seconds) s")
            kept.append("\(kind) \(segments.count) segments, the last \(String(format: "%.2f", last.seconds)) s")
        }
        print("unplugged mid-segment: \(kept.joined(separator: "; "))")
    }

    typealias Closed = (sequence: Int, seconds: Double, file: MemoryFile)

    /// Runs `record` (1 s segments), unbinds `driver`'s device half a second into the second
    /// segment, and returns the segments it handed over; the recording must end
    /// `disconnected`. The device is bound again before this returns.
    static func unplugMidSegment(driver: String, _ record: @escaping @Sendable (@escaping @Sendable (Closed) -> Void) async throws -> Void) async throws -> [Closed] {
        let segments = LockedValue<[Closed]>([])
        let recording = Task { try await record { segment in segments.withLock { $0.append(segment) } } }
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline, segments.withLock({ $0.isEmpty }) { try await Task.sleep(for: .milliseconds(20)) }
        try await Task.sleep(for: .milliseconds(500))
        try KernelLab.writeSysfs("/sys/bus/platform/drivers/\(driver)/unbind", "\(driver).0")
        defer { try? KernelLab.writeSysfs("/sys/bus/platform/drivers/\(driver)/bind", "\(driver).0") }
        await #expect { try await recording.value } throws: { FieldHALError.Kind.disconnected.matches($0) }
        return segments.withLock { $0 }
    }

    /// ffprobe's reading of a file's duration (−1 when it reads none), and its run.
    static func probedSeconds(_ path: String) async throws -> (probe: (status: Int32, output: String), seconds: Double) {
        let probe = try await KernelLab.run("/usr/bin/ffprobe", ["-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", path])
        return (probe, Double(probe.output.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1)
    }

    /// The state directory on a 2 MiB tmpfs, a 20 s recording of both kinds: the disk fills
    /// within seconds. Recording stops there; every segment sealed before it stays in the
    /// queue, whole (it plays) and chained; nothing half-written is left once the queue
    /// opens again.
    @Test func aFullDiskStopsTheRecordingAndKeepsEverySealedSegment() async throws {
        let state = KernelLab.scratch("full-state")
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        let mounted = try await KernelLab.run("/bin/mount", ["-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", state])
        try #require(mounted.status == 0, "\(mounted.output)")
        var failure: (any Error)?
        do { try await recordUntilFull(state) } catch { failure = error }
        try await KernelLab.run("/bin/umount", [state])
        if let failure { throw failure }
    }

    private func recordUntilFull(_ state: String) async throws {
        let directory = StateDirectory(path: state)
        let queue = try EvidenceQueue(stateDirectory: directory, vault: try Vault(stateDirectory: directory))
        let node = try KernelLab.vividCaptureNode(instance: 0)
        guard case .camera(let camera) = try await Way.outOfProcess.descriptor(V4L2Plugin.descriptor!, "v4l2")
            .open(.camera, PluginParameters(["device": .string(node)]), KernelLab.context) else { throw LabError("no camera") }
        let microphone = try await openMicrophone("hw:Dummy,0,0", way: .outOfProcess)
        var capture = EvidenceCapture(queue: queue, camera: camera, microphone: microphone, location: nil)
        capture.audioDuration = .seconds(20)
        capture.video = VideoRequest(duration: .seconds(20), width: 320, height: 240, framesPerSecond: 30)
        let started = ContinuousClock.now
        let items = await capture.captureInSegments(incidentId: "full", note: "disk full", segmentLength: .seconds(1))
        let took = ContinuousClock.now - started
        await camera.close()
        await microphone.close()
        #expect(took < .seconds(14), "recording stopped when the disk was full, not after 20 s: \(took)")

        let segments = items.filter { $0.segment != nil }
        #expect(segments.contains { $0.kind == .video } && segments.contains { $0.kind == .audio }, "\(items.map(\.kind))")
        // Everything the capture says it sealed is in the queue when it opens again, and
        // nothing else: no item without its payload, no payload or temporary file left.
        let reopened = try EvidenceQueue(stateDirectory: directory, vault: try Vault(stateDirectory: directory))
        let queued = try reopened.items()
        #expect(Set(queued.map(\.id)) == Set(items.map(\.id)), "queued \(queued.count), sealed \(items.count)")
        let names = try FileManager.default.contentsOfDirectory(atPath: state + "/evidence").sorted()
        #expect(names.allSatisfy { $0.hasSuffix(".item") || $0.hasSuffix(".data") || $0 == "queue.lock" }, "\(names)")
        #expect(names.filter { $0.hasSuffix(".data") }.count == queued.count, "\(names)")
        for kind in [EvidenceKind.audio, .video] {
            let chain = segments.filter { $0.kind == kind }
            #expect(chain.map { $0.segment?.sequence ?? -1 } == Array(0..<chain.count), "\(kind)")
            for (previous, next) in zip(chain, chain.dropFirst()) {
                #expect(next.segment?.previousSHA256 == previous.sha256)
            }
            // Each decrypts to its recorded size and SHA-256; the last, sealed nearest the full
            // disk, also plays to its length (ffprobe takes seconds a file in this guest).
            for segment in chain {
                let out = KernelLab.scratch("full-\(segment.id).\(kind == .audio ? "wav" : "avi")")
                defer { try? FileManager.default.removeItem(atPath: out) }
                try reopened.decrypt(segment, to: out)
                guard segment.id == chain.last?.id else { continue }
                let (probe, seconds) = try await Self.probedSeconds(out)
                #expect(probe.status == 0 && abs(seconds - (segment.segment?.durationSeconds ?? 0)) < 0.2,
                        "\(kind) segment \(segment.segment?.sequence ?? -1): ffprobe \(probe.output)")
            }
        }
        print("disk full mid-recording: stopped after \(took); sealed \(segments.filter { $0.kind == .audio }.count) audio and \(segments.filter { $0.kind == .video }.count) video segments, \(items.count) items in all")
    }
}
