#if NFC
import Foundation
import TestSupport
import Testing

/// The PN532 emulator is honest: libnfc's own tools, through libnfc's unchanged pn532_uart
/// driver, read its simulated NTAG213 (issue 4's first requirement of the harness).
@Suite(.serialized, .timeLimit(.minutes(2)))
struct PN532EmulatorTests {
    @Test func nfcListSeesTheSimulatedNTAG213() async throws {
        let emulator = try await PN532Emulator.start()
        defer { emulator.stop() }
        let listing = try await emulator.runTool("/usr/bin/nfc-list", [])
        #expect(listing.status == 0, "\(listing.output)")
        #expect(listing.output.contains("1 ISO14443A passive target(s) found"))
        #expect(listing.output.contains("04  a1  b2  c3  d4  e5  f6"))
        #expect(listing.output.contains("ATQA (SENS_RES): 00  44"))
        #expect(!listing.output.contains("Felica (212 kbps) passive target(s) found:\nFeliCa"), "only type A answers")
    }

    @Test func nfcMfultralightReadsItsNDEFMessage() async throws {
        let emulator = try await PN532Emulator.start(["--text", "trf:duress:alert-42"])
        defer { emulator.stop() }
        let dump = NSTemporaryDirectory() + "fieldhal-ntag-\(UUID().uuidString).mfd"
        let read = try await emulator.runTool("/usr/bin/nfc-mfultralight", ["r", dump])
        #expect(read.status == 0, "\(read.output)")
        #expect(read.output.contains("NTAG Type: NTAG213 (144 user bytes)"))
        #expect(read.output.contains("Done, 45 of 45 pages read (0 pages failed)."))
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: dump)))
        #expect(bytes.count == 180)
        #expect(Array(bytes[12..<16]) == [0xE1, 0x10, 0x12, 0x00], "capability container")
        let text = Array("trf:duress:alert-42".utf8)
        #expect(bytes.firstRange(of: text) != nil, "the NDEF Text record's payload")
    }

    @Test func nfcListSeesTheTypeFourCardWithItsATS() async throws {
        let emulator = try await PN532Emulator.start(["--tag", "type4"])
        defer { emulator.stop() }
        let listing = try await emulator.runTool("/usr/bin/nfc-list", [])
        #expect(listing.output.contains("ATQA (SENS_RES): 03  44"), "\(listing.output)")
        #expect(listing.output.contains("SAK (SEL_RES): 20"))
        #expect(listing.output.contains("ATS: 75  77  81  02  80"))
    }

    /// Target mode, proved with libnfc's own tag emulator: the scripted reader runs the
    /// Type 4 procedure against nfc-emulate-forum-tag4 and reads its NDEF message.
    @Test func theScriptedReaderReadsLibnfcsOwnEmulatedTag() async throws {
        let emulator = try await PN532Emulator.start(["--tag", "none", "--reader", "forum"])
        defer { emulator.stop() }
        let run = try await emulator.runTool("/usr/bin/nfc-emulate-forum-tag4", [])
        #expect(run.output.contains("In: 00  a4  04  00  07  d2  76  00  00  85  01  01"), "\(run.output)")
        let read = await emulator.waitForEvent("read", timeout: .seconds(2))
        // nfc-emulate-forum-tag4's default message: a Smart Poster for libnfc.org.
        #expect(read?.fields["ndef"]?.hasPrefix("d1021c5370") == true, "\(emulator.events.map(\.name))")
    }

    @Test func noTagMeansNoTarget() async throws {
        let emulator = try await PN532Emulator.start(["--tag", "none"])
        defer { emulator.stop() }
        let listing = try await emulator.runTool("/usr/bin/nfc-list", [])
        #expect(listing.output.contains("NFC device: user defined device opened"), "\(listing.output)")
        #expect(!listing.output.contains("ISO14443A passive target(s) found"))
    }
}
#endif
