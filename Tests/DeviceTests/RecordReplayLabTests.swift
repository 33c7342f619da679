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
            let config = directory + "/\(name).toml", trace = directory + "/\(name).jsonl", state = directory + "/state-\(name)"
            let daemon = try DaemonProcess(["--config", config, "--state-dir", state])
            #expect(await daemon.waitForLine(containing: "api: serving on", timeout: .seconds(60)) != nil, "\(daemon.output)")
            async let recording = CLI.run(["record", "--config", config, "--output", trace, "--seconds", "120"])
            let by = ContinuousClock.now + .seconds(60)
            while ContinuousClock.now < by, !((try? String(contentsOfFile: trace, encoding: .utf8)) ?? "").contains("\"state\"") {
                try await Task.sleep(for: .milliseconds(20))
            }
            var said: [String] = []
            for command in commands {
                let result = try await CLI.run(command + ["--config", config, "--state-dir", state])
                let text = command[0] == "camera"
                    ? result.stdout.split(separator: "\n").filter { $0.contains("width") || $0.contains("height") }.joined(separator: "\n")
                    : result.stdout
                said.append("\(command.prefix(2).joined(separator: " ")) → \(result.status)\n\(text)\(result.stderr)")
            }
            while ContinuousClock.now < by, ((try? KitTrace.read(trace).1.compactMap(\.use).count) ?? 0) < commands.count {
                try await Task.sleep(for: .milliseconds(20))
            }
            _ = await daemon.stop()
            let recorded = try await recording
            #expect(recorded.status == 0, "\(recorded.stderr)")
            return (said, try KitTrace.read(trace).1)
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
