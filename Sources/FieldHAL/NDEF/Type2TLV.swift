/// The TLV framing of an NFC Forum Type 2 tag's data area (pages 4 onwards):
/// NULL and Terminator are one byte; the others carry a 1- or 3-byte length.
public enum Type2TLV: Sendable, Equatable {
    case null
    case lockControl([UInt8])
    case memoryControl([UInt8])
    case ndefMessage([UInt8])
    case proprietary([UInt8])
    case terminator

    enum Tag {
        static let null: UInt8 = 0x00
        static let lockControl: UInt8 = 0x01
        static let memoryControl: UInt8 = 0x02
        static let ndefMessage: UInt8 = 0x03
        static let proprietary: UInt8 = 0xFD
        static let terminator: UInt8 = 0xFE
    }

    /// Parses TLVs up to the Terminator or the end of `area`. Unknown tags, lengths past
    /// the end of the area and the reserved 3-byte length 0xFFFF throw `NDEFError`.
    public static func parse(_ area: [UInt8]) throws -> [Type2TLV] {
        var reader = ByteReader(area)
        var tlvs: [Type2TLV] = []
        while !reader.isAtEnd {
            let offset = reader.offset
            let tag = try reader.byte("TLV tag")
            switch tag {
            case Tag.null:
                tlvs.append(.null)
                continue
            case Tag.terminator:
                tlvs.append(.terminator)
                return tlvs
            case Tag.lockControl, Tag.memoryControl, Tag.ndefMessage, Tag.proprietary:
                break
            default:
                throw NDEFError.malformed("unknown TLV tag 0x\(hexByte(tag)) at offset \(offset) of the data area")
            }
            var length = Int(try reader.byte("length of TLV at offset \(offset)"))
            if length == 0xFF {
                length = Int(try reader.uint16("3-byte length of TLV at offset \(offset)"))
                guard length >= 0xFF, length < 0xFFFF else {
                    throw NDEFError.malformed("invalid 3-byte TLV length \(length) at offset \(offset)")
                }
            }
            let value = try reader.bytes(length, "value of TLV 0x\(hexByte(tag)) at offset \(offset)")
            switch tag {
            case Tag.lockControl: tlvs.append(.lockControl(value))
            case Tag.memoryControl: tlvs.append(.memoryControl(value))
            case Tag.ndefMessage: tlvs.append(.ndefMessage(value))
            default: tlvs.append(.proprietary(value))
            }
        }
        return tlvs
    }

    /// The NDEF message in a data area: the first NDEF TLV, decoded. `nil` when the area
    /// has no NDEF TLV; the empty message when that TLV has length 0 (a blank tag).
    public static func ndefMessage(inDataArea area: [UInt8]) throws -> NDEFMessage? {
        for tlv in try parse(area) {
            if case .ndefMessage(let bytes) = tlv {
                return bytes.isEmpty ? .empty : try NDEFMessage(decoding: bytes)
            }
        }
        return nil
    }

    /// The bytes of a data area holding `message` in an NDEF TLV, then a Terminator.
    public static func encodeDataArea(_ message: NDEFMessage) throws -> [UInt8] {
        let ndef = try message.encoded()
        guard ndef.count < 0xFFFF else { throw NDEFError.invalidArgument("message of \(ndef.count) bytes exceeds a Type 2 TLV") }
        var area: [UInt8] = [Tag.ndefMessage]
        if ndef.count < 0xFF {
            area.append(UInt8(ndef.count))
        } else {
            area += [0xFF, UInt8(ndef.count >> 8), UInt8(ndef.count & 0xFF)]
        }
        return area + ndef + [Tag.terminator]
    }
}

/// A Type 2 tag's capability container (page 3): magic 0xE1, version, data area size.
public struct Type2CapabilityContainer: Sendable, Equatable {
    public var majorVersion: UInt8
    public var minorVersion: UInt8
    /// Size of the data area in bytes (the CC's byte 2 times 8).
    public var dataAreaSize: Int
    public var readAccess: UInt8
    public var writeAccess: UInt8

    public init(bytes: [UInt8]) throws {
        guard bytes.count >= 4 else { throw NDEFError.truncated("capability container needs 4 bytes, got \(bytes.count)") }
        guard bytes[0] == 0xE1 else {
            throw NDEFError.malformed("capability container magic is 0x\(hexByte(bytes[0])), not 0xE1: the tag is not NDEF-formatted")
        }
        majorVersion = bytes[1] >> 4
        minorVersion = bytes[1] & 0x0F
        guard majorVersion == 1 else { throw NDEFError.unsupported("Type 2 mapping version \(majorVersion).\(minorVersion)") }
        dataAreaSize = Int(bytes[2]) * 8
        readAccess = bytes[3] >> 4
        writeAccess = bytes[3] & 0x0F
    }

    public init(dataAreaSize: Int) {
        majorVersion = 1
        minorVersion = 0
        self.dataAreaSize = dataAreaSize
        readAccess = 0
        writeAccess = 0
    }

    public var bytes: [UInt8] {
        [0xE1, majorVersion << 4 | minorVersion, UInt8(min(dataAreaSize / 8, 255)), readAccess << 4 | writeAccess]
    }

    public var isWritable: Bool { writeAccess == 0 }
}
