import FieldHAL
import FieldHALPluginHost
import Foundation
import Logging
import TestSupport
import Testing

/// NFC from an external plugin process (the Python fixture), through the kit as any
/// configuration loads it: a tag carried by `nfc.read`, a plugin's bad tag, a plugin that
/// dies mid-read and is started again by the next read, one that never answers.
@Suite(.timeLimit(.minutes(1))) struct ExternalNFCTests {
    static let manifest = PluginFixtures.manifest(
        name: "probe", minor: 1, capabilities: #"{"nfc": {"parameters": [{"name": "device", "type": "string", "required": true, "help": "the reader's tty"}]}}"#)

    func load(_ mode: String, log: CapturedLines = CapturedLines()) async throws -> (Kit, PluginFixtures) {
        let fixtures = try PluginFixtures()
        try fixtures.plugin("probe", mode: mode, manifest: Self.manifest)
        return (try await fixtures.kit("[nfc]\nplugin = \"probe\"\ndevice = \"/dev/ttyFIXTURE\"\n", logger: log.logger(label: "test.plugins", level: .trace)), fixtures)
    }

    func failure(_ body: () async throws -> Void) async -> FieldHALError? {
        do {
            try await body()
            Issue.record("expected an error")
            return nil
        } catch {
            return error as? FieldHALError
        }
    }

    func starts(_ fixtures: PluginFixtures, _ plugin: String = "probe") throws -> Int {
        try String(contentsOfFile: fixtures.root + "/\(plugin)/starts", encoding: .utf8).split(separator: "\n").count
    }

    @Test func aTagComesThroughTheProtocol() async throws {
        let (kit, fixtures) = try await load("good")
        let reader = try kit.nfcReader()
        #expect(reader.deviceName == "fixture /dev/ttyFIXTURE (plugin probe)")
        let tag = try await reader.readTag(timeout: .seconds(2))
        #expect(tag.type == .type2 && tag.uidString == "04:A1:B2:C3:D4:E5:F6" && tag.atqa == 0x0044 && tag.sak == 0)
        #expect(try tag.ndef?.records.first?.content() == .text("fixture", language: "en"))
        // A caller's bound far past a day is carried as a day, not overflowed.
        #expect(try await reader.readTag(timeout: .seconds(Int64.max / 2)).uidString == "04:A1:B2:C3:D4:E5:F6")
        await kit.close()
        #expect(fixtures.leftovers().isEmpty)
    }

    @Test func aBadTagIsThePluginsProtocolErrorAndThePluginServesOn() async throws {
        let (kit, fixtures) = try await load("bad-tag")
        let reader = try kit.nfcReader()
        for _ in 0..<2 {
            let error = await failure { _ = try await reader.readTag(timeout: .seconds(2)) }
            #expect(error?.kind == .protocolError && error?.subject == "plugin probe", "\(String(describing: error))")
            #expect(error?.description.contains("uid") == true, "\(String(describing: error))")
        }
        #expect(try starts(fixtures) == 1, "a bad answer is not a failed process")
        await kit.close()
    }

    @Test func aPluginThatDiesMidReadIsATypedErrorAndTheNextReadStartsItAgain() async throws {
        let log = CapturedLines()
        let (kit, fixtures) = try await load("die-in-read", log: log)
        let reader = try kit.nfcReader()
        let error = await failure { _ = try await reader.readTag(timeout: .seconds(5)) }
        #expect(error?.kind == .unavailable, "\(String(describing: error))")
        #expect(error?.description.contains("plugin probe") == true && error?.description.contains("exit status 5") == true,
                "\(String(describing: error))")
        #expect(error?.description.contains("fell over mid-read") == true, "the stderr's tail: \(String(describing: error))")
        // Within the backoff the next read waits for the start (0.5 s) and is served.
        let tag = try await reader.readTag(timeout: .seconds(2))
        #expect(tag.uidString == "04:A1:B2:C3:D4:E5:F6")
        #expect(try starts(fixtures) == 2)
        let said = log.lines
        #expect(said.contains { $0.hasPrefix("error ") && $0.contains("exit status 5") && $0.contains("at the next nfc request") }, "\(said)")
        #expect(said.contains { $0.hasPrefix("notice plugin probe serves nfc again") }, "\(said)")
        await kit.close()
        #expect(fixtures.leftovers().isEmpty)
    }

    /// An answer to a request the host never sent ends the session as the plugin's
    /// `protocolError` (the Errors table), while it serves as at the handshake; the waiting
    /// read hears it at once, and the next read starts the plugin again.
    @Test func anAnswerToARequestNeverSentIsTheProtocolsErrorWhileServing() async throws {
        let (kit, fixtures) = try await load("stray")
        let reader = try kit.nfcReader()
        let started = ContinuousClock.now
        let error = await failure { _ = try await reader.readTag(timeout: .seconds(30)) }
        #expect(error?.kind == .protocolError && error?.description.contains("answered request 9999, which the host did not send") == true,
                "\(String(describing: error))")
        #expect(ContinuousClock.now - started < .seconds(10), "at once, not at the read's bound")
        #expect(try await reader.readTag(timeout: .seconds(2)).uidString == "04:A1:B2:C3:D4:E5:F6")
        await kit.close()
        #expect(fixtures.leftovers().isEmpty)
    }

    /// A named pattern is the plugin's theme: one that plays longer than FieldHAL's own
    /// (its warning 6 s, FieldHAL's 0.4 s) is waited for, not killed as hung.
    @Test func aNamedPatternPlaysAsLongAsThePluginsThemeSays() async throws {
        let fixtures = try PluginFixtures()
        try fixtures.plugin("motor", mode: "slow-theme", manifest: PluginFixtures.manifest(name: "motor", minor: 1, capabilities: #"{"haptics": {}}"#))
        let kit = try await fixtures.kit("[haptics]\nplugin = \"motor\"\n")
        let started = ContinuousClock.now
        let played = try await kit.haptics().play(.warning)
        #expect(ContinuousClock.now - started >= .seconds(6))
        #expect(played == HapticsPlayed(steps: 2, milliseconds: 6000), "what the plugin played, not FieldHAL's theme: \(played)")
        #expect(try starts(fixtures, "motor") == 1, "the plugin served on: not killed and started again")
        await kit.close()
        #expect(fixtures.leftovers().isEmpty)
    }

    /// A plugin that answers null played a named pattern it does not describe: FieldHAL's
    /// theme is reported; one that answers nonsense is the plugin's protocol error.
    @Test func whatAPluginPlayedIsItsAnswerOrFieldHALsThemeWhenItSaysNothing() async throws {
        let fixtures = try PluginFixtures()
        try fixtures.plugin("quiet", manifest: PluginFixtures.manifest(name: "quiet", minor: 1, capabilities: #"{"haptics": {}}"#))
        try fixtures.plugin("liar", mode: "bad-played", manifest: PluginFixtures.manifest(name: "liar", minor: 1, capabilities: #"{"haptics": {}}"#))
        let quiet = try await fixtures.kit("[haptics]\nplugin = \"quiet\"\n")
        #expect(try await quiet.haptics().play(.warning) == HapticsPlayed(HapticPattern.warning.steps))
        await quiet.close()
        let liar = try await fixtures.kit("[haptics]\nplugin = \"liar\"\n")
        let error = await failure { _ = try await liar.haptics().play(.success) }
        #expect(error?.kind == .protocolError && error?.detail.contains("haptics.play answer") == true, "\(String(describing: error))")
        await liar.close()
    }

    @Test func aPluginThatNeverAnswersAReadIsATimeoutAndIsStopped() async throws {
        let (kit, fixtures) = try await load("hang-read")
        let reader = try kit.nfcReader()
        let started = ContinuousClock.now
        let error = await failure { _ = try await reader.readTag(timeout: .milliseconds(200)) }
        let elapsed = ContinuousClock.now - started
        #expect(error?.kind == .timeout && error?.description.contains("no answer to nfc.read") == true, "\(String(describing: error))")
        #expect(elapsed >= .seconds(5) && elapsed < .seconds(8), "the read's bound plus the host's 5 s grace: \(elapsed)")
        await kit.close()
        #expect(fixtures.leftovers().isEmpty)
    }

    /// Protocol 1.2: a kit's reader and emulator from one plugin meet in one process (an NFC
    /// chip's two roles share its device); one closed is released there (`close`) while the
    /// other serves on; a restart opens both again. A plugin of 1.1 gets a process for each.
    @Test(arguments: [(2, 1), (1, 2)]) func aPluginOfProtocolOneTwoServesTheKitsCapabilitiesInOneProcess(minor: Int, processes: Int) async throws {
        let fixtures = try PluginFixtures()
        let device = #"[{"name": "device", "type": "string", "required": true, "help": "the reader's tty"}]"#
        try fixtures.plugin("probe", mode: "die-in-read", manifest: PluginFixtures.manifest(
            name: "probe", minor: minor, capabilities: #"{"nfc": {"parameters": \#(device)}, "nfc_emulator": {"parameters": \#(device)}}"#))
        let kit = try await fixtures.kit("[nfc]\nplugin = \"probe\"\ndevice = \"/dev/ttyA\"\n[nfc_emulator]\nplugin = \"probe\"\ndevice = \"/dev/ttyA\"\n")
        let reader = try kit.nfcReader()
        let emulator = try kit.nfcEmulator()
        #expect(try starts(fixtures) == processes)
        #expect(try await emulator.emulate(.uri("trf:x"), timeout: .seconds(2)) == EmulationOutcome(wasRead: true, commandCount: 4))
        func opens() throws -> [String] {
            try String(contentsOfFile: fixtures.root + "/probe/opens", encoding: .utf8).split(separator: "\n").map(String.init)
        }
        let first = try opens()
        #expect(Set(first.map { $0.split(separator: " ")[0] }).count == processes, "\(first)")
        guard processes == 1 else {
            await kit.close()
            return
        }
        // The first process dies at its first read; the next read starts one that opens both again.
        _ = await failure { _ = try await reader.readTag(timeout: .seconds(5)) }
        #expect(try await reader.readTag(timeout: .seconds(2)).uidString == "04:A1:B2:C3:D4:E5:F6")
        let again = try opens()
        #expect(Set(again.suffix(2).map { $0.split(separator: " ").dropFirst().joined(separator: " ") }) == ["open nfc", "open nfc_emulator"], "\(again)")
        #expect(try await emulator.emulate(.uri("trf:x"), timeout: .seconds(2)).wasRead)
        await emulator.close()
        let closed = try opens()
        #expect(closed.last?.hasSuffix("close nfc_emulator") == true, "\(closed)")
        #expect(try await reader.readTag(timeout: .seconds(2)).uidString == "04:A1:B2:C3:D4:E5:F6")
        #expect(try starts(fixtures) == 2)
        await kit.close()
        #expect(fixtures.leftovers().isEmpty)
    }

    /// Protocol 1.6: two readers of one plugin are two named devices in one process. Each
    /// read names its device and reaches its own reader; each device has the identity its
    /// open answered; one closed is released there while the other reads on. The same
    /// kit from a plugin of 1.5 gets a process for each reader, as before.
    @Test(arguments: [(6, 1), (5, 2)]) func aPluginOfProtocolOneSixServesTwoReadersInOneProcess(minor: Int, processes: Int) async throws {
        let fixtures = try PluginFixtures()
        try fixtures.plugin("probe", mode: "exclusive", manifest: PluginFixtures.manifest(
            name: "probe", minor: minor, capabilities: #"{"nfc": {"parameters": [{"name": "device", "type": "string", "required": true, "help": "the reader's tty"}]}}"#))
        let kit = try await fixtures.kit("[nfc.bench1]\nplugin = \"probe\"\ndevice = \"/dev/ttyA\"\n[nfc.bench2]\nplugin = \"probe\"\ndevice = \"/dev/ttyB\"\n")
        #expect(kit.names(of: .nfcReader) == ["bench1", "bench2"])
        #expect(try starts(fixtures) == processes)
        let first = try kit.nfcReader(named: "bench1"), second = try kit.nfcReader(named: "bench2")
        #expect(first.deviceName == "fixture /dev/ttyA (plugin probe)" && second.deviceName == "fixture /dev/ttyB (plugin probe)")
        func said(_ reader: any NFCReader) async throws -> NDEFContent? {
            try await reader.readTag(timeout: .seconds(2)).ndef?.records.first?.content()
        }
        guard minor >= 6 else {
            #expect(first.identity == nil)
            let (one, two) = (try await said(first), try await said(second))
            #expect(one == .text("fixture", language: "en") && two == .text("fixture", language: "en"))
            await kit.close()
            #expect(fixtures.leftovers().isEmpty)
            return
        }
        #expect(first.identity == DeviceIdentity(vendor: "Fixture Labs", model: "probe reader", serial: "ttyA"))
        #expect(second.identity?.serial == "ttyB")
        #expect(kit.status(of: .nfcReader, named: "bench2")?.identity?.serial == "ttyB")
        let (one, two) = (try await said(first), try await said(second))
        #expect(one == .text("fixture /dev/ttyA", language: "en") && two == .text("fixture /dev/ttyB", language: "en"))
        let opens = try String(contentsOfFile: fixtures.root + "/probe/opens", encoding: .utf8).split(separator: "\n").map { $0.split(separator: " ").dropFirst().joined(separator: " ") }
        #expect(Set(opens) == ["open nfc nfc-1", "open nfc nfc-2"], "the kit opens its devices at once: \(opens)")
        await first.close()
        let closed = try String(contentsOfFile: fixtures.root + "/probe/opens", encoding: .utf8).split(separator: "\n")
        #expect(closed.count == 3 && closed.last?.contains(" close nfc nfc-") == true, "\(closed)")
        let alone = try await said(second)
        #expect(alone == .text("fixture /dev/ttyB", language: "en"))
        #expect(try starts(fixtures) == 1)
        await kit.close()
        #expect(fixtures.leftovers().isEmpty)
    }

    /// A daemon's reload opens the new kit before it closes the old one. The new kit's
    /// reader, with the same section, shares the device the plugin already holds: a second
    /// process would find an exclusive device (a serial reader) busy. It is closed with
    /// its last holder; another section gets a process of its own.
    @Test func aSecondKitWithTheSameSectionSharesTheOpenDevice() async throws {
        let fixtures = try PluginFixtures()
        let device = #"[{"name": "device", "type": "string", "required": true, "help": "the reader's tty"}]"#
        try fixtures.plugin("probe", mode: "exclusive", manifest: PluginFixtures.manifest(
            name: "probe", minor: 2, capabilities: #"{"nfc": {"parameters": \#(device)}}"#))
        let configuration = "[nfc]\nplugin = \"probe\"\ndevice = \"/dev/ttyA\"\n"
        let old = try await fixtures.kit(configuration)
        let new = try await fixtures.kit(configuration)  // read anew: new descriptors, as a reload makes
        #expect(try await new.nfcReader().readTag(timeout: .seconds(2)).uidString == "04:A1:B2:C3:D4:E5:F6")
        #expect(try await old.nfcReader().readTag(timeout: .seconds(2)).uidString == "04:A1:B2:C3:D4:E5:F6")
        #expect(try starts(fixtures) == 1)
        await old.close()
        #expect(try await new.nfcReader().readTag(timeout: .seconds(2)).uidString == "04:A1:B2:C3:D4:E5:F6")
        let opens = try String(contentsOfFile: fixtures.root + "/probe/opens", encoding: .utf8).split(separator: "\n")
        #expect(opens.map { $0.split(separator: " ").dropFirst().joined(separator: " ") } == ["open nfc"], "\(opens)")
        // Another device is another open, in another process.
        let other = try await fixtures.kit("[nfc]\nplugin = \"probe\"\ndevice = \"/dev/ttyB\"\n")
        #expect(try await other.nfcReader().readTag(timeout: .seconds(2)).uidString == "04:A1:B2:C3:D4:E5:F6")
        #expect(try starts(fixtures) == 2)
        await other.close()
        await new.close()
        #expect(fixtures.leftovers().isEmpty)
    }

    @Test func cancellingAReadReturnsAtOnce() async throws {
        let (kit, _) = try await load("hang-read")
        let reader = try kit.nfcReader()
        let wait = Task { try await reader.readTag(timeout: .seconds(30)) }
        try await Task.sleep(for: .milliseconds(300))
        let cancelled = ContinuousClock.now
        wait.cancel()
        let result = await wait.result
        #expect(ContinuousClock.now - cancelled < .seconds(10), "ended by the cancel, not at the read's 30 s")
        if case .failure(let error) = result {
            #expect((error as? FieldHALError)?.kind == .cancelled, "\(error)")
        } else {
            Issue.record("a cancelled read returned a tag")
        }
        await kit.close()
    }
}
