import Testing
import TestSupport
@testable import FieldHAL

@Suite("NDEF codec")
struct NDEFCodecTests {
    @Test func textRecordRoundTripsInUTF8AndUTF16() throws {
        for encoding in [NDEFRecord.TextEncoding.utf8, .utf16] {
            let record = try NDEFRecord.text("Grüße, 世界 🚨", language: "de", encoding: encoding)
            let decoded = try NDEFMessage(decoding: NDEFMessage(records: [record]).encoded())
            #expect(try decoded.records[0].content() == .text("Grüße, 世界 🚨", language: "de"))
        }
    }

    @Test func knownTextRecordBytes() throws {
        // The NFC Forum's example: "Hello, world!" in English, UTF-8.
        let bytes = try NDEFMessage.text("Hello, world!").encoded()
        #expect(bytes == [0xD1, 0x01, 0x10, 0x54, 0x02, 0x65, 0x6E] + Array("Hello, world!".utf8))
    }

    @Test func utf16LittleEndianWithBOMDecodes() throws {
        let payload: [UInt8] = [0x82, 0x65, 0x6E, 0xFF, 0xFE, 0x68, 0x00, 0x69, 0x00]
        let record = NDEFRecord(typeNameFormat: .wellKnown, type: NDEFRecord.textType, payload: payload)
        #expect(try record.content() == .text("hi", language: "en"))
    }

    @Test func uriRecordUsesTheLongestPrefix() throws {
        let cases: [(String, UInt8)] = [
            ("https://www.example.com/a", 0x02), ("https://example.com", 0x04), ("tel:+4930123", 0x05),
            ("urn:epc:id:sgtin:1", 0x1E), ("urn:nfc:ext", 0x23), ("trf:duress:alert-42", 0x00),
        ]
        for (uri, code) in cases {
            let record = NDEFRecord.uri(uri)
            #expect(record.payload.first == code, "\(uri)")
            let decoded = try NDEFMessage(decoding: NDEFMessage(records: [record]).encoded())
            #expect(try decoded.records[0].content() == .uri(uri))
        }
    }

    @Test func longRecordsIDsAndEveryTNFRoundTrip() throws {
        let long = [UInt8](repeating: 0xAB, count: 70_000)
        let message = NDEFMessage(records: [
            NDEFRecord(typeNameFormat: .media, type: Array("application/octet-stream".utf8), id: [1, 2, 3], payload: long),
            NDEFRecord(typeNameFormat: .absoluteURI, type: Array("https://example.com/t".utf8)),
            NDEFRecord(typeNameFormat: .external, type: Array("example.com:duress".utf8), payload: [9]),
            NDEFRecord(typeNameFormat: .unknown, payload: [1, 2]),
            .uri("https://transrify.example"),
        ])
        let bytes = try message.encoded()
        #expect(bytes[0] & 0x10 == 0, "a payload of 70000 bytes needs a long record")
        #expect(bytes[0] & 0x08 != 0, "the ID flag is set")
        let decoded = try NDEFMessage(decoding: bytes)
        #expect(decoded == message)
        #expect(try decoded.records[1].content() == .absoluteURI("https://example.com/t"))
        #expect(try decoded.records[2].content() == .external(type: "example.com:duress", payload: [9]))
    }

    @Test func emptyMessageIsTheEmptyRecord() throws {
        #expect(try NDEFMessage.empty.encoded() == [0xD0, 0x00, 0x00])
        #expect(try NDEFMessage(decoding: [0xD0, 0x00, 0x00]) == .empty)
    }

    @Test(arguments: [
        ([], "no records"),
        ([0xD1, 0x01], "payload length"),
        ([0xD1, 0x01, 0x05, 0x54, 0x02], "payload of record"),
        ([0xC1, 0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0x54], "payload of record"),
        ([0xD9, 0x01, 0x00, 0x09, 0x54], "ID of record"),
        ([0xD1, 0x05, 0x00, 0x54], "type of record"),
        ([0x11, 0x01, 0x00, 0x54], "message-begin"),
        ([0x91, 0x01, 0x00, 0x54], "message-end"),
        ([0xD1, 0x01, 0x00, 0x54, 0x00], "after the record marked message end"),
        ([0x91, 0x01, 0x00, 0x54, 0x91, 0x01, 0x00, 0x54], "has the message-begin flag but is not first"),
        ([0xF1, 0x01, 0x00, 0x54], "chunked"),
        ([0xD0, 0x01, 0x00, 0x54], "empty record"),
        ([0xD5, 0x01, 0x00, 0x54], "unknown-type record"),
        ([0xD6, 0x00, 0x00], "TNF 6"),
        ([0xD7, 0x00, 0x00], "TNF 7"),
        ([0xD1, 0x00, 0x00], "has no type"),
    ] as [([UInt8], String)])
    func malformedMessagesAreRejectedWithAReason(bytes: [UInt8], reason: String) {
        do {
            let message = try NDEFMessage(decoding: bytes)
            Issue.record("decoded \(message) from malformed bytes")
        } catch let error as NDEFError {
            #expect(error.description.contains(reason), "\(error)")
        } catch {
            Issue.record("unexpected error type \(error)")
        }
    }

    @Test func malformedTextAndURIPayloads() throws {
        func text(_ payload: [UInt8]) -> NDEFRecord { NDEFRecord(typeNameFormat: .wellKnown, type: NDEFRecord.textType, payload: payload) }
        #expect(throws: NDEFError.self) { try text([]).content() }
        #expect(throws: NDEFError.self) { try text([0x45, 0x65, 0x6E]).content() }  // reserved bit 6
        #expect(throws: NDEFError.self) { try text([0x0A, 0x65, 0x6E]).content() }  // language past the end
        #expect(throws: NDEFError.self) { try text([0x82, 0x65, 0x6E, 0x00]).content() }  // odd UTF-16
        #expect(throws: NDEFError.self) { try text([0x02, 0x65, 0x6E, 0xC3, 0x28]).content() }  // bad UTF-8
        let reserved = NDEFRecord(typeNameFormat: .wellKnown, type: NDEFRecord.uriType, payload: [0x24, 0x61])
        #expect(throws: NDEFError.self) { try reserved.content() }
        #expect(throws: NDEFError.self) { try NDEFRecord.text("x", language: "") }
    }

    @Test func everyTruncationOfAValidMessageIsAnError() throws {
        let bytes = try NDEFMessage(records: [try .text("trf:duress:abc"), .uri("https://example.com"),
                                              NDEFRecord(typeNameFormat: .media, type: Array("text/plain".utf8), id: [7], payload: [1, 2, 3])]).encoded()
        for length in 0..<bytes.count {
            #expect(throws: NDEFError.self, "prefix of \(length) bytes") { try NDEFMessage(decoding: Array(bytes[0..<length])) }
        }
    }

    @Test func randomBytesNeverCrashTheDecoder() {
        var generator = SplitMix64(state: 2026)
        var decoded = 0
        for _ in 0..<10_000 {
            let count = Int.random(in: 0...48, using: &generator)
            var bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
            // Bias towards plausible headers so the decoder gets past the first byte.
            if !bytes.isEmpty && Bool.random(using: &generator) { bytes[0] = 0xD0 | (bytes[0] & 0x0F) }
            if let message = try? NDEFMessage(decoding: bytes) {
                decoded += 1
                for record in message.records { _ = try? record.content() }
            }
        }
        #expect(decoded > 0, "some random inputs are valid messages")
    }

    @Test func randomValidMessagesRoundTrip() throws {
        var generator = SplitMix64(state: 7)
        let formats: [TypeNameFormat] = [.wellKnown, .media, .absoluteURI, .external, .unknown]
        for _ in 0..<200 {
            let records = (0..<Int.random(in: 1...4, using: &generator)).map { _ -> NDEFRecord in
                let tnf = formats.randomElement(using: &generator)!
                let typeLength = tnf == .unknown ? 0 : Int.random(in: 1...20, using: &generator)
                return NDEFRecord(
                    typeNameFormat: tnf,
                    type: (0..<typeLength).map { _ in UInt8.random(in: 0x21...0x7E, using: &generator) },
                    id: (0..<Int.random(in: 0...3, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) },
                    payload: (0..<Int.random(in: 0...600, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) })
            }
            let message = NDEFMessage(records: records)
            #expect(try NDEFMessage(decoding: message.encoded()) == message)
        }
    }
}

@Suite("Type 2 TLV area")
struct Type2TLVTests {
    @Test func parsesEveryTLVKind() throws {
        let ndef = try NDEFMessage.uri("https://example.com").encoded()
        let area: [UInt8] = [0x00, 0x01, 0x03, 0xA0, 0x10, 0x44, 0x02, 0x03, 0x00, 0x00, 0x00, 0xFD, 0x01, 0x55]
            + [0x03, UInt8(ndef.count)] + ndef + [0xFE, 0x00, 0x00]
        let tlvs = try Type2TLV.parse(area)
        #expect(tlvs == [.null, .lockControl([0xA0, 0x10, 0x44]), .memoryControl([0x00, 0x00, 0x00]), .proprietary([0x55]),
                         .ndefMessage(ndef), .terminator])
        #expect(try Type2TLV.ndefMessage(inDataArea: area) == .uri("https://example.com"))
    }

    @Test func threeByteLengthsRoundTrip() throws {
        let message = try NDEFMessage.text(String(repeating: "x", count: 400))
        let area = try Type2TLV.encodeDataArea(message)
        #expect(area[1] == 0xFF)
        #expect(try Type2TLV.ndefMessage(inDataArea: area + [0, 0, 0, 0]) == message)
    }

    @Test func blankTagAndNoNDEF() throws {
        #expect(try Type2TLV.ndefMessage(inDataArea: [0x03, 0x00, 0xFE]) == .empty)
        #expect(try Type2TLV.ndefMessage(inDataArea: [0x00, 0xFE]) == nil)
    }

    @Test func malformedAreasThrow() {
        let cases: [[UInt8]] = [
            [0x03, 0x10, 0xD1],  // length past the end
            [0x03, 0xFF, 0x00],  // 3-byte length cut short
            [0x03, 0xFF, 0x00, 0x05, 0xD1],  // 3-byte length below 0xFF
            [0x03, 0xFF, 0xFF, 0xFF],  // reserved length
            [0x42, 0x00],  // unknown tag
            [0x03, 0x03, 0xD1, 0x01, 0xFF, 0xFE],  // NDEF TLV holding a broken message
        ]
        for area in cases {
            #expect(throws: NDEFError.self, "\(area)") { try Type2TLV.ndefMessage(inDataArea: area) }
        }
    }

    @Test func randomAreasNeverCrash() {
        var generator = SplitMix64(state: 99)
        for _ in 0..<10_000 {
            var area = (0..<Int.random(in: 0...40, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            if !area.isEmpty && Bool.random(using: &generator) { area[0] = 0x03 }
            _ = try? Type2TLV.ndefMessage(inDataArea: area)
        }
    }

    @Test func capabilityContainer() throws {
        let cc = try Type2CapabilityContainer(bytes: [0xE1, 0x10, 0x12, 0x00])
        #expect(cc.dataAreaSize == 144)  // NTAG213
        #expect(cc.isWritable)
        #expect(throws: NDEFError.self) { try Type2CapabilityContainer(bytes: [0x00, 0x10, 0x12, 0x00]) }
        #expect(throws: NDEFError.self) { try Type2CapabilityContainer(bytes: [0xE1, 0x20, 0x12, 0x00]) }
        #expect(throws: NDEFError.self) { try Type2CapabilityContainer(bytes: [0xE1]) }
    }
}

@Suite("Type 4 tag exchange")
struct Type4TagTests {
    @Test func readerReadsWhatTheCardHolds() throws {
        for size in [0, 10, 59, 60, 500] {
            let message = size == 0 ? NDEFMessage.empty : try NDEFMessage.text(String(repeating: "a", count: size))
            var card = try Type4TagApplication(message: message)
            #expect(!card.messageWasRead)
            let read = try Type4NDEFReader.readMessage { card.respond(to: $0) }
            #expect(read == message)
            #expect(card.messageWasRead)
        }
    }

    @Test func cardRejectsOutOfOrderAndUnknownCommands() throws {
        var card = try Type4TagApplication(message: .uri("trf:duress:1"))
        #expect(card.respond(to: [0x00, 0xB0, 0x00, 0x00, 0x02]) == [0x69, 0x85])  // read before select
        #expect(card.respond(to: [0x00, 0xA4, 0x04, 0x00, 0x02, 0x01, 0x02]) == [0x6A, 0x82])  // wrong AID
        #expect(card.respond(to: [0x00, 0xA4, 0x00, 0x0C, 0x02, 0xE1, 0x04]) == [0x6A, 0x82])  // file before app
        #expect(card.respond(to: [0x00, 0xCA, 0x00, 0x00]) == [0x6D, 0x00])
        #expect(card.respond(to: [0x00]) == [0x6D, 0x00])
        #expect(card.respond(to: [0x00, 0xA4, 0x04, 0x00, 0x07, 0xD2]) == [0x67, 0x00])  // truncated SELECT
    }

    @Test func readerRejectsAHostileCard() {
        // A card that claims a 1000-byte NDEF file in a CC that allows 100.
        let hostile: ([UInt8]) -> [UInt8] = { command in
            switch command[1] {
            case 0xA4: return [0x90, 0x00]
            default:
                if command[2] == 0 && command[3] == 0 && command[4] == 0x0F {
                    return [0x00, 0x0F, 0x20, 0x00, 0x3B, 0x00, 0x34, 0x04, 0x06, 0xE1, 0x04, 0x00, 0x64, 0x00, 0xFF, 0x90, 0x00]
                }
                return [0x03, 0xE8, 0x90, 0x00]
            }
        }
        #expect(throws: NDEFError.self) { try Type4NDEFReader.readMessage(transceive: hostile) }
        #expect(throws: NDEFError.self) { try Type4NDEFReader.readMessage { _ in [0x6A] } }
    }
}
