@testable import ALSAPlugin
import FieldHAL
@testable import FieldHALFlows
import FieldHALVault
import Transrify
import Foundation
import TestSupport
import Testing
@testable import V4L2Plugin

/// Issue 19 on the real backends: evidence recorded in segments from vivid and snd-aloop at
/// the same time, through plugin processes (protocol 1.4: each segment into a memfd the
/// host passes). Every segment plays (ffprobe), the audio holds the tone played
/// into the loopback, the chain links, and nothing under the state directory is plaintext.
@Suite("Evidence in segments on vivid and snd-aloop (kernel lab)", .enabled(if: KernelLab.isGuest), .serialized)
struct SegmentedEvidenceLabTests {
    /// Out of process only: the backends' writing into `/dev/fd/N` is the same code either
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
        try writeTone(tone, frequency: 1000, amplitude: 0.5, seconds: 8, sampleRate: 44_100)
        let player = try KernelLab.start("/usr/bin/aplay", ["-q", "-D", LoopbackSoundTests.playbackSide, tone])
        try await Task.sleep(for: .milliseconds(300))

        var capture = EvidenceCapture(queue: queue, camera: camera, microphone: microphone, location: nil)
        capture.audioDuration = .seconds(3)
        capture.video = VideoRequest(duration: .seconds(3), width: 320, height: 240, framesPerSecond: 30)
        let started = ContinuousClock.now
        let scanning = PlaintextScan.watch(state, every: .milliseconds(200))
        let items = await capture.captureInSegments(incidentId: "lab", note: "kernel lab", segmentLength: .seconds(1))
        let took = ContinuousClock.now - started
        scanning.cancel()
        try? await KernelLab.finish(player)
        #expect(await scanning.value.isEmpty, "plaintext evidence under the state directory")
        #expect(items.filter { $0.failedKind != nil }.isEmpty, "\(items.filter { $0.failedKind != nil })")
        // Audio beside the photo and the video: not their sum (3 s + photo + 3 s, and each
        // video segment starts the stream anew: ~0.5 s in this emulated guest).
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
                let probe = try await KernelLab.run("/usr/bin/ffprobe", ["-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", out])
                let seconds = Double(probe.output.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
                #expect(probe.status == 0 && abs(seconds - 1) < 0.2, "\(kind) segment \(segment.segment?.sequence ?? -1) \(way): ffprobe \(probe.output)")
                if kind == .audio {
                    let samples = try KernelLab.samples(ofWAV: out)
                    let frequency = KernelLab.frequency(of: samples, sampleRate: 44_100)
                    #expect(abs(frequency - 1000) < 20, "the loopback's tone in audio segment \(segment.segment?.sequence ?? -1): \(frequency) Hz")
                } else {
                    let decode = try await KernelLab.run("/usr/bin/ffmpeg", ["-v", "error", "-i", out, "-f", "null", "-"])
                    #expect(decode.status == 0 && decode.output.isEmpty, "every frame decodes: \(decode.output)")
                }
            }
        }
        // Where the time goes: each segment's start after the first's, and its length.
        let timeline = items.compactMap { item in item.segment.map { "\(item.kind.rawValue) \($0.sequence) at \(String(format: "%.2f", $0.startedAt.timeIntervalSince(items[0].createdAt))) s for \(String(format: "%.2f", $0.durationSeconds)) s" } }
        print("segments on vivid and snd-aloop (\(way)): capture \(took), \(items.count) items; \(timeline.joined(separator: "; "))")
        await camera.close()
        await microphone.close()
    }
}
