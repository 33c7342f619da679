import FieldHAL
import FieldHALPluginHost
import Foundation
import TestSupport
import Testing

/// `fieldhal plugin test`'s checks (issue 44): they pass on the SDK's plugins and the
/// reference plugin, and fail a plugin that answers wrongly on the checks it breaks, and on
/// no other.
@Suite(.timeLimit(.minutes(2))) struct PluginConformanceTests {
    static let capabilities = #"{"gps": {"parameters": [{"name": "device", "type": "string", "required": true, "help": "the receiver's tty"}]}, "#
        + #""nfc": {"parameters": [{"name": "device", "type": "string", "required": true, "help": "the reader's tty"}]}, "#
        + #""haptics": {}}"#

    static func failed(_ report: PluginConformance.Report) -> Set<String> {
        Set(report.checks.filter { $0.outcome == .failed }.map { "\($0.capability ?? "plugin"): \($0.name)" })
    }

    /// The built-in fake plugin out of process: the SDK's answers, every capability.
    @Test func theFakePluginOutOfProcessPassesEveryCheck() async throws {
        let manifest = try PluginManifest.load(try await ExternalBuiltin.install("fake", as: "fake-conformance"))
        let started = ContinuousClock.now
        let report = await PluginConformance.run(manifest)
        #expect(report.passed, "\(Self.failed(report))")
        #expect(ContinuousClock.now - started < .seconds(60), "the issue's bound for one plugin")
        let passed = report.checks.filter { $0.outcome == .passed }
        // Every capability opened and closed; the request-driven ones' methods checked.
        for capability in Capability.allCases {
            #expect(passed.contains { $0.capability == capability.rawValue && $0.name.hasPrefix("open answers") }, "\(capability)")
            #expect(passed.contains { $0.capability == capability.rawValue && $0.name.hasPrefix("close answers") }, "\(capability)")
        }
        #expect(passed.contains { $0.name.hasPrefix("nfc.read stops at $/cancel") })
        #expect(passed.contains { $0.name.hasPrefix("a second open of the same handle is busy") && $0.capability == "nfc" })
        #expect(passed.contains { $0.name.hasPrefix("haptics.play answers") && $0.detail.contains("steps") }, "the SDK says what it played")
        // The media methods: a still of the size it says, a recording of the length asked, a clip heard.
        #expect(passed.contains { $0.name.hasPrefix("camera.still answers") && $0.detail.hasPrefix("320×240") }, "\(passed)")
        #expect(passed.contains { $0.name.hasPrefix("microphone.record writes") && $0.detail.hasPrefix("48000 frames at 48000 Hz") }, "\(passed)")
        #expect(passed.contains { $0.name.hasPrefix("speaker.play answers") })
        let skipped = report.checks.filter { $0.outcome == .skipped }
        #expect(Set(skipped.compactMap(\.capability)).isSubset(of: ["gps"]), "\(skipped)")
    }

    /// The Python fixture answers what it is asked, but not all the docs say: a second open
    /// of a handle is accepted, a pattern out of bounds is played, and (bad-played) what it
    /// played is nonsense. Those checks fail; the rest pass.
    @Test func aPluginThatAnswersWronglyFailsTheChecksItBreaks() async throws {
        let fixtures = try PluginFixtures()
        let file = try fixtures.plugin("probe", mode: "bad-played", manifest: PluginFixtures.manifest(name: "probe", minor: 6, capabilities: Self.capabilities))
        let report = await PluginConformance.run(try PluginManifest.load(file), parameters: [
            .location: ["device": .string("/dev/ttyFIX1")], .nfcReader: ["device": .string("/dev/ttyFIX2")],
        ])
        #expect(!report.passed)
        #expect(Self.failed(report) == [
            "gps: a second open of the same handle is busy (1.6)",
            "nfc: a second open of the same handle is busy (1.6)",
            "haptics: a second open of the same handle is busy (1.6)",
            "haptics: haptics.play answers with what it played (or null) when the pattern ends",
            "haptics: a pattern out of bounds is invalidArgument",
        ], "\(report.checks.map { "\($0.outcome) \($0.capability ?? "-"): \($0.name) — \($0.detail)" }.joined(separator: "\n"))")
        #expect(report.checks.contains { $0.outcome == .passed && $0.name.hasPrefix("the stream's first gps.fix") })
        #expect(fixtures.leftovers().isEmpty)
    }

    /// A capability whose required settings are not given is skipped, and says how to give them.
    @Test func aCapabilityWithoutItsSettingsIsSkippedAndSaysHow() async throws {
        let fixtures = try PluginFixtures()
        let file = try fixtures.plugin("probe", manifest: PluginFixtures.manifest(name: "probe", minor: 6, capabilities: Self.capabilities))
        let report = await PluginConformance.run(try PluginManifest.load(file), parameters: [.nfcReader: ["device": .string("/dev/ttyFIX2")]])
        let skipped = try #require(report.checks.first { $0.capability == "gps" })
        #expect(skipped.outcome == .skipped && skipped.detail.contains("--set gps.device=VALUE"), "\(skipped)")
        #expect(report.checks.contains { $0.capability == "nfc" && $0.outcome == .passed && $0.name.hasPrefix("nfc.read answers") })
    }

    /// A plugin that never answers a read fails that check, as a timeout, and the run ends
    /// rather than hangs.
    @Test func aPluginThatHangsAReadFailsOnItsBound() async throws {
        let fixtures = try PluginFixtures()
        let file = try fixtures.plugin("probe", mode: "hang-read", manifest: PluginFixtures.manifest(
            name: "probe", minor: 6, capabilities: #"{"nfc": {"parameters": [{"name": "device", "type": "string", "required": true, "help": "the tty"}]}}"#))
        let report = await PluginConformance.run(try PluginManifest.load(file), parameters: [.nfcReader: ["device": .string("/dev/ttyFIX2")]])
        let read = try #require(report.checks.first { $0.name.hasPrefix("nfc.read answers") })
        #expect(read.outcome == .failed && read.detail.contains("no answer to nfc.read"), "\(read)")
        #expect(fixtures.leftovers().isEmpty)
    }
}

/// `fieldhal plugin test` as a plugin author runs it.
@Suite(.timeLimit(.minutes(2))) struct PluginTestCommandTests {
    /// The reference plugin (Python, examples/plugins/nmea-serial) on a receiver's pty,
    /// fed NMEA while the checks run: every check passes, and `--json` says so.
    @Test func theReferencePluginPassesEveryCheck() async throws {
        let port = try await offPool { try ReceiverPort(log: NMEASerialPluginTests.log) }
        let running = Task {
            try await CLI.run(["plugin", "test", NMEASerialPluginTests.directory + "/nmea-serial", "--set", "gps.device=\(port.path)", "--json"])
        }
        // A receiver talks all the time: the log again and again until the checks are done.
        let feeding = Task {
            while !Task.isCancelled { _ = try? await offPool { try port.command("feed") } }
        }
        let result = try await running.value
        feeding.cancel()
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        let report = try JSONDecoder().decode(PluginConformance.Report.self, from: Data(result.stdout.utf8))
        #expect(report.plugin == "nmea-serial" && report.passed)
        #expect(report.checks.contains { $0.outcome == .passed && $0.name.hasPrefix("the stream's first gps.fix") }, "\(report.checks)")
    }

    /// A built-in plugin by name, tested out of process; each check a line as it ends.
    @Test func aBuiltInPluginByNamePrintsEachCheck() async throws {
        let result = try await CLI.run(["plugin", "test", "fake"])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        let lines = result.stdout.split(separator: "\n")
        #expect(lines.contains { $0.hasPrefix("PASS  nfc: nfc.read stops at $/cancel") }, "\(result.stdout)")
        #expect(lines.last?.hasPrefix("plugin fake-process ") == true && lines.last?.contains(" 0 failed") == true, "\(result.stdout)")
        let unknown = try await CLI.run(["plugin", "test", "no-such-plugin"])
        #expect(unknown.status == 64 && unknown.stderr.contains("no plugin no-such-plugin"), "\(unknown.stderr)")
        let badSetting = try await CLI.run(["plugin", "test", "fake", "--set", "nfc.colour=red"])
        #expect(badSetting.status == 64 && badSetting.stderr.contains("takes no setting colour"), "\(badSetting.stderr)")
    }
}
