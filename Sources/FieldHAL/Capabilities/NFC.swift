/// The NFC Forum tag types FieldHAL reads, plus what it can name but not read.
public enum NFCTagType: String, Sendable, Codable {
    /// NTAG213/215/216, MIFARE Ultralight: memory pages, NDEF in a TLV area.
    case type2 = "type2"
    /// ISO-DEP tags with the NDEF application (ISO 7816-4 APDUs).
    case type4 = "type4"
    /// MIFARE Classic: ISO 14443-A but not NFC Forum; UID only.
    case mifareClassic = "mifare-classic"
    /// Any other ISO 14443-A target.
    case iso14443a = "iso14443a"
}

/// A tag in the field, as a poll found it (react-native-nfc-manager's `TagEvent`).
public struct NFCTag: Sendable, Equatable, Codable {
    public var type: NFCTagType
    public var uid: [UInt8]
    /// ATQA (SENS_RES), when the reader reports it.
    public var atqa: UInt16?
    /// SAK (SEL_RES), when the reader reports it.
    public var sak: UInt8?
    /// The tag's NDEF message; `nil` when the tag holds none (blank or not NDEF-formatted).
    public var ndef: NDEFMessage?
    /// The commands and answers that read it, in order, when its reader was asked to keep
    /// them (the libnfc plugin's `exchanges = true`): what a trace keeps for a replay to
    /// parse again. Nil otherwise.
    public var exchanges: [TagExchange]?

    public init(type: NFCTagType, uid: [UInt8], atqa: UInt16? = nil, sak: UInt8? = nil, ndef: NDEFMessage? = nil,
                exchanges: [TagExchange]? = nil) {
        self.type = type
        self.uid = uid
        self.atqa = atqa
        self.sak = sak
        self.ndef = ndef
        self.exchanges = exchanges
    }

    /// The UID as reader tools print it: `04:A1:B2:C3:D4:E5:F6`.
    public var uidString: String { uid.map { hexByte($0) }.joined(separator: ":") }
}

/// An NFC reader in initiator mode.
public protocol NFCReader: Device {
    /// Waits for an ISO 14443-A tag and reads its NDEF message, if any.
    /// Throws `.timeout` when no tag arrives in time, `.cancelled` when cancelled.
    func readTag(timeout: Duration) async throws -> NFCTag

    /// Waits for a writable tag and writes `message` to it; returns the tag as written.
    func write(_ message: NDEFMessage, timeout: Duration) async throws -> NFCTag
}

/// How an emulation ended.
public struct EmulationOutcome: Sendable, Equatable, Codable {
    /// Whether a reader selected the NDEF file and read the whole message.
    public var wasRead: Bool
    /// How many APDUs the reader sent.
    public var commandCount: Int

    public init(wasRead: Bool, commandCount: Int) {
        self.wasRead = wasRead
        self.commandCount = commandCount
    }
}

/// A device that presents itself to readers as an NFC Forum Type 4 tag.
public protocol NFCTagEmulator: Device {
    /// Emulates a tag holding `message` until a reader has read it or `timeout` passes.
    /// A timeout is not an error: the outcome says the tag was not read.
    func emulate(_ message: NDEFMessage, timeout: Duration) async throws -> EmulationOutcome
}

@inline(__always)
func hexByte(_ byte: UInt8) -> String {
    let digits = Array("0123456789ABCDEF")
    return String([digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]])
}

extension Array where Element == UInt8 {
    /// Parses `04:a1:b2`, `04A1B2` or `04 a1 b2`.
    public init?(hexString: String) {
        let digits = hexString.filter { $0 != ":" && $0 != " " && $0 != "-" }
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        var index = digits.startIndex
        while index < digits.endIndex {
            let next = digits.index(index, offsetBy: 2)
            guard let byte = UInt8(digits[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        self = bytes
    }
}
