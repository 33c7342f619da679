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

    /// libnfc lists the reader named in LIBNFC_DEVICE (here the PN532 emulator on a pty)
    /// without opening it; --intrusive opens it for the chip's name. The configuration
    /// written for it reads the emulator's tag.
    @Test func libnfcsReaderIsFoundAsReaderAndEmulatorAndTheConfigurationReadsATag() async throws {
        let emulator = try await PN532Emulator.start()
        defer { emulator.stop() }
        let environment = ["LIBNFC_DEVICE": emulator.connstring()]
        let quiet = try await CLI.run(["detect", "--json", "--gpsd", "127.0.0.1:1"], environment: environment)
        #expect(quiet.status == 0, "\(quiet.stderr)")
        let listed = try JSONDecoder().decode(Found.self, from: Data(quiet.stdout.utf8)).devices.filter { $0.plugin == "libnfc" && $0.node == emulator.connstring() }
        #expect(Set(listed.map(\.capability)) == ["nfc", "nfc_emulator"], "\(listed)")
        #expect(listed.allSatisfy { $0.name == emulator.connstring() }, "not opened without --intrusive: \(listed)")

        let config = scratch("detected-nfc.toml")
        let probed = try await CLI.run(["detect", "--json", "--intrusive", "--gpsd", "127.0.0.1:1", "--write-config", config], environment: environment)
        #expect(probed.status == 0, "\(probed.stderr)")
        let chips = try JSONDecoder().decode(Found.self, from: Data(probed.stdout.utf8)).devices.filter { $0.plugin == "libnfc" && $0.node == emulator.connstring() }
        #expect(chips.count == 2 && chips.allSatisfy { $0.name.contains("PN532") }, "\(chips)")
        let read = try await CLI.run(["nfc", "read", "--config", config])
        #expect(read.stdout.contains("type2 tag 04:A1:B2:C3:D4:E5:F6"), "\(read.stdout)\(read.stderr)")
    }

    #if Fprintd
    @Test func fprintdsSensorIsFoundOnItsBus() async throws {
        let lab = try await FprintdLab.start()
        defer { lab.stop() }
        let config = scratch("detected-bio.toml")
        let detected = try await CLI.run(["detect", "--json", "--gpsd", "127.0.0.1:1", "--timeout", "10", "--write-config", config],
                                         environment: ["DBUS_SYSTEM_BUS_ADDRESS": lab.busAddress])
        #expect(detected.status == 0, "\(detected.stderr)")
        let sensor = try #require(try JSONDecoder().decode(Found.self, from: Data(detected.stdout.utf8)).devices.first { $0.capability == "biometrics" })
        #expect(sensor.plugin == "fprintd" && sensor.node.hasPrefix("/net/reactivated/Fprint/Device/"), "\(sensor)")
        #expect(sensor.name.lowercased().contains("virtual"), "libfprint's virtual sensor: \(sensor.name)")
        let status = try await CLI.run(["bio", "status", "--config", config])
        #expect(status.status == 0 && status.stdout.hasPrefix("sensor present"), "\(status.stdout)\(status.stderr)")
    }
    #endif

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
