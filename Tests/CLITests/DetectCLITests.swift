import Foundation
import TestSupport
import Testing

/// `fieldhal detect` on the host, against a real gpsd (gpsfake): gpsd's receiver is found,
/// and the configuration written for it gives a fix. (Cameras, sound and force feedback
/// are found in the kernel lab: DetectDeviceTests.)
@Suite(.serialized, .timeLimit(.minutes(2)))
struct DetectCLITests {
    struct Found: Decodable {
        struct Device: Decodable { var capability, plugin, name, node: String; var details: [String: String] }
        var devices: [Device]
    }

    @Test func gpsdsReceiverIsFoundAndTheWrittenConfigurationGivesAFix() async throws {
        let gpsd = try await GPSFake.start(log: GPSFake.logPath("moving-3d.nmea"))
        defer { gpsd.kill() }
        let config = scratch("detected.toml")
        let detected = try await CLI.run(["detect", "--gpsd", "127.0.0.1:\(gpsd.port)", "--json", "--write-config", config])
        #expect(detected.status == 0, "\(detected.stderr)")
        let found = try JSONDecoder().decode(Found.self, from: Data(detected.stdout.utf8)).devices
        let receiver = try #require(found.first { $0.capability == "gps" }, "\(found)")
        #expect(receiver.plugin == "gpsd" && receiver.node.hasPrefix("/dev/pts/"), "gpsfake's pty: \(receiver)")
        #expect(receiver.details["gpsd"] == "127.0.0.1:\(gpsd.port)" && receiver.details["driver"]?.isEmpty == false)
        let text = try String(contentsOfFile: config, encoding: .utf8)
        #expect(text.contains("[gps]\nplugin = \"gpsd\"\ndevice = \"\(receiver.node)\"\nhost = \"127.0.0.1\"\nport = \(gpsd.port)"), "\(text)")
        let fix = try await CLI.run(["gps", "fix", "--config", config, "--timeout", "10", "--json"])
        #expect(fix.status == 0, "\(fix.stdout)\(fix.stderr)")
        #expect(fix.stdout.contains("\"latitude\""), "\(fix.stdout)")
    }

    @Test func withNoGpsdItFindsNoReceiverAndSaysSoQuickly() async throws {
        let port = try GPSFake.freePort()
        let started = ContinuousClock.now
        let detected = try await CLI.run(["detect", "--gpsd", "127.0.0.1:\(port)", "--json"])
        #expect(detected.status == 0, "\(detected.stderr)")
        #expect(try JSONDecoder().decode(Found.self, from: Data(detected.stdout.utf8)).devices.allSatisfy { $0.capability != "gps" })
        #expect(ContinuousClock.now - started < .seconds(10), "a closed port is an answer, not a wait")
        let bad = try await CLI.run(["detect", "--gpsd", "nowhere"])
        #expect(bad.status == 64 && bad.stderr.contains("host:port"), "\(bad.stderr)")
    }
}
