/// NDEF Type Name Format: how a record's `type` field is to be read.
public enum TypeNameFormat: UInt8, Sendable, Codable {
    case empty = 0
    case wellKnown = 1
    /// An RFC 2046 media type (`text/plain`).
    case media = 2
    case absoluteURI = 3
    /// An NFC Forum external type (`example.com:mytype`).
    case external = 4
    case unknown = 5
    /// Only in the middle chunks of a chunked record; FieldHAL rejects chunking.
    case unchanged = 6
    case reserved = 7
}

/// One NDEF record. `type`, `id` and `payload` are raw bytes; the helpers below build
/// and read the well-known Text and URI records.
public struct NDEFRecord: Sendable, Equatable, Codable {
    public var typeNameFormat: TypeNameFormat
    public var type: [UInt8]
    public var id: [UInt8]
    public var payload: [UInt8]

    public init(typeNameFormat: TypeNameFormat, type: [UInt8] = [], id: [UInt8] = [], payload: [UInt8] = []) {
        self.typeNameFormat = typeNameFormat
        self.type = type
        self.id = id
        self.payload = payload
    }

    public static let textType: [UInt8] = Array("T".utf8)
    public static let uriType: [UInt8] = Array("U".utf8)
}

/// What a record means, once decoded.
public enum NDEFContent: Sendable, Equatable {
    case text(String, language: String)
    case uri(String)
    case media(type: String, payload: [UInt8])
    case absoluteURI(String)
    case external(type: String, payload: [UInt8])
    case empty
    /// A well-known type other than `T`/`U`, or TNF unknown.
    case other(TypeNameFormat, type: [UInt8], payload: [UInt8])
}

extension NDEFRecord {
    public enum TextEncoding: Sendable { case utf8, utf16 }

    /// A well-known Text record (`T`).
    public static func text(_ text: String, language: String = "en", encoding: TextEncoding = .utf8) throws -> NDEFRecord {
        let languageBytes = Array(language.utf8)
        guard !languageBytes.isEmpty, languageBytes.count <= 0x3F, languageBytes.allSatisfy({ $0 < 0x80 }) else {
            throw NDEFError.invalidArgument("language code must be 1–63 ASCII characters, got \"\(language)\"")
        }
        var payload: [UInt8] = [UInt8(languageBytes.count) | (encoding == .utf16 ? 0x80 : 0)]
        payload += languageBytes
        switch encoding {
        case .utf8:
            payload += Array(text.utf8)
        case .utf16:
            // Big-endian with a byte-order mark, which every reader understands.
            payload += [0xFE, 0xFF]
            for unit in text.utf16 { payload += [UInt8(unit >> 8), UInt8(unit & 0xFF)] }
        }
        return NDEFRecord(typeNameFormat: .wellKnown, type: textType, payload: payload)
    }

    /// A well-known URI record (`U`), abbreviated with the NFC Forum prefix table.
    public static func uri(_ uri: String) -> NDEFRecord {
        let (code, rest) = URIPrefix.abbreviate(uri)
        return NDEFRecord(typeNameFormat: .wellKnown, type: uriType, payload: [code] + Array(rest.utf8))
    }

    /// Decodes the record's meaning. Throws `NDEFError` for a Text or URI payload that
    /// does not follow its specification.
    public func content() throws -> NDEFContent {
        switch typeNameFormat {
        case .empty:
            return .empty
        case .wellKnown where type == Self.textType:
            let (text, language) = try decodeText()
            return .text(text, language: language)
        case .wellKnown where type == Self.uriType:
            return .uri(try decodeURI())
        case .media:
            return .media(type: try asciiString(type, field: "media type"), payload: payload)
        case .absoluteURI:
            return .absoluteURI(try asciiString(type, field: "absolute URI"))
        case .external:
            return .external(type: try asciiString(type, field: "external type"), payload: payload)
        default:
            return .other(typeNameFormat, type: type, payload: payload)
        }
    }

    private func decodeText() throws -> (String, String) {
        guard let status = payload.first else { throw NDEFError.malformedText("empty payload") }
        guard status & 0x40 == 0 else { throw NDEFError.malformedText("reserved status bit 6 is set") }
        let languageLength = Int(status & 0x3F)
        guard payload.count >= 1 + languageLength else {
            throw NDEFError.malformedText("language code length \(languageLength) runs past the payload (\(payload.count) bytes)")
        }
        let language = try asciiString(Array(payload[1..<(1 + languageLength)]), field: "language code")
        let body = Array(payload[(1 + languageLength)...])
        let text: String?
        if status & 0x80 == 0 {
            text = String(validating: body, as: UTF8.self)
        } else {
            text = try Self.decodeUTF16(body)
        }
        guard let text else { throw NDEFError.malformedText("text is not valid \(status & 0x80 == 0 ? "UTF-8" : "UTF-16")") }
        return (text, language)
    }

    private static func decodeUTF16(_ bytes: [UInt8]) throws -> String? {
        guard bytes.count % 2 == 0 else { throw NDEFError.malformedText("UTF-16 text has an odd number of bytes") }
        var bigEndian = true
        var start = 0
        if bytes.count >= 2 {
            if bytes[0] == 0xFE && bytes[1] == 0xFF { start = 2 }
            else if bytes[0] == 0xFF && bytes[1] == 0xFE { start = 2; bigEndian = false }
        }
        var units: [UInt16] = []
        units.reserveCapacity((bytes.count - start) / 2)
        var index = start
        while index < bytes.count {
            let high = UInt16(bytes[index]), low = UInt16(bytes[index + 1])
            units.append(bigEndian ? high << 8 | low : low << 8 | high)
            index += 2
        }
        return String(validating: units, as: UTF16.self)
    }

    private func decodeURI() throws -> String {
        guard let code = payload.first else { throw NDEFError.malformedURI("empty payload") }
        guard let prefix = URIPrefix.prefix(for: code) else {
            throw NDEFError.malformedURI("reserved prefix code 0x\(hexByte(code))")
        }
        guard let rest = String(validating: payload.dropFirst(), as: UTF8.self) else {
            throw NDEFError.malformedURI("URI is not valid UTF-8")
        }
        return prefix + rest
    }

    private func asciiString(_ bytes: [UInt8], field: String) throws -> String {
        guard bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }), let string = String(validating: bytes, as: UTF8.self) else {
            throw NDEFError.malformed("\(field) is not printable ASCII")
        }
        return string
    }
}

/// The NFC Forum URI Record Type Definition's prefix table (codes 0x00–0x23).
public enum URIPrefix {
    public static let table: [String] = [
        "", "http://www.", "https://www.", "http://", "https://", "tel:", "mailto:",
        "ftp://anonymous:anonymous@", "ftp://ftp.", "ftps://", "sftp://", "smb://", "nfs://",
        "ftp://", "dav://", "news:", "telnet://", "imap:", "rtsp://", "urn:", "pop:", "sip:",
        "sips:", "tftp:", "btspp://", "btl2cap://", "btgoep://", "tcpobex://", "irdaobex://",
        "file://", "urn:epc:id:", "urn:epc:tag:", "urn:epc:pat:", "urn:epc:raw:", "urn:epc:",
        "urn:nfc:",
    ]

    public static func prefix(for code: UInt8) -> String? {
        Int(code) < table.count ? table[Int(code)] : nil
    }

    /// The longest prefix of `uri` in the table, as its code and the rest of the URI.
    public static func abbreviate(_ uri: String) -> (UInt8, Substring) {
        var best = (code: 0, length: 0)
        for (code, prefix) in table.enumerated() where prefix.count > best.length && uri.hasPrefix(prefix) {
            best = (code, prefix.count)
        }
        return (UInt8(best.code), uri.dropFirst(best.length))
    }
}
