import FieldHAL
import Foundation
import TestSupport
import Testing

/// Record and replay from the kernel's devices (issue 44): a daemon on vivid's camera and
/// snd-aloop's speaker, a client taking a still and playing the alert sound through it,
/// recorded; then a daemon on `replay` devices, with no camera and no sound card, answering
/// the same commands as the kernel's devices did (the still: its size).
@Suite("record and replay on vivid and snd-aloop (kernel lab)", .enabled(if: KernelLab.isGuest), .serialized, .timeLimit(.minutes(3)))
struct RecordReplayLabTests {
    @Test func aStillAndASoundRecordedFromTheKernelsDevicesPlayBackTheSame() async throws {
        let node = try KernelLab.vividCaptureNode(instance: 0)
        let directory = KernelLab.scratch("record")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try """
        [camera]
        plugin = "v4l2"
        device = "\(node)"
        [speaker]
        plugin = "alsa"
        pcm = "\(LoopbackSoundTests.playbackSide)"
        [api]
        socket = "\(directory)/live.sock"
        """.write(toFile: directory + "/live.toml", atomically: true, encoding: .utf8)
        try """
        [camera]
        plugin = "replay"
        trace = "live.jsonl"
        speed = 10
        [speaker]
        plugin = "replay"
        trace = "live.jsonl"
        speed = 10
        [api]
        socket = "\(directory)/replay.sock"
        """.write(toFile: directory + "/replay.toml", atomically: true, encoding: .utf8)
        let commands: [[String]] = [
            ["camera", "snap", "--output", directory + "/still.jpg", "--width", "320", "--height", "180", "--json"],
            ["sound", "play", "--json"],
        ]
        func session(_ name: String) async throws -> (said: [String], trace: [KitTrace.Entry]) {
            let outcome = try await RecordedSession.run(config: directory + "/\(name).toml", trace: directory + "/\(name).jsonl",
                                                        state: directory + "/state-\(name)", commands: commands, patience: .seconds(60),
                                                        keeping: RecordedSession.sizeOnly)
            #expect(outcome.daemonStarted && outcome.recordStatus == 0, "\(outcome.recordErrors)")
            return (outcome.said, outcome.trace)
        }
        let live = try await session("live")
        let uses = live.trace.compactMap(\.use)
        #expect(uses.map(\.request) == [.cameraPhoto, .speakerPlay] && uses.first?.still?.width == 320 && uses.first?.still?.height == 180
                && uses.allSatisfy { $0.failure == nil }, "\(uses)")
        #expect(live.trace.contains { $0.device == "camera.default" && $0.state?.state == .available }, "the camera's state is in the trace")
        let replayed = try await session("replay")
        #expect(replayed.said == live.said, "played back:\n\(replayed.said.joined(separator: "\n"))\nwhere live:\n\(live.said.joined(separator: "\n"))")
    }
}
