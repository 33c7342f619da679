import Foundation
import TestSupport
import Testing

/// `fieldhal detect` in the kernel lab: it must find vivid's capture node, snd-aloop's
/// capture and playback devices and a uinput force-feedback device, and the configuration
/// it writes must open all four.
@Suite("fieldhal detect (kernel lab)", .enabled(if: KernelLab.isGuest), .serialized)
struct DetectDeviceTests {
    struct Found: Decodable {
        struct Device: Decodable {
            var capability, plugin, name, node: String
            var stableName: String?
            var details: [String: String]
        }
        var devices: [Device]
    }

    struct Status: Decodable {
        struct Entry: Decodable { var capability: String; var plugin: String?; var state: String; var device: String? }
        var capabilities: [Entry]
    }

    @Test func findsVividLoopbackAndAForceFeedbackDeviceAndWritesAConfigurationThatOpensThem() async throws {
        let peer = try await UinputPeer()
        let config = KernelLab.scratch("detected.toml")
        try? FileManager.default.removeItem(atPath: config)
        let detected = try await CLI.run(["detect", "--json", "--write-config", config])
        #expect(detected.status == 0, "\(detected.stderr)")
        let found = try JSONDecoder().decode(Found.self, from: Data(detected.stdout.utf8)).devices

        let camera = try #require(found.first { $0.capability == "camera" && $0.details["driver"] == "vivid" }, "\(found)")
        #expect(camera.plugin == "v4l2" && camera.node.hasPrefix("/dev/video"))
        #expect(camera.details["formats"]?.contains("YUYV") == true, "vivid offers YUYV: \(camera.details)")
        for capability in ["microphone", "speaker"] {
            let loopback = found.first { $0.capability == capability && $0.stableName?.contains("CARD=Loopback") == true }
            #expect(loopback?.plugin == "alsa", "snd-aloop as a \(capability): \(found.filter { $0.capability == capability })")
        }
        let haptics = try #require(found.first { $0.capability == "haptics" && $0.node == peer.node }, "\(found)")
        #expect(haptics.plugin == "evdev" && haptics.details["effects"]?.contains("rumble") == true)

        // The configuration written for them opens every one (the lab's two vivid instances
        // each a named camera section; the loopback card may come after snd-dummy).
        let text = try String(contentsOfFile: config, encoding: .utf8)
        #expect(text.range(of: #"\[camera(\.[A-Za-z0-9_-]+)?\]\nplugin = "v4l2""#, options: .regularExpression) != nil
                && text.range(of: #"\[haptics(\.[A-Za-z0-9_-]+)?\]\nplugin = "evdev""#, options: .regularExpression) != nil, "\(text)")
        let status = try await CLI.run(["status", "--config", config, "--json"])
        #expect(status.status == 0, "\(status.stderr)")
        let states = try JSONDecoder().decode(Status.self, from: Data(status.stdout.utf8)).capabilities
        for capability in ["camera", "microphone", "speaker", "haptics"] {
            #expect(states.first { $0.capability == capability }?.state == "available", "\(capability): \(states)\n\(text)")
        }
        // Never replaced without --force.
        let again = try await CLI.run(["detect", "--write-config", config])
        #expect(again.status == 64 && again.stderr.contains("--force"), "\(again.stderr)")
        try await peer.stop()
    }
}
