import FieldHALCommandLine
import Foundation
import TestSupport
import Testing

func scratch(_ name: String) -> String { NSTemporaryDirectory() + "fieldhal-cli-\(UUID().uuidString)-\(name)" }

@Suite("fieldhal CLI")
struct CLITests {
    @Test(arguments: CLIWay.allCases)
    func statusShowsAllEightCapabilitiesOnTheExampleKit(_ way: CLIWay) async throws {
        try await eachWay(way) {
            let result = try await CLI.run(["status", "--config", CLI.exampleConfig, "--json"])
            #expect(result.status == 0, "\(result.stderr)")
            let report = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as! [String: Any]
            let capabilities = report["capabilities"] as! [[String: Any]]
            #expect(capabilities.count == 8)
            #expect(capabilities.allSatisfy { $0["state"] as? String == "available" && $0["plugin"] as? String == "fake" })
        }
    }

    /// A kit with two cameras and two receivers: `fieldhal devices` lists them, `--device`
    /// picks one, and a name the kit lacks is a usage error (64), alone and through the daemon.
    @Test(arguments: CLIWay.allCases)
    func deviceNamesTheOneOfSeveral(_ way: CLIWay) async throws {
        let config = scratch("two-of-each.toml")
        try """
            [camera.front]
            plugin = "fake"
            [camera.rear]
            plugin = "fake"
            roles = []
            [gps.receiver1]
            plugin = "fake"
            track = [ { lat = 52.52, lon = 13.40, acc = 4.0 } ]
            [gps.receiver2]
            plugin = "fake"
            track = [ { lat = -33.87, lon = 151.21, acc = 4.0 } ]
            """.write(toFile: config, atomically: true, encoding: .utf8)
        let options = ["--config", config, "--state-dir", scratch("state")]
        try await eachWay(way) {
            let listed = try await CLI.run(["devices", "--json"] + options)
            #expect(listed.status == 0, "\(listed.stderr)")
            let devices = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]] ?? []
            #expect(devices.map { "\($0["capability"]!).\($0["name"]!)" } == ["gps.receiver1", "gps.receiver2", "camera.front", "camera.rear"])
            #expect(devices.map { $0["isDefault"] as? Bool } == [true, false, true, false])
            #expect(devices.map { $0["roles"] as? [String] } == [[], [], ["evidence"], []])
            let table = try await CLI.run(["devices"] + options)
            #expect(table.stdout.contains("camera  front *") && table.stdout.contains("camera  rear "), "\(table.stdout)")

            let second = try await CLI.run(["gps", "fix", "--json", "--device", "receiver2"] + options)
            #expect(second.status == 0 && second.stdout.contains("-33.87"), "\(second.stdout)\(second.stderr)")
            let first = try await CLI.run(["gps", "fix", "--json"] + options)
            #expect(first.status == 0 && first.stdout.contains("52.52"), "the default is the first: \(first.stdout)\(first.stderr)")
            let photo = scratch("rear.jpg")
            let snap = try await CLI.run(["camera", "snap", "-o", photo, "--width", "64", "--height", "48", "--device", "rear"] + options)
            #expect(snap.status == 0 && snap.stdout.contains("64x48"), "\(snap.stdout)\(snap.stderr)")

            let missing = try await CLI.run(["camera", "formats", "--device", "side"] + options)
            #expect(missing.status == 64, "\(missing.stderr)")
            #expect(missing.stderr.contains("no camera device named \"side\"") && missing.stderr.contains("front, rear"), "\(missing.stderr)")
            let malformed = try await CLI.run(["camera", "formats", "--device", "a b"] + options)
            #expect(malformed.status == 64 && malformed.stderr.contains("cannot name a device"), "\(malformed.stderr)")
        }
    }

    /// `examples/fake-bench.toml`, two devices of every kind on the fake plugin, and the same
    /// kit built in (`--config fake-bench`): every one opens, alone and beside the daemon,
    /// and each is its capability's own.
    @Test(arguments: CLIWay.allCases, ["file", "built in"])
    func theFakeBenchOpensTwoDevicesOfEveryKind(_ way: CLIWay, _ source: String) async throws {
        let bench = source == "file" ? CLI.repositoryRoot.appendingPathComponent("examples/fake-bench.toml").path : "fake-bench"
        let options = ["--config", bench, "--state-dir", scratch("state")]
        try await eachWay(way) {
            let listed = try await CLI.run(["devices", "--json"] + options)
            #expect(listed.status == 0, "\(listed.stderr)")
            let devices = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]] ?? []
            var perKind: [String: Int] = [:]
            for device in devices { perKind[device["capability"] as? String ?? "?", default: 0] += 1 }
            #expect(perKind.count == 8 && perKind.values.allSatisfy { $0 == 2 }, "\(perKind)")
            let closed = devices.filter { $0["state"] as? String != "available" }
            #expect(closed.isEmpty, "\(closed)")
            // Each says what it is: the simulator of its kind, its device name as the serial.
            let identities = devices.compactMap { $0["identity"] as? [String: Any] }
            #expect(identities.count == devices.count && identities.allSatisfy { $0["vendor"] as? String == "FieldHAL" }, "\(identities)")
            #expect(Set(identities.compactMap { $0["model"] as? String }).contains("fake camera"), "\(identities)")
            let table = try await CLI.run(["devices"] + options)
            #expect(table.stdout.contains("(fake camera, FieldHAL, serial fake-camera0)"), "\(table.stdout)")
        }
    }

    /// `nfc read --json` prints each record whole, as the API does: a record's ID, and an
    /// external record's type, TNF and payload (not only a summary).
    @Test(arguments: CLIWay.allCases)
    func aTagsRecordsComeWholeWithTheirIDs(_ way: CLIWay) async throws {
        // A Type 4 NDEF message: a Text record "hello" with ID "r1", then external example.com:t holding 01 02.
        let config = scratch("records.toml")
        try """
        [nfc]
        plugin = "fake"
        tags = [{ type = "type4", uid = "08:12:34:56", raw_data = "9901080254723102656E68656C6C6F540D026578616D706C652E636F6D3A740102" }]
        """.write(toFile: config, atomically: true, encoding: .utf8)
        try await eachWay(way) {
            let read = try await CLI.run(["nfc", "read", "--json", "--config", config, "--state-dir", scratch("state")])
            #expect(read.status == 0, "\(read.stderr)")
            let tag = try JSONSerialization.jsonObject(with: Data(read.stdout.utf8)) as? [String: Any]
            let records = tag?["records"] as? [[String: Any]] ?? []
            #expect(records.count == 2, "\(read.stdout)")
            #expect(records.first?["kind"] as? String == "text" && records.first?["value"] as? String == "hello", "\(read.stdout)")
            #expect(records.first?["id"] as? String == "cjE=", "the ID r1, base64: \(read.stdout)")
            #expect(records.last?["kind"] as? String == "external" && records.last?["tnf"] as? Int == 4, "\(read.stdout)")
            #expect(records.last?["recordType"] as? String == "example.com:t" && records.last?["payload"] as? String == "AQI=", "\(read.stdout)")
            #expect(records.last?["id"] == nil, "\(read.stdout)")
            let text = try await CLI.run(["nfc", "read", "--config", config, "--state-dir", scratch("state")])
            #expect(text.stdout.contains("text: hello (id r1)"), "\(text.stdout)")
        }
    }

    /// The example to copy is the built-in bench, word for word.
    @Test func theBuiltInBenchIsTheExampleFile() throws {
        let file = try String(contentsOf: CLI.repositoryRoot.appendingPathComponent("examples/fake-bench.toml"), encoding: .utf8)
        #expect(file == BuiltinConfiguration.benchText + "\n")
    }

    @Test func pluginsListsOnlyWhatIsBuilt() async throws {
        let result = try await CLI.run(["plugins", "--json"])
        #expect(result.status == 0)
        let listing = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as! [String: Any]
        let names = (listing["plugins"] as! [[String: Any]]).map { $0["name"] as! String }
        // The simulators are always built: the fake kit and the replay of a recorded one.
        var built = ["fake", "replay"]
        #if GPS
        built.append("gpsd")
        #endif
        #if Fprintd
        built.append("fprintd")
        #endif
        #if NFC
        built.append("libnfc")
        #endif
        #if V4L2
        built.append("v4l2")
        #endif
        #if ALSA
        built.append("alsa")
        #endif
        #if Evdev
        built.append("evdev")
        #endif
        #expect(names == built.sorted())
    }

    @Test(arguments: CLIWay.allCases)
    func everyCapabilityCommandWorksOnTheFakeKit(_ way: CLIWay) async throws {
        try await eachWay(way) {
            let config = ["--config", CLI.exampleConfig]
            let fix = try await CLI.run(["gps", "fix", "--json"] + config)
            #expect(fix.status == 0, "\(fix.stderr)")
            #expect(fix.stdout.contains("\"source\" : \"live\""))
            let read = try await CLI.run(["nfc", "read", "--timeout", "2"] + config)
            #expect(read.status == 0 && read.stdout.contains("trf:duress:"), "\(read.stdout)\(read.stderr)")
            let emulate = try await CLI.run(["nfc", "emulate", "--uri", "trf:duress:alert-1", "--timeout", "5"] + config)
            #expect(emulate.status == 0 && emulate.stdout.contains("read by a reader"), "\(emulate.stderr)")
            let photo = scratch("snap.jpg")
            let snap = try await CLI.run(["camera", "snap", "-o", photo, "--width", "320", "--height", "240"] + config)
            #expect(snap.status == 0, "\(snap.stderr)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: photo)).prefix(2) == Data([0xFF, 0xD8]))
            let sound = scratch("rec.wav")
            let record = try await CLI.run(["mic", "record", "--seconds", "2", "-o", sound, "--rate", "22050", "--json"] + config)
            #expect(record.status == 0, "\(record.stderr)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: sound)).count == 44 + 2 * 22050 * 2)
            for pattern in ["success", "warning", "error", "light", "medium", "heavy"] {
                #expect(try await CLI.run(["haptics", "play", pattern] + config).status == 0)
            }
            let alert = try await CLI.run(["sound", "play", "soft-alert"] + config)
            #expect(alert.status == 0 && alert.stdout == "played soft-alert (400 ms)\n", "\(alert.stderr)")
            let video = scratch("clip.avi")
            let recorded = try await CLI.run(["camera", "record", "--seconds", "1", "--fps", "10", "--width", "320", "--height", "240",
                                              "-o", video, "--json"] + config)
            #expect(recorded.status == 0, "\(recorded.stderr)")
            #expect(recorded.stdout.contains("\"frames\" : 10"), "\(recorded.stdout)")
            let verify = try await CLI.run(["bio", "verify"] + config)
            #expect(verify.status == 0 && verify.stdout == "match\n")
        }
    }

    /// A recording whose device goes partway (the fake's `unplug_after_ms`, as a real
    /// camera or sound card unplugged): the clip up to there is kept and reported, and the
    /// command fails 69 with the device's error and where the clip is — alone, and through
    /// the daemon (whose report header carries `endedEarly`).
    @Test(arguments: CLIWay.allCases)
    func aRecordingWhoseDeviceGoesKeepsWhatCameBefore(_ way: CLIWay) async throws {
        let config = scratch("unplugging.toml")
        try """
            [camera]
            plugin = "fake"
            unplug_after_ms = 500

            [microphone]
            plugin = "fake"
            realtime = false
            unplug_after_ms = 700
            """.write(toFile: config, atomically: true, encoding: .utf8)
        try await eachWay(way) {
            let video = scratch("early.avi")
            let recorded = try await CLI.run(["camera", "record", "--seconds", "2", "--fps", "10", "--width", "160", "--height", "120",
                                              "-o", video, "--config", config])
            #expect(recorded.status == 69, "\(recorded)")
            #expect(recorded.stdout.contains("\(video): 160x120 Motion-JPEG AVI, 5 frames in 0.50 s"), "\(recorded.stdout)")
            #expect(recorded.stderr.contains("unplugged after 0.5 s of recording")
                    && recorded.stderr.contains("the 0.50 s recorded before it are kept in \(video)"), "\(recorded.stderr)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: video)).prefix(4) == Data("RIFF".utf8))

            let sound = scratch("early.wav")
            let heard = try await CLI.run(["mic", "record", "--seconds", "2", "--rate", "8000", "-o", sound, "--json", "--config", config])
            #expect(heard.status == 69, "\(heard)")
            #expect(heard.stdout.contains("\"endedEarly\"") && heard.stdout.contains("\"disconnected\""), "\(heard.stdout)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: sound)).count == 44 + 5600 * 2, "0.7 s at 8 kHz, mono, 16 bits")
        }
    }

    /// A kit whose configuration went missing must not fall back to the fake kit, whose
    /// fingerprint sensor always matches (issue 18): without a configuration, commands fail
    /// and say what to do; the fake kit runs only when asked for by name; the demo asks.
    /// (Assumes no /etc/fieldhal/fieldhal.toml on the test machine, as on CI.)
    @Test func withoutAConfigurationNothingFallsBackToTheFakeKit() async throws {
        guard !FileManager.default.fileExists(atPath: "/etc/fieldhal/fieldhal.toml") else { return }
        let state = scratch("nofake-state")
        for arguments in [["status"], ["lock", "unlock", "--pin-stdin"], ["bio", "verify"]] {
            let refused = try await CLI.run(arguments + ["--state-dir", state], environment: ["FIELDHAL_CONFIG": ""], input: "1234\n")
            #expect(refused.status == 78, "\(arguments): \(refused)")
            #expect(refused.stderr == "fieldhal: /etc/fieldhal/fieldhal.toml: does not exist, and neither --config nor FIELDHAL_CONFIG names another — write one (examples/ has one per backend), or pass --config fake for the built-in fake kit (simulated devices only: its fingerprint sensor always matches)\n",
                    "\(arguments): \(refused.stderr)")
        }
        let daemon = try await CLI.run(["run", "--state-dir", state], environment: ["FIELDHAL_CONFIG": ""])
        #expect(daemon.status == 78 && daemon.stderr.contains("pass --config fake"), "\(daemon)")
        let byOption = try await CLI.run(["status", "--config", "fake", "--state-dir", state], environment: ["FIELDHAL_CONFIG": ""])
        #expect(byOption.status == 0 && byOption.stdout.contains("built-in fake kit"), "\(byOption)")
        let byEnvironment = try await CLI.run(["bio", "verify", "--state-dir", state], environment: ["FIELDHAL_CONFIG": "fake"])
        #expect(byEnvironment.status == 0 && byEnvironment.stdout == "match\n", "\(byEnvironment)")
        // The front decides the same way before handing over.
        let front = try await offPool {
            try CLI.runBlocking(["status", "--state-dir", state], environment: ["FIELDHAL_CONFIG": ""], executable: CLI.frontBinary)
        }
        #expect(front.status == 78 && front.stderr.contains("pass --config fake"), "\(front)")
    }

    @Test(arguments: CLIWay.allCases)
    func failuresAreOneLineOnStderrWithAMeaningfulStatus(_ way: CLIWay) async throws {
        try await eachWay(way) {
            let badConfig = scratch("bad.toml")
            try "[gps]\nplugin = \"fake\"\ninterval_ms = \"fast\"\n".write(toFile: badConfig, atomically: true, encoding: .utf8)
            let rejected = try await CLI.run(["status", "--config", badConfig])
            #expect(rejected.status == 78)
            #expect(rejected.stderr == "fieldhal: \(badConfig):3: gps.interval_ms: expected an integer, found string \"fast\"\n")

            let viaEnvironment = try await CLI.run(["status"], environment: ["FIELDHAL_CONFIG": badConfig])
            #expect(viaEnvironment.status == 78)

            let noCamera = scratch("nocam.toml")
            try "[gps]\nplugin = \"fake\"\n".write(toFile: noCamera, atomically: true, encoding: .utf8)
            let missing = try await CLI.run(["camera", "snap", "-o", scratch("x.jpg"), "--config", noCamera])
            #expect(missing.status == 69)
            #expect(missing.stderr.split(separator: "\n").count == 1 && missing.stderr.contains("add a [camera] section"))

            let noTag = scratch("notag.toml")
            try "[nfc]\nplugin = \"fake\"\n".write(toFile: noTag, atomically: true, encoding: .utf8)
            let timeout = try await CLI.run(["nfc", "read", "--timeout", "0.2", "--config", noTag])
            #expect(timeout.status == 75 && timeout.stderr.contains("no tag within 0.2 s"))

            let badPattern = try await CLI.run(["haptics", "play", "buzz"])
            #expect(badPattern.status == 64)
        }
    }

    @Test(arguments: CLIWay.allCases)
    func builtInFakeKitRunsWithNoConfiguration(_ way: CLIWay) async throws {
        try await eachWay(way) {
            // Only meaningful where no system configuration is installed.
            guard !FileManager.default.fileExists(atPath: "/etc/fieldhal/fieldhal.toml") else { return }
            let status = try await CLI.run(["status"])
            #expect(status.status == 0 && status.stdout.hasPrefix("configuration: built-in fake kit"))
        }
    }

    @Test(arguments: CLIWay.allCases)
    func aSnapshotKilledMidWriteLeavesTheOldFileOrTheNew(_ way: CLIWay) async throws {
        try await eachWay(way) {
            // SIGKILL a real `camera snap` at varying moments; the output path must always hold
            // a complete JPEG (the first one, or a later one), never a torn file.
            let output = scratch("killed.jpg")
            let arguments = ["camera", "snap", "-o", output, "--width", "1600", "--height", "1200", "--config", CLI.exampleConfig]
            #expect(try await CLI.run(arguments).status == 0)
            let first = try Data(contentsOf: URL(fileURLWithPath: output))
            for delay in stride(from: 50, through: 1250, by: 150) {
                let process = Process()
                process.executableURL = CLI.binary
                process.arguments = arguments
                process.environment = ["FIELDHAL_STATE_DIR": scratch("state")]
                try process.run()
                try await Task.sleep(for: .milliseconds(delay))
                kill(process.processIdentifier, SIGKILL)
                try await offPool { process.waitUntilExit() }
                let now = try Data(contentsOf: URL(fileURLWithPath: output))
                #expect(now.count == first.count && now.suffix(2) == Data([0xFF, 0xD9]), "after a kill at \(delay) ms")
            }
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: NSTemporaryDirectory())
                .filter { $0.hasPrefix(".\(URL(fileURLWithPath: output).lastPathComponent).tmp") }
            // A kill can leave a temporary file behind; it never replaces the output.
            #expect(leftovers.count <= 9)
        }
    }
}
