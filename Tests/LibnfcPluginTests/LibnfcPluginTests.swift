#if NFC
import FieldHAL
import FieldHALPluginHost
import Foundation
@testable import LibnfcPlugin
import TestSupport
import Testing

/// The libnfc plugin against libnfc's real pn532_uart driver, talking to the PN532
/// emulator on a pty: every simulated tag, writes, emulation, faults and recovery. Each test
/// runs both ways: in process, and out of process as an external plugin (`fieldhal plugin
/// serve libnfc` behind a manifest, through the plugin protocol's `nfc.*` methods), which
/// proves the protocol carries every tag, error and cancellation the backend has.
@Suite(.serialized, .timeLimit(.minutes(4)))
struct LibnfcPluginTests {
    static let context = PluginContext(configDirectory: "/tmp", stateDirectory: "/tmp")

    enum Way: String, CaseIterable, CustomTestStringConvertible {
        case inProcess = "in process"
        case outOfProcess = "out of process"
        var testDescription: String { rawValue }
    }

    func descriptor(_ way: Way) async throws -> PluginDescriptor {
        guard way == .outOfProcess else { return try #require(LibnfcPlugin.descriptor) }
        return try PluginManifest.load(try await ExternalBuiltin.install("libnfc", as: "libnfc-process")).descriptor()
    }

    static func parameters(_ connstring: String, _ extra: [String: ConfigValue] = [:]) -> PluginParameters {
        var values: [String: ConfigValue] = ["connstring": .string(connstring)]
        values.merge(extra) { $1 }
        return PluginParameters(values)
    }

    func reader(_ connstring: String, _ extra: [String: ConfigValue] = [:], way: Way = .inProcess) async throws -> any NFCReader {
        guard case .nfcReader(let reader) = try await descriptor(way).open(.nfcReader, Self.parameters(connstring, extra), Self.context) else {
            throw GPSFakeError("the libnfc plugin did not open a reader")
        }
        return reader
    }

    func tagEmulator(_ connstring: String, way: Way = .inProcess) async throws -> any NFCTagEmulator {
        guard case .nfcEmulator(let emulator) = try await descriptor(way).open(.nfcEmulator, Self.parameters(connstring), Self.context) else {
            throw GPSFakeError("the libnfc plugin did not open a tag emulator")
        }
        return emulator
    }

    /// The error `body` throws, or a failure when it throws none.
    func failure(_ body: () async throws -> Void) async -> FieldHALError? {
        do {
            try await body()
            Issue.record("expected an error")
            return nil
        } catch let error as FieldHALError {
            return error
        } catch {
            Issue.record("not a FieldHALError: \(error)")
            return nil
        }
    }

    // MARK: Reader

    @Test(arguments: Way.allCases) func readsTheNTAG213sTextRecord(way: Way) async throws {
        let emulator = try await PN532Emulator.start(["--text", "trf:duress:alert-42"])
        defer { emulator.stop() }
        let nfc = try await reader(emulator.connstring(), way: way)
        defer { Task { await nfc.close() } }
        let named = way == .inProcess ? "PN532 v1.6 on \(emulator.connstring())" : "PN532 v1.6 on \(emulator.connstring()) (plugin libnfc-process)"
        #expect(nfc.deviceName == named)
        if way == .inProcess {
            // What it is: the chip libnfc reports, and the connection string it answered on
            // (a pty: no udev link to put in its place).
            #expect(nfc.identity == DeviceIdentity(model: "PN532 v1.6", link: emulator.connstring()), "\(String(describing: nfc.identity))")
        }
        let tag = try await nfc.readTag(timeout: .seconds(3))
        #expect(tag.type == .type2)
        #expect(tag.uidString == "04:A1:B2:C3:D4:E5:F6")
        #expect(tag.atqa == 0x0044)
        #expect(tag.sak == 0x00)
        #expect(try tag.ndef?.records.first?.content() == .text("trf:duress:alert-42", language: "en"))
    }

    /// A bench of two readers, each a PN532 on a pty of its own (issue 43): a kit with two
    /// named readers reads each one's tag, and when one chip goes away the other carries on.
    /// Out of process both are served by one plugin process, each under its own handle, and
    /// each reader's identity comes through the protocol (1.6).
    @Test(arguments: Way.allCases) func twoReadersOnABenchEachReadTheirOwnAndOneGoneLeavesTheOther(way: Way) async throws {
        let first = try await PN532Emulator.start(["--text", "bench one"])
        let second = try await PN532Emulator.start(["--text", "bench two"])
        defer { first.stop(); second.stop() }
        var manifest: String?
        let plugin: PluginDescriptor
        if way == .outOfProcess {
            let installed = try await ExternalBuiltin.install("libnfc", as: "libnfc-bench")
            plugin = try PluginManifest.load(installed).descriptor()
            manifest = installed
        } else {
            plugin = try #require(LibnfcPlugin.descriptor)
        }
        let registry = PluginRegistry([plugin])
        let name = plugin.name
        let configuration = try KitConfiguration.parse("""
            [nfc.one]
            plugin = "\(name)"
            connstring = "\(first.connstring())"
            [nfc.two]
            plugin = "\(name)"
            connstring = "\(second.connstring())"
            """, file: "bench.toml", directory: "/tmp", registry: registry)
        let kit = await Kit.load(configuration, registry: registry, context: Self.context)
        #expect(kit.devices.compactMap(\.identity?.link) == [first.connstring(), second.connstring()])
        let readers = kit.devices.filter { $0.capability == .nfcReader }
        #expect(readers.count == 2 && readers.allSatisfy { $0.identity?.model?.contains("PN532") == true }, "\(readers.map(\.identity))")
        if let manifest { #expect(ExternalBuiltin.processes(of: manifest).count == 1, "one plugin process serves both readers") }
        async let one = kit.nfcReader(named: "one").readTag(timeout: .seconds(5))
        async let two = kit.nfcReader(named: "two").readTag(timeout: .seconds(5))
        #expect(try await one.ndef?.records.first?.content() == .text("bench one", language: "en"))
        #expect(try await two.ndef?.records.first?.content() == .text("bench two", language: "en"))
        first.stop()
        let gone = await failure { _ = try await kit.nfcReader(named: "one").readTag(timeout: .seconds(3)) }
        #expect(gone != nil && gone?.kind != .timeout, "\(String(describing: gone))")
        #expect(try await kit.nfcReader(named: "two").readTag(timeout: .seconds(5)).ndef?.records.first?.content() == .text("bench two", language: "en"))
        await kit.close()
    }

    /// `fieldhal plugin test`'s checks against the libnfc backend out of process, on libnfc's
    /// pn532_uart driver and the emulator: the reader (a tag in the field) and the emulator.
    @Test func theConformanceChecksPassOnARealLibnfc() async throws {
        let emulator = try await PN532Emulator.start(["--text", "conformance"])
        defer { emulator.stop() }
        let manifest = try PluginManifest.load(try await ExternalBuiltin.install("libnfc", as: "libnfc-conformance"))
        let report = await PluginConformance.run(manifest, parameters: [
            .nfcReader: ["connstring": .string(emulator.connstring())], .nfcEmulator: ["connstring": .string(emulator.connstring())],
        ])
        #expect(report.passed, "\(report.checks.filter { $0.outcome != .passed })")
        let read = report.checks.first { $0.name.hasPrefix("nfc.read answers") }
        #expect(read?.outcome == .passed && read?.detail.hasPrefix("a tag: 04:A1:B2:C3:D4:E5:F6") == true, "\(String(describing: read))")
    }

    @Test(arguments: Way.allCases) func readsATextRecordSpanningManyPages(way: Way) async throws {
        let text = String(repeating: "long evidence note ", count: 6)  // 114 bytes: 8 READs
        let emulator = try await PN532Emulator.start(["--text", text])
        defer { emulator.stop() }
        let nfc = try await reader(emulator.connstring(), way: way)
        defer { Task { await nfc.close() } }
        let tag = try await nfc.readTag(timeout: .seconds(3))
        #expect(try tag.ndef?.records.first?.content() == .text(text, language: "en"))
    }

    @Test(arguments: Way.allCases) func readsATypeFourTagThroughISODEP(way: Way) async throws {
        let emulator = try await PN532Emulator.start(["--tag", "type4", "--uri", "trf:duress:alert-7"])
        defer { emulator.stop() }
        let nfc = try await reader(emulator.connstring(), way: way)
        defer { Task { await nfc.close() } }
        let tag = try await nfc.readTag(timeout: .seconds(3))
        #expect(tag.type == .type4)
        #expect(tag.uidString == "04:11:22:33:44:55:66")
        #expect(tag.atqa == 0x0344)
        #expect(tag.sak == 0x20)
        #expect(try tag.ndef?.records.first?.content() == .uri("trf:duress:alert-7"))
    }

    @Test(arguments: Way.allCases) func noTagTimesOutWithinItsBound(way: Way) async throws {
        let emulator = try await PN532Emulator.start(["--tag", "none"])
        defer { emulator.stop() }
        let nfc = try await reader(emulator.connstring(), way: way)
        defer { Task { await nfc.close() } }
        let started = ContinuousClock.now
        let error = await failure { _ = try await nfc.readTag(timeout: .milliseconds(600)) }
        let elapsed = ContinuousClock.now - started
        #expect(error?.kind == .timeout)
        // Not before its bound; the upper bound only tells a timeout from a hang.
        #expect(elapsed >= .milliseconds(600) && elapsed < .seconds(10), "took \(elapsed)")
    }

    @Test(arguments: Way.allCases) func cancellingAWaitEndsItPromptly(way: Way) async throws {
        let emulator = try await PN532Emulator.start(["--tag", "none"])
        defer { emulator.stop() }
        let nfc = try await reader(emulator.connstring(), way: way)
        defer { Task { await nfc.close() } }
        let wait = Task { try await nfc.readTag(timeout: .seconds(30)) }
        try await Task.sleep(for: .milliseconds(300))
        let cancelled = ContinuousClock.now
        wait.cancel()
        let result = await wait.result
        #expect(ContinuousClock.now - cancelled < .seconds(10), "ended by the cancel, not at the read's 30 s")
        #expect((result.failure as? FieldHALError)?.kind == .cancelled)
        // The reader is still usable afterwards: nothing was left half-done in libnfc.
        let error = await failure { _ = try await nfc.readTag(timeout: .milliseconds(200)) }
        #expect(error?.kind == .timeout)
    }

    @Test(arguments: Way.allCases) func aTagThatLeavesMidReadIsATypedError(way: Way) async throws {
        let emulator = try await PN532Emulator.start(["--tag", "vanishing"])
        defer { emulator.stop() }
        let nfc = try await reader(emulator.connstring(), way: way)
        defer { Task { await nfc.close() } }
        let error = await failure { _ = try await nfc.readTag(timeout: .seconds(3)) }
        #expect(error?.kind == .disconnected)
        #expect(error?.description.contains("left the field") == true, "\(String(describing: error))")
        // The tag is gone: the next read waits for one and times out.
        let next = await failure { _ = try await nfc.readTag(timeout: .milliseconds(300)) }
        #expect(next?.kind == .timeout)
    }

    @Test(arguments: Way.allCases) func anOversizedTLVIsMalformedDataNotACrash(way: Way) async throws {
        let emulator = try await PN532Emulator.start(["--tag", "corrupt"])
        defer { emulator.stop() }
        let nfc = try await reader(emulator.connstring(), way: way)
        defer { Task { await nfc.close() } }
        let error = await failure { _ = try await nfc.readTag(timeout: .seconds(3)) }
        #expect(error?.kind == .malformedData)
        #expect(error?.description.contains("04:A1:B2:C3:D4:E5:F6") == true)
        #expect(error?.description.contains("144-byte data area") == true, "\(String(describing: error))")
    }

    /// A chip that does not answer the first command of its set-up (a PN532 woken from
    /// power-down; an emulator on a loaded CI machine's pty was late once) is opened again
    /// and set up once more, within the read: the tag is read.
    @Test(arguments: Way.allCases) func aChipThatMissesItsSetUpIsOpenedAgainAndReads(way: Way) async throws {
        let emulator = try await PN532Emulator.start(["--miss-setup"])
        defer { emulator.stop() }
        let nfc = try await reader(emulator.connstring(), way: way)
        defer { Task { await nfc.close() } }
        let tag = try await nfc.readTag(timeout: .seconds(10))
        #expect(tag.uidString == "04:A1:B2:C3:D4:E5:F6" && tag.ndef != nil)
        #expect(await emulator.waitForEvent("missed-setup", timeout: .seconds(1)) != nil)
    }

    @Test(arguments: Way.allCases) func aChipThatStopsAnsweringIsATimeoutNotAHang(way: Way) async throws {
        let emulator = try await PN532Emulator.start(["--tag", "mute"])
        defer { emulator.stop() }
        let nfc = try await reader(emulator.connstring(), way: way)
        defer { Task { await nfc.close() } }
        let started = ContinuousClock.now
        let error = await failure { _ = try await nfc.readTag(timeout: .seconds(30)) }
        #expect(error?.kind == .timeout)
        #expect(error?.description.contains("stopped answering (tag poll)") == true, "\(String(describing: error))")
        #expect(ContinuousClock.now - started < .seconds(15), "a hung chip fails the poll, the wait does not run to 30 s")
        #expect(await emulator.waitForEvent("hung", timeout: .seconds(1)) != nil)
    }

    // MARK: Writing

    @Test(arguments: Way.allCases) func writesThenReadsBackTextAndURIRecords(way: Way) async throws {
        let emulator = try await PN532Emulator.start(["--text", "old"])
        defer { emulator.stop() }
        let nfc = try await reader(emulator.connstring(), way: way)
        defer { Task { await nfc.close() } }
        let uri = NDEFMessage.uri("https://example.org/alerts/\(String(repeating: "x", count: 60))")
        let written = try await nfc.write(uri, timeout: .seconds(3))
        #expect(written.ndef == uri)
        #expect(try await nfc.readTag(timeout: .seconds(3)).ndef == uri)
        let text = try NDEFMessage.text("trf:duress:alert-9")
        _ = try await nfc.write(text, timeout: .seconds(3))
        #expect(try await nfc.readTag(timeout: .seconds(3)).ndef == text)
        // nfc-mfultralight, through its own libnfc stack, sees what the plugin wrote.
        await nfc.close()
        let dump = NSTemporaryDirectory() + "fieldhal-written-\(UUID().uuidString).mfd"
        let read = try await emulator.runTool("/usr/bin/nfc-mfultralight", ["r", dump])
        #expect(read.status == 0, "\(read.output)")
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: dump)))
        #expect(Array(bytes[16..<18]) == [0x03, UInt8(try text.encoded().count)], "NDEF TLV on page 4")
        #expect(bytes.firstRange(of: Array("trf:duress:alert-9".utf8)) != nil)
    }

    @Test(arguments: Way.allCases) func aMessageLargerThanTheTagIsRefusedAndTheTagKept(way: Way) async throws {
        let emulator = try await PN532Emulator.start(["--text", "kept"])
        defer { emulator.stop() }
        let nfc = try await reader(emulator.connstring(), way: way)
        defer { Task { await nfc.close() } }
        let tooLarge = try NDEFMessage.text(String(repeating: "y", count: 200))
        let error = await failure { _ = try await nfc.write(tooLarge, timeout: .seconds(3)) }
        #expect(error?.kind == .invalidArgument)
        #expect(error?.description.contains("holds 144") == true, "\(String(describing: error))")
        #expect(try await nfc.readTag(timeout: .seconds(3)).ndef == (try .text("kept")))
    }

    @Test(arguments: Way.allCases) func writingATypeFourTagIsUnsupported(way: Way) async throws {
        let emulator = try await PN532Emulator.start(["--tag", "type4"])
        defer { emulator.stop() }
        let nfc = try await reader(emulator.connstring(), way: way)
        defer { Task { await nfc.close() } }
        let error = await failure { _ = try await nfc.write(.uri("https://example.org"), timeout: .seconds(3)) }
        #expect(error?.kind == .unsupported)
    }

    // MARK: Tag emulation

    @Test(arguments: Way.allCases) func anExternalReaderReadsTheEmulatedTypeFourTag(way: Way) async throws {
        let emulator = try await PN532Emulator.start(["--tag", "none", "--reader", "forum", "--reader-delay-ms", "200"])
        defer { emulator.stop() }
        let tag = try await tagEmulator(emulator.connstring(), way: way)
        defer { Task { await tag.close() } }
        let message = NDEFMessage.uri("trf:duress:alert-42")
        let outcome = try await tag.emulate(message, timeout: .seconds(5))
        #expect(outcome.wasRead)
        #expect(outcome.commandCount == 6, "select app, select CC, read CC, select NDEF, read NLEN, read body")
        let read = await emulator.waitForEvent("read")
        #expect(read?.fields["ndef"] == (try message.encoded()).map { String(format: "%02x", $0) }.joined())
    }

    @Test(arguments: Way.allCases) func emulationWithNoReaderEndsAtItsTimeout(way: Way) async throws {
        let emulator = try await PN532Emulator.start(["--tag", "none"])
        defer { emulator.stop() }
        let tag = try await tagEmulator(emulator.connstring(), way: way)
        defer { Task { await tag.close() } }
        let started = ContinuousClock.now
        let outcome = try await tag.emulate(.uri("trf:duress:x"), timeout: .milliseconds(800))
        let elapsed = ContinuousClock.now - started
        #expect(!outcome.wasRead)
        #expect(elapsed >= .milliseconds(700) && elapsed < .seconds(10), "took \(elapsed): not at its timeout")
    }

    /// In process only: the reader and the emulator share one libnfc device here, which two
    /// plugin processes (one per capability, today) cannot.
    /// One chip, two capabilities sharing one libnfc device: in process, and out of process
    /// in one plugin process (protocol 1.2: a plugin serves every capability a kit opens
    /// from it), where the host's `close` of one leaves the other working.
    @Test(arguments: Way.allCases) func cancellingEmulationEndsItAndTheChipReadsAgain(way: Way) async throws {
        let emulator = try await PN532Emulator.start(["--tag", "ntag213"])
        defer { emulator.stop() }
        let plugin = try await descriptor(way)
        guard case .nfcEmulator(let tag) = try await plugin.open(.nfcEmulator, Self.parameters(emulator.connstring()), Self.context),
              case .nfcReader(let nfc) = try await plugin.open(.nfcReader, Self.parameters(emulator.connstring()), Self.context) else {
            throw GPSFakeError("the libnfc plugin did not open a reader and an emulator")
        }
        defer { Task { await tag.close(); await nfc.close() } }
        let emulation = Task { try await tag.emulate(.uri("trf:duress:x"), timeout: .seconds(30)) }
        try await Task.sleep(for: .milliseconds(300))
        let cancelled = ContinuousClock.now
        emulation.cancel()
        let result = await emulation.result
        #expect(ContinuousClock.now - cancelled < .seconds(10), "ended by the cancel, not at the emulation's 30 s")
        #expect((result.failure as? FieldHALError)?.kind == .cancelled)
        #expect(await emulator.waitForEvent("aborted", timeout: .seconds(1)) != nil, "libnfc sent the abort ACK")
        // Back to initiator mode on the same chip.
        #expect(try await nfc.readTag(timeout: .seconds(3)).type == .type2)
        // The emulator closed, the reader on the same chip (and, out of process, in the same
        // process) reads on.
        await tag.close()
        #expect(try await nfc.readTag(timeout: .seconds(3)).type == .type2)
    }

    // MARK: Two libnfc stacks through the bridge

    @Test(arguments: Way.allCases) func twoChipsExchangeAnAlertThroughTheBridge(way: Way) async throws {
        let bridge = try await PN532Emulator.start(["--bridge"])
        defer { bridge.stop() }
        let tag = try await tagEmulator(bridge.connstring(0), way: way)
        let nfc = try await reader(bridge.connstring(1), way: way)
        defer { Task { await tag.close(); await nfc.close() } }
        let message = try NDEFMessage.text("trf:duress:alert-5")
        let emulation = Task { try await tag.emulate(message, timeout: .seconds(10)) }
        let read = try await nfc.readTag(timeout: .seconds(5))
        let outcome = try await emulation.value
        #expect(read.type == .type4)
        #expect(read.uid.count == 4 && read.uid[0] == 0x08, "a random 4-byte UID, as the PN532 emulates")
        #expect(read.ndef == message)
        #expect(outcome.wasRead)
    }

    // MARK: Unplug and recovery

    @Test(arguments: Way.allCases) func anUnpluggedReaderIsReportedAndReopenedWhenItComesBack(way: Way) async throws {
        let link = NSTemporaryDirectory() + "fieldhal-pn532-\(UUID().uuidString)"
        defer { unlink(link) }
        let first = try await PN532Emulator.start(["--link", link, "--tag", "none"])
        let nfc = try await reader("pn532_uart:\(link)", way: way)
        defer { Task { await nfc.close() } }
        let wait = Task { try await nfc.readTag(timeout: .seconds(30)) }
        try await Task.sleep(for: .milliseconds(300))
        let unplugged = ContinuousClock.now
        first.stop()
        let result = await wait.result
        #expect(ContinuousClock.now - unplugged < .seconds(10), "ended by the unplug, not at the read's 30 s")
        let error = result.failure as? FieldHALError
        #expect(error?.kind == .disconnected, "\(String(describing: error))")
        #expect(error?.advice?.contains("reopens") == true)
        // Still unplugged: a clear error at once, no hang.
        let missing = await failure { _ = try await nfc.readTag(timeout: .seconds(1)) }
        #expect(missing?.kind == .unavailable || missing?.kind == .deviceNotFound, "\(String(describing: missing))")
        // Plugged back in at the same path: the same reader object reads again.
        let second = try await PN532Emulator.start(["--link", link, "--text", "back again"])
        defer { second.stop() }
        let tag = try await nfc.readTag(timeout: .seconds(3))
        #expect(try tag.ndef?.records.first?.content() == .text("back again", language: "en"))
    }

    @Test(arguments: Way.allCases) func aMissingSerialPortIsDeviceNotFoundWithAdvice(way: Way) async throws {
        let descriptor = try await descriptor(way)
        do {
            _ = try await descriptor.open(.nfcReader, Self.parameters("pn532_uart:/dev/fieldhal-no-such-port"), Self.context)
            Issue.record("opened a missing port")
        } catch let error as FieldHALError {
            #expect(error.kind == .deviceNotFound)
            #expect(error.description.contains("/dev/fieldhal-no-such-port does not exist"))
        }
    }

    @Test(arguments: Way.allCases) func badParametersAreRefusedBeforeOpening(way: Way) async throws {
        let descriptor = try await descriptor(way)
        do {
            _ = try await descriptor.open(.nfcReader, Self.parameters("pn532_uart:/dev/null", ["poll_interval_ms": .integer(1)]), Self.context)
            Issue.record("accepted poll_interval_ms = 1")
        } catch let error as FieldHALError {
            #expect(error.kind == .invalidArgument)
            #expect(error.description.contains("poll_interval_ms"))
        }
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
#endif
