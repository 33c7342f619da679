/// An NDEF message: one or more records. The empty message (no records) is encoded as
/// the NFC Forum's single empty record, `D0 00 00`, and that record decodes back to it.
public struct NDEFMessage: Sendable, Equatable, Codable {
    public var records: [NDEFRecord]

    public init(records: [NDEFRecord]) {
        self.records = records
    }

    public static let empty = NDEFMessage(records: [])

    /// A message holding one Text record.
    public static func text(_ text: String, language: String = "en") throws -> NDEFMessage {
        NDEFMessage(records: [try .text(text, language: language)])
    }

    /// A message holding one URI record.
    public static func uri(_ uri: String) -> NDEFMessage {
        NDEFMessage(records: [.uri(uri)])
    }
}

// MARK: - Encoding

private enum Flag {
    static let messageBegin: UInt8 = 0x80
    static let messageEnd: UInt8 = 0x40
    static let chunk: UInt8 = 0x20
    static let shortRecord: UInt8 = 0x10
    static let idLength: UInt8 = 0x08
}

extension NDEFMessage {
    /// The message's wire form. Throws for records no NDEF message can carry (a type or
    /// ID over 255 bytes, TNF combinations the specification forbids).
    public func encoded() throws -> [UInt8] {
        let records = self.records.isEmpty ? [NDEFRecord(typeNameFormat: .empty)] : self.records
        var bytes: [UInt8] = []
        for (index, record) in records.enumerated() {
            try record.validateForEncoding()
            var header = record.typeNameFormat.rawValue
            if index == 0 { header |= Flag.messageBegin }
            if index == records.count - 1 { header |= Flag.messageEnd }
            let short = record.payload.count < 256
            if short { header |= Flag.shortRecord }
            if !record.id.isEmpty { header |= Flag.idLength }
            bytes.append(header)
            bytes.append(UInt8(record.type.count))
            if short {
                bytes.append(UInt8(record.payload.count))
            } else {
                let length = UInt32(record.payload.count)
                bytes += [UInt8(length >> 24), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)]
            }
            if !record.id.isEmpty { bytes.append(UInt8(record.id.count)) }
            bytes += record.type
            bytes += record.id
            bytes += record.payload
        }
        return bytes
    }
}

extension NDEFRecord {
    func validateForEncoding() throws {
        guard type.count <= 255 else { throw NDEFError.invalidArgument("type is \(type.count) bytes; at most 255") }
        guard id.count <= 255 else { throw NDEFError.invalidArgument("ID is \(id.count) bytes; at most 255") }
        guard payload.count <= Int(UInt32.max) else { throw NDEFError.invalidArgument("payload too large") }
        try Self.checkTypeNameFormat(typeNameFormat, typeLength: type.count, idLength: id.count, payloadLength: payload.count)
    }

    /// The NDEF specification's rules for which fields each TNF allows (section 3.3).
    static func checkTypeNameFormat(_ tnf: TypeNameFormat, typeLength: Int, idLength: Int, payloadLength: Int) throws {
        switch tnf {
        case .empty:
            guard typeLength == 0, idLength == 0, payloadLength == 0 else {
                throw NDEFError.malformed("an empty record (TNF 0) has a type, ID or payload")
            }
        case .wellKnown, .media, .absoluteURI, .external:
            guard typeLength > 0 else { throw NDEFError.malformed("TNF \(tnf.rawValue) record has no type") }
        case .unknown:
            guard typeLength == 0 else { throw NDEFError.malformed("an unknown-type record (TNF 5) has a type") }
        case .unchanged:
            throw NDEFError.unsupported("TNF 6 (unchanged) only occurs in chunked records, which are not supported")
        case .reserved:
            throw NDEFError.malformed("TNF 7 is reserved")
        }
    }
}

// MARK: - Decoding

extension NDEFMessage {
    /// Decodes a complete NDEF message. Every length is checked against the bytes that
    /// remain before it is used; any deviation from the specification throws `NDEFError`.
    public init(decoding bytes: [UInt8]) throws {
        var reader = ByteReader(bytes)
        var records: [NDEFRecord] = []
        var sawEnd = false
        while !reader.isAtEnd {
            guard !sawEnd else {
                throw NDEFError.malformed("\(reader.remaining) bytes after the record marked message end")
            }
            let offset = reader.offset
            let header = try reader.byte("record header at offset \(offset)")
            let isFirst = records.isEmpty
            if isFirst != (header & Flag.messageBegin != 0) {
                throw NDEFError.malformed(isFirst
                    ? "first record at offset \(offset) lacks the message-begin flag"
                    : "record at offset \(offset) has the message-begin flag but is not first")
            }
            if header & Flag.chunk != 0 {
                throw NDEFError.unsupported("chunked record at offset \(offset)")
            }
            guard let tnf = TypeNameFormat(rawValue: header & 0x07) else {
                throw NDEFError.malformed("bad TNF at offset \(offset)")  // unreachable: 3 bits
            }
            let typeLength = Int(try reader.byte("type length at offset \(offset)"))
            let payloadLength: Int
            if header & Flag.shortRecord != 0 {
                payloadLength = Int(try reader.byte("payload length at offset \(offset)"))
            } else {
                payloadLength = Int(try reader.uint32("payload length at offset \(offset)"))
            }
            let idLength = header & Flag.idLength != 0 ? Int(try reader.byte("ID length at offset \(offset)")) : 0
            try NDEFRecord.checkTypeNameFormat(tnf, typeLength: typeLength, idLength: idLength, payloadLength: payloadLength)
            let type = try reader.bytes(typeLength, "type of record at offset \(offset)")
            let id = try reader.bytes(idLength, "ID of record at offset \(offset)")
            let payload = try reader.bytes(payloadLength, "payload of record at offset \(offset)")
            records.append(NDEFRecord(typeNameFormat: tnf, type: type, id: id, payload: payload))
            sawEnd = header & Flag.messageEnd != 0
        }
        guard !records.isEmpty else { throw NDEFError.truncated("no records") }
        guard sawEnd else { throw NDEFError.truncated("the last record lacks the message-end flag") }
        if records.count == 1, records[0].typeNameFormat == .empty {
            records = []
        }
        self.records = records
    }
}

/// A cursor over bytes whose every read is bounds-checked.
struct ByteReader {
    private let bytes: [UInt8]
    private(set) var offset = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var isAtEnd: Bool { offset >= bytes.count }
    var remaining: Int { bytes.count - offset }

    mutating func byte(_ what: @autoclosure () -> String) throws -> UInt8 {
        guard offset < bytes.count else { throw NDEFError.truncated("\(what()) is missing") }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func uint16(_ what: @autoclosure () -> String) throws -> UInt16 {
        let raw = try self.bytes(2, what())
        return UInt16(raw[0]) << 8 | UInt16(raw[1])
    }

    mutating func uint32(_ what: @autoclosure () -> String) throws -> UInt32 {
        let raw = try self.bytes(4, what())
        return raw.reduce(0) { $0 << 8 | UInt32($1) }
    }

    mutating func bytes(_ count: Int, _ what: @autoclosure () -> String) throws -> [UInt8] {
        guard count >= 0, count <= remaining else {
            throw NDEFError.truncated("\(what()) needs \(count) bytes, \(remaining) left")
        }
        defer { offset += count }
        return Array(bytes[offset..<(offset + count)])
    }
}
