import FieldHAL
import FieldHALAPI
import Foundation
import Testing
import TestSupport

/// `fieldhal record` and the `replay` plugin (issue 44): a kit's receiver and reader,
/// recorded through the daemon's API, played back as a kit of their own, give the same fixes
/// and tags — at the recorded speed and ten times faster.
@Suite(.timeLimit(.minutes(3))) struct RecordReplayTests {
    /// Fix events as `fieldhal gps watch --json` prints them.
    static func line(_ fix: Fix) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        return String(decoding: try encoder.encode(FixEventData(fix: fix, device: "default")), as: UTF8.self)
    }

    @Test func aRecordedKitPlaysBackIntoTheSameFixesAndTags() async throws {
        let directory = NSTemporaryDirectory() + "fieldhal-record-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let config = directory + "/kit.toml", trace = directory + "/trace.jsonl"
        try """
        [gps]
        plugin = "fake"
        interval_ms = 100
        track = [
          { lat = 52.516275, lon = 13.377704, alt = 34.0, acc = 4.5, speed = 1.4, course = 90.0, sats = 9 },
          { lat = 52.516290, lon = 13.377910, alt = 34.1, acc = 4.2, speed = 1.4, course = 88.0, sats = 10 },
          { mode = "no-fix", lat = 0, lon = 0 },
        ]
        [nfc]
        plugin = "fake"
        tags = [{ type = "ntag213", uid = "04:A1:B2:C3:D4:E5:F6", text = "recorded in the field" }]
        [api]
        socket = "\(directory)/api.sock"
        """.write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(["--config", config, "--state-dir", directory + "/state"])
        #expect(await daemon.waitForLine(containing: "api: serving on", timeout: .seconds(30)) != nil, "\(daemon.output)")
        let recorded = try await CLI.run(["record", "--config", config, "--output", trace, "--seconds", "2"])
        _ = await daemon.stop()
        #expect(recorded.status == 0 && recorded.stderr.contains("entries to \(trace)"), "\(recorded.stdout)\(recorded.stderr)")
        let mode = try FileManager.default.attributesOfItem(atPath: trace)[.posixPermissions] as? Int
        #expect(mode == 0o600, "a trace is private")

        let (header, entries) = try KitTrace.read(trace)
        #expect(header.trace == KitTrace.format && header.source == config)
        let fixes = entries.compactMap(\.fix)
        let tags = entries.filter { $0.tagState == "found" }.compactMap(\.tag)
        #expect(fixes.count >= 8 && fixes.contains { !$0.hasPosition }, "about 20 fixes in 2 s, no-fix ones among them: \(fixes.count)")
        #expect(tags.first?.uidString == "04:A1:B2:C3:D4:E5:F6", "\(entries.filter { $0.tag != nil })")

        for speed in [1, 10] {
            let replay = directory + "/replay-\(speed).toml"
            try """
            [gps]
            plugin = "replay"
            trace = "trace.jsonl"
            speed = \(speed)
            [nfc]
            plugin = "replay"
            trace = "trace.jsonl"
            speed = \(speed)
            """.write(toFile: replay, atomically: true, encoding: .utf8)
            let watched = try await CLI.run(["gps", "watch", "--json", "--count", "\(fixes.count)", "--config", replay, "--state-dir", directory + "/state"])
            #expect(watched.status == 0, "\(watched.stderr)")
            let played = watched.stdout.split(separator: "\n").map(String.init)
            #expect(played == (try fixes.map(Self.line)), "speed \(speed): the same fixes, in order")
            let read = try await CLI.run(["nfc", "read", "--json", "--config", replay, "--state-dir", directory + "/state"])
            #expect(read.status == 0, "\(read.stderr)")
            let tag = try JSONDecoder().decode(APITag.self, from: Data(read.stdout.utf8))
            #expect(tag == APITag(try #require(tags.first)), "speed \(speed): \(read.stdout)")
        }
    }

    /// The devices a client uses through the daemon — haptics, speaker, fingerprint sensor,
    /// camera, microphone — recorded as `use` events, then played back by a daemon on `replay` devices
    /// at 10×: the same commands say the same, the sensor's outcomes come in the same order
    /// (its failure included), and the replayed daemon's own trace holds the same uses.
    @Test func usesOfTheKitsDevicesPlayBackIntoTheSameAnswers() async throws {
        let directory = NSTemporaryDirectory() + "fieldhal-record-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try """
        [haptics]
        plugin = "fake"
        [speaker]
        plugin = "fake"
        [biometrics]
        plugin = "fake"
        outcomes = ["no-match", "match", "gone"]
        [camera]
        plugin = "fake"
        [microphone]
        plugin = "fake"
        [api]
        socket = "\(directory)/live.sock"
        """.write(toFile: directory + "/live.toml", atomically: true, encoding: .utf8)
        try """
        [haptics]
        plugin = "replay"
        trace = "live.jsonl"
        speed = 10
        [speaker]
        plugin = "replay"
        trace = "live.jsonl"
        speed = 10
        [biometrics]
        plugin = "replay"
        trace = "live.jsonl"
        speed = 10
        [camera]
        plugin = "replay"
        trace = "live.jsonl"
        speed = 10
        [microphone]
        plugin = "replay"
        trace = "live.jsonl"
        speed = 10
        [api]
        socket = "\(directory)/replay.sock"
        """.write(toFile: directory + "/replay.toml", atomically: true, encoding: .utf8)
        let commands: [[String]] = [
            ["haptics", "play", "warning", "--json"], ["sound", "play", "--json"], ["bio", "status", "--json"],
            ["bio", "verify", "--json"], ["bio", "verify", "--json"], ["bio", "verify", "--json"],
            ["camera", "snap", "--output", directory + "/still.jpg", "--width", "320", "--height", "240", "--json"],
            ["camera", "record", "--seconds", "0.5", "--output", directory + "/video.avi", "--width", "160", "--height", "120", "--json"],
            ["mic", "record", "--seconds", "0.5", "--rate", "16000", "--output", directory + "/sound.wav", "--json"],
        ]
        /// Each command through the daemon on `name`, recorded meanwhile: what each said, and the trace's uses.
        func session(_ name: String) async throws -> (said: [String], uses: [DeviceUse]) {
            let outcome = try await RecordedSession.run(config: directory + "/\(name).toml", trace: directory + "/\(name).jsonl",
                                                        state: directory + "/state-\(name)", commands: commands, keeping: RecordedSession.sizeOnly)
            #expect(outcome.daemonStarted && outcome.recordStatus == 0, "\(outcome.recordErrors)")
            return (outcome.said, outcome.trace.compactMap(\.use))
        }
        let live = try await session("live")
        #expect(live.uses.map(\.request) == [.hapticsPlay, .speakerPlay, .biometricsAvailability, .biometricsVerify, .biometricsVerify,
                                             .biometricsVerify, .cameraPhoto, .cameraRecord, .microphoneRecord], "\(live.uses)")
        try #require(live.uses.count == commands.count)
        #expect(live.uses.compactMap(\.result) == ["no-match", "match"] && live.uses[6].still?.width == 320
                && live.uses[5].failure?.kind == .disconnected, "\(live.uses)")
        #expect(live.uses[7].video?.width == 160 && live.uses[8].audio?.sampleRate == 16000 && live.uses[8].audio?.path == "", "\(live.uses)")
        let replayed = try await session("replay")
        #expect(replayed.said == live.said, "played back:\n\(replayed.said.joined(separator: "\n"))\nwhere live:\n\(live.said.joined(separator: "\n"))")
        /// A use apart from how long it took and a still's bytes.
        func answer(_ use: DeviceUse) -> DeviceUse {
            var use = use
            use.milliseconds = 0
            use.still?.bytes = 0
            return use
        }
        #expect(replayed.uses.map(answer) == live.uses.map(answer), "\(replayed.uses)")
        // The replayed recordings are files of the recorded length: a WAV of 0.5 s at 16 kHz.
        let wav = try Data(contentsOf: URL(fileURLWithPath: directory + "/sound.wav"))
        #expect(wav.count == 44 + 8000 * 2, "\(wav.count) bytes")
    }

    #if GPS
    /// The same from a real peer: a receiver's log replayed by gpsfake into gpsd, followed by
    /// the daemon's gpsd backend, recorded, then played back with no gpsd at all.
    @Test func aReceiverOnARealGpsdPlaysBackIntoTheSameFixes() async throws {
        let gpsd = try await GPSFake.start(log: GPSFake.logPath("moving-3d.nmea"))
        defer { gpsd.kill() }
        let directory = NSTemporaryDirectory() + "fieldhal-record-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let config = directory + "/kit.toml", trace = directory + "/trace.jsonl"
        try "[gps]\nplugin = \"gpsd\"\nport = \(gpsd.port)\n[api]\nsocket = \"\(directory)/api.sock\"\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(["--config", config, "--state-dir", directory + "/state"])
        #expect(await daemon.waitForLine(containing: "api: serving on", timeout: .seconds(30)) != nil, "\(daemon.output)")
        let recorded = try await CLI.run(["record", "--config", config, "--output", trace, "--seconds", "2"])
        _ = await daemon.stop()
        gpsd.kill()
        #expect(recorded.status == 0, "\(recorded.stderr)")
        let fixes = try KitTrace.read(trace).1.compactMap(\.fix)
        #expect(fixes.filter(\.hasPosition).count >= 5, "gpsd's fixes in 2 s: \(fixes.count)")
        try "[gps]\nplugin = \"replay\"\ntrace = \"trace.jsonl\"\nspeed = 10\n".write(toFile: directory + "/replay.toml", atomically: true, encoding: .utf8)
        let watched = try await CLI.run(["gps", "watch", "--json", "--count", "\(fixes.count)", "--config", directory + "/replay.toml",
                                         "--state-dir", directory + "/state"])
        #expect(watched.status == 0, "\(watched.stderr)")
        #expect(watched.stdout.split(separator: "\n").map(String.init) == (try fixes.map(Self.line)), "the same fixes, in order")
    }
    #endif

    #if NFC
    /// And from the PN532 emulator: a reader on libnfc's pn532_uart driver keeping each
    /// tag's exchanges, followed by the daemon while a tag (a golden dump: an NTAG213 with a
    /// URI and a text record) lies on it, recorded, then played back with no emulator, at 1×
    /// and 10×: the replayed reader reads the tag again from the recorded bytes, and `nfc read
    /// --json` says what it said of the live tag. A byte of the trace changed is a fault the
    /// replay finds as the reader would have.
    @Test func aReaderOnThePN532EmulatorPlaysBackIntoTheSameTag() async throws {
        let dump = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("LibnfcPluginTests/Golden/uri-and-text.tag").path
        let emulator = try await PN532Emulator.start(["--data-area", dump])
        defer { emulator.stop() }
        let directory = NSTemporaryDirectory() + "fieldhal-record-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let config = directory + "/kit.toml", trace = directory + "/trace.jsonl"
        try "[nfc]\nplugin = \"libnfc\"\nconnstring = \"\(emulator.connstring())\"\nexchanges = true\n[api]\nsocket = \"\(directory)/api.sock\"\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        let live = try await CLI.run(["nfc", "read", "--json", "--timeout", "5", "--config", config, "--state-dir", directory + "/state"])
        #expect(live.status == 0, "\(live.stderr)")
        let daemon = try DaemonProcess(["--config", config, "--state-dir", directory + "/state"])
        #expect(await daemon.waitForLine(containing: "api: serving on", timeout: .seconds(30)) != nil, "\(daemon.output)")
        let recorded = try await CLI.run(["record", "--config", config, "--output", trace, "--seconds", "3"])
        _ = await daemon.stop()
        emulator.stop()
        #expect(recorded.status == 0, "\(recorded.stderr)")
        let found = try KitTrace.read(trace).1.filter { $0.tagState == "found" }
        #expect(found.first?.device == "nfc.default" && found.first?.tag?.ndef != nil, "\(found)")
        // Page 0 (the CC) and the data area from page 4, as Type2NDEFAccess reads them.
        #expect(found.first?.tag?.exchanges?.map(\.command) == [[0x30, 0x00], [0x30, 0x04], [0x30, 0x08], [0x30, 0x0C]],
                "\(String(describing: found.first?.tag?.exchanges))")
        for speed in [1, 10] {
            try "[nfc]\nplugin = \"replay\"\ntrace = \"trace.jsonl\"\nspeed = \(speed)\n".write(toFile: directory + "/replay.toml", atomically: true, encoding: .utf8)
            let read = try await CLI.run(["nfc", "read", "--json", "--timeout", "5", "--config", directory + "/replay.toml", "--state-dir", directory + "/state"])
            #expect(read.status == 0, "\(read.stderr)")
            #expect(read.stdout == live.stdout, "speed \(speed): played back\n\(read.stdout)\nwhere the emulator's tag read\n\(live.stdout)")
        }
        // The URI record's header made reserved (TNF 7) in the recorded answer to READ 4:
        // the replayed read fails on it as a reader in the field would, with the tag named.
        let text = try String(contentsOfFile: trace, encoding: .utf8)
        #expect(text.contains("0003219101"), "the NDEF TLV and the URI record's header in the answer to READ 4")
        try text.replacingOccurrences(of: "0003219101", with: "0003219701").write(toFile: trace, atomically: true, encoding: .utf8)
        let faulty = try await CLI.run(["nfc", "read", "--json", "--timeout", "5", "--config", directory + "/replay.toml", "--state-dir", directory + "/state"])
        #expect(faulty.status == 65 && faulty.stderr.contains("tag 04:A1:B2:C3:D4:E5:F6"), "\(faulty.status) \(faulty.stderr)")
    }
    #endif

    @Test func recordWithoutADaemonSaysSo() async throws {
        let directory = NSTemporaryDirectory() + "fieldhal-record-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try "[gps]\nplugin = \"fake\"\n[api]\nsocket = \"\(directory)/api.sock\"\n".write(toFile: directory + "/kit.toml", atomically: true, encoding: .utf8)
        let result = try await CLI.run(["record", "--config", directory + "/kit.toml", "--output", directory + "/t.jsonl", "--seconds", "1"])
        #expect(result.status == 69 && result.stderr.contains("follows a running daemon"), "\(result.stderr)")
        // A trace that is not one is refused by the replay plugin with the line.
        try "{\"trace\": 1, \"recordedAt\": 0, \"source\": \"x\"}\nnot json\n".write(toFile: directory + "/bad.jsonl", atomically: true, encoding: .utf8)
        try "[gps]\nplugin = \"replay\"\ntrace = \"bad.jsonl\"\n".write(toFile: directory + "/replay.toml", atomically: true, encoding: .utf8)
        let replayed = try await CLI.run(["gps", "fix", "--config", directory + "/replay.toml", "--state-dir", directory + "/state"])
        #expect(replayed.status != 0 && replayed.stderr.contains("line 2 is not a trace's entry"), "\(replayed.stderr)")
    }
}
