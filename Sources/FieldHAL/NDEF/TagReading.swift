/// One command sent to a tag and the tag's answer, as the reader sent and received them
/// (the chip adds the CRC and the framing): what a trace keeps of a read, so that a replayed
/// read parses the same bytes and a fault in them reproduces. In JSON, hex: `{"command":
/// "3004", "response": "0103A00C…"}`; no `response` when the tag did not answer.
public struct TagExchange: Sendable, Equatable, Codable {
    public var command: [UInt8]
    public var response: [UInt8]?

    public init(command: [UInt8], response: [UInt8]?) {
        self.command = command
        self.response = response
    }

    enum CodingKeys: String, CodingKey { case command, response }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        func bytes(_ key: CodingKeys) throws -> [UInt8]? {
            guard let text = try container.decodeIfPresent(String.self, forKey: key) else { return nil }
            guard let bytes = [UInt8](hexString: text) else {
                throw DecodingError.dataCorruptedError(forKey: key, in: container, debugDescription: "not hex bytes")
            }
            return bytes
        }
        guard let command = try bytes(.command) else {
            throw DecodingError.keyNotFound(CodingKeys.command, .init(codingPath: decoder.codingPath, debugDescription: "an exchange without its command"))
        }
        self.command = command
        self.response = try bytes(.response)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(command.map(hexByte).joined(), forKey: .command)
        try container.encodeIfPresent(response.map { $0.map(hexByte).joined() }, forKey: .response)
    }
}

extension NFCTagType {
    /// The type an ISO 14443-A target's SAK says (NFC Forum Digital, 4.8.2): what a poll
    /// finds, before the NDEF application is asked for.
    public init(sak: UInt8) {
        self = switch sak {
        case 0x00: .type2                           // Ultralight family: NTAG21x, Ultralight C/EV1
        case let sak where sak & 0x20 != 0: .type4  // ISO-DEP; the NDEF application decides
        case 0x08, 0x09, 0x18, 0x88: .mifareClassic
        default: .iso14443a
        }
    }
}

/// Reading a tag's NDEF message once a poll has found it, through `transceive` (one command
/// out, one answer back): a Type 2 tag's pages, a Type 4 tag's NDEF application (a smart
/// card without one is an `iso14443a` target with no message). One procedure for a reader
/// on a chip and for a replayed read from a trace's exchanges.
public enum TagReading {
    /// `found` with its message read; an `NDEFError` when the tag's data does not decode.
    public static func read(_ found: NFCTag, transceive: Type2NDEFAccess.Transceive) throws -> NFCTag {
        var tag = found
        switch found.type {
        case .type2:
            tag.ndef = try Type2NDEFAccess.readMessage(transceive: transceive)
        case .type4:
            let aid = Type4TagApplication.ndefApplicationID
            let selected = try transceive([0x00, 0xA4, 0x04, 0x00, UInt8(aid.count)] + aid + [0x00])
            guard selected.suffix(2) == Type4TagApplication.StatusWord.ok[...] else {
                tag.type = .iso14443a  // a smart card without the NFC Forum application
                return tag
            }
            tag.ndef = try Type4NDEFReader.readMessage(transceive: transceive)
        case .mifareClassic, .iso14443a:
            break
        }
        return tag
    }

    /// A tag whose data does not decode as a typed error naming it (`malformedData`, with
    /// the advice to rewrite it), on `subject`: the reader's.
    public static func error(_ error: NDEFError, reading tag: NFCTag, subject: String) -> FieldHALError {
        let kind: FieldHALError.Kind = switch error {
        case .unsupported: .unsupported
        case .invalidArgument: .invalidArgument
        default: .malformedData
        }
        return FieldHALError(kind, subject: subject, detail: "tag \(tag.uidString): \(error)",
                             advice: kind == .malformedData ? "rewrite the tag with `fieldhal nfc write`" : nil)
    }
}
