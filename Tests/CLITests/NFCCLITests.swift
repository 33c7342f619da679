#if NFC
import Foundation
import TestSupport
import Testing

/// `fieldhal nfc …` with the libnfc plugin, through libnfc's pn532_uart driver on the
/// PN532 emulator's ptys: what a technician types, and two kits talking to each other.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct NFCCLITests {
    func config(_ name: String, _ capability: String, _ connstring: String) throws -> String {
        let path = scratch(name + ".toml")
        try """
        [kit]
        name = "\(name)"

        [\(capability)]
        plugin = "libnfc"
        connstring = "\(connstring)"
        """.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// Seed 000 Req 32: kit A (duressed) emulates a tag carrying `trf:duress:<alertId>`;
    /// kit B, another process with its own libnfc stack, reads it through the bridge.
    @Test(arguments: ["--text", "--uri"], CLIWay.allCases)
    func twoProcessesExchangeADuressPayload(_ kind: String, _ way: CLIWay) async throws {
        try await eachWay(way) {
            let bridge = try await PN532Emulator.start(["--bridge"])
            defer { bridge.stop() }
            let kitA = try config("kit-a", "nfc_emulator", bridge.connstring(0))
            let kitB = try config("kit-b", "nfc", bridge.connstring(1))
            let payload = "trf:duress:alert-\(UUID().uuidString.prefix(8).lowercased())"
            async let emulated = CLI.run(["nfc", "emulate", kind, payload, "--timeout", "10", "--config", kitA])
            try await Task.sleep(for: .milliseconds(300))  // A is in target mode before B polls
            let read = try await CLI.run(["nfc", "read", "--timeout", "5", "--json", "--config", kitB])
            let emulation = try await emulated
            #expect(read.status == 0, "\(read.stderr)")
            #expect(emulation.status == 0, "\(emulation.stderr)")
            #expect(emulation.stdout.contains("read by a reader"))
            let report = try JSONSerialization.jsonObject(with: Data(read.stdout.utf8)) as? [String: Any]
            let records = report?["records"] as? [[String: Any]]
            #expect(report?["type"] as? String == "type4")
            #expect(records?.first?["kind"] as? String == (kind == "--text" ? "text" : "uri"))
            #expect(records?.first?["value"] as? String == payload)
        }
    }

    @Test(arguments: CLIWay.allCases)
    func readWriteAndStatusOnOneReader(_ way: CLIWay) async throws {
        try await eachWay(way) {
            let emulator = try await PN532Emulator.start()
            defer { emulator.stop() }
            let kit = try config("reader", "nfc", emulator.connstring())
            let status = try await CLI.run(["status", "--config", kit])
            #expect(status.stdout.contains("PN532 v1.6 on \(emulator.connstring())"), "\(status.stdout)")
            let write = try await CLI.run(["nfc", "write", "--uri", "https://example.org/kit/7", "--config", kit])
            #expect(write.status == 0, "\(write.stderr)")
            let read = try await CLI.run(["nfc", "read", "--config", kit])
            #expect(read.stdout.contains("type2 tag 04:A1:B2:C3:D4:E5:F6 ATQA 0044 SAK 00"), "\(read.stdout)")
            #expect(read.stdout.contains("uri: https://example.org/kit/7"))
        }
    }

    @Test(arguments: CLIWay.allCases)
    func noTagExitsWithTheTimeoutCode(_ way: CLIWay) async throws {
        try await eachWay(way) {
            let emulator = try await PN532Emulator.start(["--tag", "none"])
            defer { emulator.stop() }
            let kit = try config("empty", "nfc", emulator.connstring())
            let read = try await CLI.run(["nfc", "read", "--timeout", "0.5", "--config", kit])
            #expect(read.status == 75, "\(read.stderr)")
            #expect(read.stderr.contains("no tag within 0.5 s"))
            #expect(read.stdout.isEmpty)
        }
    }

    @Test(arguments: CLIWay.allCases)
    func aCorruptTagExitsWithTheDataErrorCode(_ way: CLIWay) async throws {
        try await eachWay(way) {
            let emulator = try await PN532Emulator.start(["--tag", "corrupt"])
            defer { emulator.stop() }
            let kit = try config("corrupt", "nfc", emulator.connstring())
            let read = try await CLI.run(["nfc", "read", "--timeout", "2", "--config", kit])
            #expect(read.status == 65, "\(read.stderr)")
            #expect(read.stderr.contains("rewrite the tag"))
        }
    }
}
#endif
