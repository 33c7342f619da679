#if NFC
import FieldHAL
import FieldHALAPI
import FieldHALPluginHost
import Foundation
import LibnfcPlugin
import TestSupport
import Testing

/// Golden files, as gpsd keeps its regression logs beside their expected output: each tag
/// dump in `Golden/` (`NAME.tag`: an NTAG213's data area in hex, with comments) is served by
/// the PN532 emulator and read through libnfc's pn532_uart driver, in process and through
/// the plugin protocol, and what the API says of it — the tag as `GET /v1/nfc/read` answers
/// it, or the kind of error — must be `NAME.json`, byte for byte. A new regression is a new
/// pair of files. `FIELDHAL_GOLDEN=update swift test --filter GoldenTagTests` writes the
/// `.json` files from what is read now, for a reviewer to read in the diff.
@Suite(.timeLimit(.minutes(3)))
struct GoldenTagTests {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Golden").path
    static let dumps = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter { $0.hasSuffix(".tag") }.sorted()
    static let context = PluginContext(configDirectory: "/tmp", stateDirectory: "/tmp")

    enum Way: String, CaseIterable, CustomTestStringConvertible {
        case inProcess = "in process"
        case outOfProcess = "out of process"
        var testDescription: String { rawValue }
    }

    /// What the API says of a read: the tag, or the error's kind (its detail names the pty).
    static func said(_ read: () async throws -> NFCTag) async throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        do {
            return String(decoding: try encoder.encode(APITag(try await read())), as: UTF8.self) + "\n"
        } catch let error as FieldHALError {
            return String(decoding: try encoder.encode(["error": ["kind": error.kind.rawValue]]), as: UTF8.self) + "\n"
        }
    }

    @Test func everyDumpHasItsGoldenFile() {
        #expect(Self.dumps.count >= 7, "\(Self.dumps)")
        for dump in Self.dumps {
            let golden = Self.directory + "/" + dump.dropLast(4) + ".json"
            #expect(FileManager.default.fileExists(atPath: golden) || ProcessInfo.processInfo.environment["FIELDHAL_GOLDEN"] == "update",
                    "\(golden) is missing: FIELDHAL_GOLDEN=update writes it")
        }
    }

    @Test(arguments: dumps, Way.allCases) func aTagDumpReadsAsItsGoldenFileSays(dump: String, way: Way) async throws {
        let emulator = try await PN532Emulator.start(["--data-area", Self.directory + "/" + dump])
        defer { emulator.stop() }
        var plugin = try #require(LibnfcPlugin.descriptor)
        if way == .outOfProcess {
            plugin = try PluginManifest.load(try await ExternalBuiltin.install("libnfc", as: "libnfc-golden")).descriptor()
        }
        guard case .nfcReader(let reader) = try await plugin.open(.nfcReader, PluginParameters(["connstring": .string(emulator.connstring())]),
                                                                  Self.context) else {
            throw GPSFakeError("the libnfc plugin did not open a reader")
        }
        let said = try await Self.said { try await reader.readTag(timeout: .seconds(5)) }
        await reader.close()
        let golden = Self.directory + "/" + dump.dropLast(4) + ".json"
        if ProcessInfo.processInfo.environment["FIELDHAL_GOLDEN"] == "update" {
            if way == .inProcess { try said.write(toFile: golden, atomically: true, encoding: .utf8) }
            return
        }
        let expected = try String(contentsOfFile: golden, encoding: .utf8)
        #expect(said == expected, "\(dump) \(way): read\n\(said)\nwhere \(golden) says\n\(expected)")
    }
}
#endif
