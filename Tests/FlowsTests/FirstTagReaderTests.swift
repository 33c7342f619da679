import FakePlugin
import FieldHAL
import FieldHALFlows
import Testing

/// The NFC acknowledgement's reader on a kit with several `ack` readers: the first tag on any
/// of them, the other waits cancelled; a device's failure said over a timeout.
@Suite("First tag on any reader")
struct FirstTagReaderTests {
    func reader(_ parameters: [String: ConfigValue]) async throws -> any NFCReader {
        let context = PluginContext(configDirectory: "/tmp", stateDirectory: "/tmp")
        guard case .nfcReader(let reader) = try await FakePlugin.descriptor.open(.nfcReader, PluginParameters(parameters), context) else {
            throw FieldHALError(.unavailable, subject: "nfc", detail: "the fake plugin opened no reader")
        }
        return reader
    }

    func tag(_ uid: String, arriving milliseconds: Int) -> ConfigValue {
        .table(["type": .string("ntag213"), "uid": .string(uid), "text": .string("trf:duress:alert-\(uid.prefix(2))"),
                "arrive_ms": .integer(milliseconds)])
    }

    @Test func theFirstTagOnAnyReaderWinsAndTheOtherWaitEnds() async throws {
        let late = try await reader(["tags": .array([tag("04:00:00:00:00:00:01", arriving: 60_000)])])
        let soon = try await reader(["tags": .array([tag("04:00:00:00:00:00:02", arriving: 200)])])
        let both = try #require(FirstTagReader.of([late, soon]))
        let clock = ContinuousClock()
        let start = clock.now
        let read = try await both.readTag(timeout: .seconds(30))
        #expect(read.uidString == "04:00:00:00:00:00:02", "the second reader's tag, which came first")
        #expect(clock.now - start < .seconds(20), "the other reader's minute-long wait was cancelled")
        await both.close()
    }

    @Test func noTagAnywhereIsATimeoutAndOneReaderIsItself() async throws {
        let empty = try await reader(["tags": .array([])])
        let alsoEmpty = try await reader(["tags": .array([])])
        #expect(FirstTagReader.of([empty]) is FirstTagReader == false)
        #expect(FirstTagReader.of([]) == nil)
        await #expect { try await FirstTagReader([empty, alsoEmpty]).readTag(timeout: .milliseconds(300)) } throws: {
            ($0 as? FieldHALError)?.kind == .timeout
        }
        await empty.close()
        await alsoEmpty.close()
    }
}
