@testable import EvdevPlugin
import FieldHAL
import FieldHALPluginHost
import Foundation
import TestSupport
import Testing

/// A force-feedback device made with uinput (Peers/uinput-ff.py): the kernel's evdev and
/// ff-core code between the plugin and a peer that records what it was asked to do.
final class UinputPeer: @unchecked Sendable {
    let node: String
    private let process: Process
    private let log: String

    static let script = CLI.repositoryRoot.appendingPathComponent("Tests/TestSupport/Peers/uinput-ff.py").path

    /// One line the peer printed (fields absent from an event are nil).
    struct Event: Decodable, Sendable {
        var event: String
        var t: Double
        var node, type, waveform: String?
        var id, value, strong, weak, length, period, magnitude: Int?

        var name: String { event }
        var time: Double { t }
        func int(_ key: String) -> Int? {
            switch key {
            case "id": id
            case "value": value
            case "strong": strong
            case "weak": weak
            case "length": length
            case "period": period
            case "magnitude": magnitude
            default: nil
            }
        }
        func string(_ key: String) -> String? {
            switch key {
            case "node": node
            case "type": type
            case "waveform": waveform
            default: nil
            }
        }
    }

    init(_ arguments: [String] = []) async throws {
        log = KernelLab.scratch("uinput.jsonl")
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [Self.script] + arguments
        process.standardOutput = FileHandle(forWritingAtPath: log)
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let log = self.log, process = self.process
        do {
            node = try await offPool {
                for _ in 0..<100 {
                    if let ready = Self.readEvents(log).first(where: { $0.name == "ready" }), let node = ready.string("node") { return node }
                    Thread.sleep(forTimeInterval: 0.05)
                }
                throw LabError("uinput-ff.py did not create its device within 5 s")
            }
        } catch {
            // No deinit for a half-made peer: its process must not outlive the failure.
            try? await KernelLab.finish(process)
            throw error
        }
    }

    deinit {
        if process.isRunning { process.terminate() }
    }

    /// Removes the device (the peer destroys it on SIGTERM) and waits for the peer to exit.
    func stop() async throws { try await KernelLab.finish(process) }

    /// Runs `body` with a fresh device and removes the device afterwards, pass or fail, so
    /// the next test's "first force-feedback device" is its own.
    static func with(_ arguments: [String] = [], _ body: (UinputPeer) async throws -> Void) async throws {
        let peer = try await UinputPeer(arguments)
        do {
            try await body(peer)
        } catch {
            try? await peer.stop()
            throw error
        }
        try await peer.stop()
    }

    var events: [Event] { Self.readEvents(log) }

    /// Events after the device was ready, once `name` has been logged (the peer works asynchronously).
    func waitFor(_ name: String, count: Int = 1) async throws -> [Event] {
        let log = self.log
        return try await offPool {
            for _ in 0..<100 {
                let events = Self.readEvents(log)
                if events.filter({ $0.name == name }).count >= count { return events.filter { $0.name != "ready" } }
                Thread.sleep(forTimeInterval: 0.02)
            }
            throw LabError("the peer never logged \(count) × \(name): \(Self.readEvents(log).map(\.name))")
        }
    }

    private static func readEvents(_ path: String) -> [Event] {
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { try? JSONDecoder().decode(Event.self, from: Data($0.utf8)) }
    }
}

@Suite("evdev haptics on uinput (kernel lab)", .enabled(if: KernelLab.isGuest), .serialized)
struct UinputHapticsTests {
    func haptics(_ peer: UinputPeer, _ extra: [String: ConfigValue] = [:], way: Way = .inProcess) async throws -> any HapticsEngine {
        var values = extra
        values["device"] = .string(peer.node)
        guard case .haptics(let engine) = try await way.descriptor(EvdevPlugin.descriptor!, "evdev").open(.haptics, PluginParameters(values), KernelLab.context) else {
            throw LabError("the evdev plugin did not open haptics")
        }
        return engine
    }

    /// `fieldhal plugin test`'s checks against the evdev backend out of process, on a uinput
    /// force-feedback device: haptics.play says what it played, a pattern out of bounds is refused.
    @Test func theConformanceChecksPassOnUinput() async throws {
        try await UinputPeer.with { peer in
            let manifest = try PluginManifest.load(try await ExternalBuiltin.install("evdev", as: "evdev-conformance"))
            let report = await PluginConformance.run(manifest, parameters: [.haptics: ["device": .string(peer.node)]])
            #expect(report.passed, "\(report.checks.filter { $0.outcome != .passed })")
            let played = report.checks.first { $0.name.hasPrefix("haptics.play answers") }
            #expect(played?.outcome == .passed && played?.detail.contains("steps") == true, "\(String(describing: played))")
        }
    }

    @Test(arguments: Way.allCases) func warningPlaysTheThemesStepsWithTheirTimings(way: Way) async throws {
        try await UinputPeer.with { peer in
            #expect(EvdevHaptics.forceFeedbackDevices().contains(peer.node))
            let engine = try await haptics(peer, ["gain": .float(0.75)], way: way)
            if way == .inProcess {
                // What it is, as the peer set it up (UI_DEV_SETUP): its name and ids.
                #expect(engine.identity?.model == "FieldHAL test rumble pad (1209:f1e1)" && engine.identity?.vendor == "1209",
                        "\(String(describing: engine.identity))")
            }
            try await engine.play(.warning)
            let events = try await peer.waitFor("erase")
            #expect(events.first { $0.name == "gain" }?.int("value") == 49151)
            // One upload for two identical steps: rumble 0.8/0.5 for 150 ms.
            let uploads = events.filter { $0.name == "upload" }
            #expect(uploads.count == 1)
            #expect(uploads.first?.string("type") == "rumble" && uploads.first?.int("strong") == 52428
                    && uploads.first?.int("weak") == 32768 && uploads.first?.int("length") == 150)
            var starts: [Double] = [], stops: [Double] = []
            for event in events where event.name == "play" {
                if event.value == 1 { starts.append(event.time) } else { stops.append(event.time) }
            }
            try #require(starts.count == 2 && stops.count >= 2, "\(events)")
            // Step timings as the device saw them (TCG makes the guest slow: ±40 ms).
            #expect(abs((stops[0] - starts[0]) - 0.150) < 0.040, "first buzz \(stops[0] - starts[0]) s")
            #expect(abs((starts[1] - stops[0]) - 0.100) < 0.040, "pause \(starts[1] - stops[0]) s")
            #expect(abs((stops[1] - starts[1]) - 0.150) < 0.040, "second buzz \(stops[1] - starts[1]) s")
            #expect(events.filter { $0.name == "erase" }.map { $0.int("id") } == [uploads.first?.int("id")])
        }
    }

    @Test(arguments: Way.allCases) func customSequencesAndThemeFilesUploadWhatTheySay(way: Way) async throws {
        try await UinputPeer.with { peer in
            let theme = KernelLab.scratch("theme.json")
            try """
            { "name": "test", "patterns": { "success": [
                { "effect": "periodic", "magnitude": 0.5, "period-ms": 20, "duration-ms": 80, "pause-ms": 20 },
                { "effect": "rumble", "strong": 0.2, "weak": 0.9, "duration-ms": 50 } ] } }
            """.write(toFile: theme, atomically: true, encoding: .utf8)
            let played = try await haptics(peer, ["theme": .string(theme)], way: way).play(.success)
            // What the theme file says, in and out of process (the SDK answers with it).
            #expect(played == HapticsPlayed(steps: 2, milliseconds: 150), "\(played)")
            let events = try await peer.waitFor("erase", count: 2)
            let uploads = events.filter { $0.name == "upload" }
            #expect(uploads.map { $0.string("type") } == ["periodic", "rumble"])
            #expect(uploads[0].string("waveform") == "sine" && uploads[0].int("period") == 20 && uploads[0].int("magnitude") == 16384)
            #expect(uploads[1].int("strong") == 13107 && uploads[1].int("weak") == 58982 && uploads[1].int("length") == 50)
            #expect(Set(events.filter { $0.name == "erase" }.compactMap { $0.int("id") }) == Set(uploads.compactMap { $0.int("id") }))
        }
    }

    @Test(arguments: Way.allCases) func cancellingStopsTheMotorAndErasesTheEffect(way: Way) async throws {
        try await UinputPeer.with { peer in
            let engine = try await haptics(peer, way: way)
            let long = HapticPattern.custom(Array(repeating: HapticStep(.rumble(strong: 1, weak: 1), durationMilliseconds: 10_000), count: 3))
            let playing = Task { try await engine.play(long) }
            _ = try await peer.waitFor("play")
            let cancelled = ContinuousClock.now
            playing.cancel()
            await #expect { try await playing.value } throws: { FieldHALError.Kind.cancelled.matches($0) }
            #expect(ContinuousClock.now - cancelled < .seconds(10), "ended by the cancel, not at the pattern's 30 s")
            let events = try await peer.waitFor("erase")
            #expect(events.contains { $0.name == "play" && $0.value != 1 }, "a stop")
        }
    }

    @Test(arguments: Way.allCases) func aDeviceThatVanishesMidPatternEndsWithDisconnected(way: Way) async throws {
        try await UinputPeer.with(["--destroy-after-plays", "1"]) { peer in
            let engine = try await haptics(peer, way: way)
            let started = ContinuousClock.now
            await #expect { try await engine.play(.error) } throws: { error in
                FieldHALError.Kind.disconnected.matches(error) && "\(error)".contains("the device went away")
            }
            #expect(ContinuousClock.now - started < .seconds(10), "ended, not hung")
            await #expect { try await engine.play(.light) } throws: { FieldHALError.Kind.deviceNotFound.matches($0) }
        }
    }

    /// Two force-feedback devices in one kit (issue 43): each named section plays on its own
    /// motor, and when one goes away the other carries on.
    @Test func twoMotorsPlayEachTheirOwnAndOneGoneLeavesTheOther() async throws {
        try await UinputPeer.with(["--name", "FieldHAL left motor", "--destroy-after-plays", "1"]) { left in
            try await UinputPeer.with(["--name", "FieldHAL right motor"]) { right in
                let registry = PluginRegistry([try #require(EvdevPlugin.descriptor)])
                let configuration = try KitConfiguration.parse("""
                    [haptics.left]
                    plugin = "evdev"
                    device = "\(left.node)"
                    [haptics.right]
                    plugin = "evdev"
                    device = "\(right.node)"
                    """, file: "motors.toml", directory: "/tmp", registry: registry)
                let kit = await Kit.load(configuration, registry: registry, context: KernelLab.context)
                #expect(kit.devices.compactMap { $0.identity?.model?.components(separatedBy: " (").first } == ["FieldHAL left motor", "FieldHAL right motor"])
                // The left motor plays once and is gone (the peer destroys it): the right one plays on.
                await #expect { try await kit.haptics(named: "left").play(.error) } throws: { FieldHALError.Kind.disconnected.matches($0) }
                try await kit.haptics(named: "right").play(.heavy)
                let events = try await right.waitFor("erase")
                // The right motor played the heavy pattern alone (one step, full strength).
                let uploads = events.filter { $0.name == "upload" }
                #expect(uploads.count == 1 && uploads.first?.int("strong") == 65535 && uploads.first?.int("length") == 60, "\(uploads)")
                await kit.close()
            }
        }
    }

    @Test func theCLIPlaysAPatternOnTheFirstForceFeedbackDevice() async throws {
        try await UinputPeer.with { peer in
            let config = KernelLab.scratch("evdev.toml")
            try "[haptics]\nplugin = \"evdev\"\n".write(toFile: config, atomically: true, encoding: .utf8)
            let result = try await CLI.run(["haptics", "play", "heavy", "--config", config])
            #expect(result.status == 0 && result.stdout == "played heavy (1 steps, 60 ms)\n", "\(result.stderr)")
            let events = try await peer.waitFor("erase")
            #expect(events.first { $0.name == "upload" }?.int("strong") == 65535)
        }
    }
}
