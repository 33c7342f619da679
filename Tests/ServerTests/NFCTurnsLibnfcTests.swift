#if NFC
import FieldHAL
import FieldHALServer
import Foundation
import LibnfcPlugin
import TestSupport
import Testing

/// The turn-taking on a real chip: libnfc's pn532_uart driver against the PN532 emulator,
/// one chip serving as the duressed kit's tag and, in between, as a reader.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct NFCTurnsLibnfcTests {
    static let context = PluginContext(configDirectory: "/tmp", stateDirectory: "/tmp")

    func open(_ capability: Capability, _ connstring: String) async throws -> CapabilityProvider {
        let descriptor = try #require(LibnfcPlugin.descriptor)
        return try await descriptor.open(capability, PluginParameters(["connstring": .string(connstring)]), Self.context)
    }

    @Test func onOneChipAReadInterruptsTheTagOfferAndTheOfferGoesOn() async throws {
        let chip = try await PN532Emulator.start(["--tag", "ntag213", "--reader", "none", "--text", "hello"])
        defer { chip.stop() }
        guard case .nfcReader(let reader) = try await open(.nfcReader, chip.connstring()),
              case .nfcEmulator(let emulator) = try await open(.nfcEmulator, chip.connstring()) else {
            Issue.record("the libnfc plugin did not open a reader and an emulator")
            return
        }
        let turns = NFCTurns(reader: reader, emulator: emulator)
        let offer = Task { try await turns.offer(.uri("trf:duress:alert-9"), timeout: .seconds(60)) }
        try await Task.sleep(for: .seconds(1))
        for round in 1...2 {
            var tag: NFCTag?
            let took = try await elapsed { tag = try await turns.readTag(timeout: .seconds(5), for: "read \(round)") }
            #expect(tag?.uidString == "04:A1:B2:C3:D4:E5:F6")
            #expect(tag?.ndef?.records.first.flatMap { try? $0.content() } == .text("hello", language: "en"))
            #expect(took < .seconds(2), "read \(round) took \(took) beside the offer")
            try await Task.sleep(for: .seconds(1))
        }
        // Each read aborted the chip's wait as a target (TgInitAsTarget, 0x8C), and the offer
        // took the chip back as a target after each.
        let aborts = chip.events.filter { $0.name == "aborted" }
        #expect(aborts.count == 2, "\(chip.events.map { "\($0.name) \($0.fields)" })")
        let ending = await elapsed {
            offer.cancel()
            _ = await offer.result
        }
        #expect(ending < .seconds(3))
        // The emulator's events come through a pipe: give the last one a moment.
        for _ in 0..<40 where chip.events.filter({ $0.name == "aborted" }).count < 3 { try await Task.sleep(for: .milliseconds(50)) }
        #expect(chip.events.filter { $0.name == "aborted" }.count == 3, "the offer was not back on the chip after the reads: \(chip.events.map { "\($0.name) \($0.fields)" })")
        await reader.close()
        await emulator.close()
    }
}
#endif
