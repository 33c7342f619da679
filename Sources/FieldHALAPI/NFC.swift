import FieldHAL
import Foundation

/// `POST /v1/nfc/read`: how long to wait for a tag (and for the chip, if another request
/// has it): the whole call ends within `timeoutMs`.
public struct APINFCRead: Sendable, Codable, Equatable {
    /// 1 to 300000; default 10000.
    public var timeoutMs: Int?

    public init(timeoutMs: Int? = nil) {
        self.timeoutMs = timeoutMs
    }
}

/// `POST /v1/nfc/write` and `POST /v1/nfc/emulate`: the NDEF message, record by record,
/// and how long to wait for a tag (write; default 10000) or a reader (emulate; default 30000).
public struct APINFCMessage: Sendable, Codable, Equatable {
    public var records: [APIRecordInput]
    public var timeoutMs: Int?

    public init(records: [APIRecordInput], timeoutMs: Int? = nil) {
        self.records = records
        self.timeoutMs = timeoutMs
    }

    /// The message, or what is wrong with it.
    public func message() throws -> NDEFMessage {
        guard (1...8).contains(records.count) else {
            throw FieldHALError(.invalidArgument, subject: "records", detail: "\(records.count) records; give 1 to 8")
        }
        return NDEFMessage(records: try records.enumerated().map { index, record in try record.record(at: index) })
    }
}

/// One record to write or emulate: a Text record (`text`, optional `language`, default
/// "en") or a URI record (`uri`) — exactly one of the two.
public struct APIRecordInput: Sendable, Codable, Equatable {
    public var text: String?
    public var language: String?
    public var uri: String?

    public init(text: String? = nil, language: String? = nil, uri: String? = nil) {
        self.text = text
        self.language = language
        self.uri = uri
    }

    func record(at index: Int) throws -> NDEFRecord {
        let subject = "records[\(index)]"
        // Counted as JSON Schema counts a maxLength: in code points.
        for (name, value) in [("text", text), ("uri", uri)] where (value?.unicodeScalars.count ?? 0) > 4096 {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "\(name) is longer than 4096 characters")
        }
        if let language, language.isEmpty || language.utf8.count > 63 || !language.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }) {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "\"\(language)\" is not a language code",
                                advice: "give an IANA language code such as en or de-CH")
        }
        switch (text, uri) {
        case (let text?, nil):
            do {
                return try .text(text, language: language ?? "en")
            } catch {
                throw FieldHALError(.invalidArgument, subject: subject, detail: "\(error)")
            }
        case (nil, let uri?):
            guard language == nil else {
                throw FieldHALError(.invalidArgument, subject: subject, detail: "a URI record has no language")
            }
            return .uri(uri)
        default:
            throw FieldHALError(.invalidArgument, subject: subject, detail: "give exactly one of text and uri")
        }
    }
}

/// A tag as a read or a write found it.
public struct APITag: Sendable, Codable, Equatable {
    /// `type2`, `type4`, `mifare-classic`, `iso14443a`.
    public var type: String
    /// The UID as reader tools print it: `04:A1:B2:C3:D4:E5:F6`.
    public var uid: String
    /// ATQA and SAK in hex, when the reader reports them.
    public var atqa: String?
    public var sak: String?
    /// The NDEF message's records; empty when the tag holds none, or the empty message (one
    /// empty record, `D0 00 00`, which the NFC Forum writes for a message of nothing).
    public var records: [APIRecord]
    /// The commands and answers that read the tag, in hex, when its reader keeps them (the
    /// libnfc plugin's `exchanges = true`): what `fieldhal record` keeps for a replay.
    public var exchanges: [TagExchange]?

    public init(type: String, uid: String, atqa: String?, sak: String?, records: [APIRecord], exchanges: [TagExchange]? = nil) {
        self.type = type
        self.uid = uid
        self.atqa = atqa
        self.sak = sak
        self.records = records
        self.exchanges = exchanges
    }

    public init(_ tag: NFCTag) {
        self.init(type: tag.type.rawValue, uid: tag.uidString, atqa: tag.atqa.map { String(format: "%04X", $0) },
                  sak: tag.sak.map { String(format: "%02X", $0) }, records: (tag.ndef?.records ?? []).map(APIRecord.init),
                  exchanges: tag.exchanges)
    }
}

/// A `tag` event: a tag came into the reader's field (`found`, as read then) or left it
/// (`lost`, as it was last read).
public struct APITagEvent: Sendable, Codable, Equatable {
    public enum State: String, Sendable, Codable {
        case found
        case lost
    }

    public var state: State
    public var tag: APITag
    /// The reader's name in the configuration (nil from a daemon older than named devices).
    public var device: String?

    public init(state: State, tag: APITag, device: String? = nil) {
        self.state = state
        self.tag = tag
        self.device = device
    }
}

/// One NDEF record of a tag: what it means (`kind`, `value`, `language`) and what it is
/// (`tnf`, `recordType`, `payload` in base64), so that a client can decode any record itself.
public struct APIRecord: Sendable, Codable, Equatable {
    /// `text`, `uri`, `absolute-uri`, `media`, `external`, `empty`, `tnf-N` or `malformed`.
    public var kind: String
    /// The text, the URI, or a summary ("image/png, 120 bytes").
    public var value: String
    public var language: String?
    /// The Type Name Format (0–7).
    public var tnf: Int
    /// The record type's bytes as text (`T`, `U`, a MIME type, an external type).
    public var recordType: String
    /// The payload, base64.
    public var payload: String
    /// The record's ID field, base64; nil when it has none.
    public var id: String?

    public init(kind: String, value: String, language: String?, tnf: Int, recordType: String, payload: String, id: String? = nil) {
        self.kind = kind
        self.value = value
        self.language = language
        self.tnf = tnf
        self.recordType = recordType
        self.payload = payload
        self.id = id
    }

    public init(_ record: NDEFRecord) {
        let (kind, value, language): (String, String, String?) = switch try? record.content() {
        case .text(let text, let language)?: ("text", text, language)
        case .uri(let uri)?: ("uri", uri, nil)
        case .absoluteURI(let uri)?: ("absolute-uri", uri, nil)
        case .media(let type, let payload)?: ("media", "\(type), \(payload.count) bytes", nil)
        case .external(let type, let payload)?: ("external", "\(type), \(payload.count) bytes", nil)
        case .empty?: ("empty", "", nil)
        case .other(let tnf, _, let payload)?: ("tnf-\(tnf.rawValue)", "\(payload.count) bytes", nil)
        case nil: ("malformed", "record payload does not decode", nil)
        }
        self.init(kind: kind, value: value, language: language, tnf: Int(record.typeNameFormat.rawValue),
                  recordType: String(decoding: record.type, as: UTF8.self), payload: Data(record.payload).base64EncodedString(),
                  id: record.id.isEmpty ? nil : Data(record.id).base64EncodedString())
    }
}

extension NFCTag {
    /// The tag an API event describes, as a trace records it (`fieldhal record`): its type,
    /// UID, ATQA, SAK, records and, when its reader kept them, the exchanges that read it. The API shows an empty message as no records, so that is
    /// what comes back; a tag read again from this gives the same API tag.
    public init(api tag: APITag) throws(FieldHALError) {
        func wrong(_ detail: String) -> FieldHALError { FieldHALError(.malformedData, subject: "tag \(tag.uid)", detail: detail) }
        guard let type = NFCTagType(rawValue: tag.type) else { throw wrong("no tag type \"\(tag.type)\"") }
        let uid = tag.uid.split(separator: ":").compactMap { UInt8($0, radix: 16) }
        guard uid.count == tag.uid.split(separator: ":").count, !uid.isEmpty else { throw wrong("its UID is not hex bytes") }
        var records: [NDEFRecord] = []
        for record in tag.records {
            guard let format = TypeNameFormat(rawValue: UInt8(clamping: record.tnf)), let payload = Data(base64Encoded: record.payload) else {
                throw wrong("a record's TNF or payload is not what the API writes")
            }
            let id = try record.id.map { text throws(FieldHALError) -> [UInt8] in
                guard let bytes = Data(base64Encoded: text) else { throw wrong("a record's id is not base64") }
                return Array(bytes)
            } ?? []
            records.append(NDEFRecord(typeNameFormat: format, type: Array(record.recordType.utf8), id: id, payload: Array(payload)))
        }
        self.init(type: type, uid: uid, atqa: tag.atqa.flatMap { UInt16($0, radix: 16) }, sak: tag.sak.flatMap { UInt8($0, radix: 16) },
                  ndef: records.isEmpty ? nil : NDEFMessage(records: records), exchanges: tag.exchanges)
    }
}
