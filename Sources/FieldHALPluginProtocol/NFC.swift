import FieldHAL
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// NFC on the channel (docs/plugin-protocol.md, "NFC", protocol 1.1): `nfc.read`,
/// `nfc.write` and `nfc.emulate`, with a tag, an NDEF message and an emulation's outcome
/// as values.
///
/// An NDEF message travels as its own bytes in base64, not record by record: the bytes a
/// tag holds are what a plugin has, any language can pass them on unchanged, and the host
/// reads them with the same NDEF parser (fuzzed) that reads a tag in process. A few hundred
/// bytes at most on the tags FieldHAL reads: no bulk channel is needed.
extension PluginProtocol {
    public enum NFCMethod {
        public static let read = "nfc.read"
        public static let write = "nfc.write"
        public static let emulate = "nfc.emulate"
    }

    /// The longest wait a request may ask for, and the longest the host waits on one: a day.
    public static let longestWait = Duration.seconds(86_400)

    /// `{"timeoutMs": N}` plus, for write and emulate, `{"message": base64}`.
    public static func nfcParameters(timeout: Duration, message: NDEFMessage? = nil) throws(FieldHALError) -> JSONValue {
        let milliseconds = min(max(timeout.milliseconds, 1), longestWait.milliseconds)
        var object: [String: JSONValue] = ["timeoutMs": .integer(Int64(milliseconds))]
        if let message { object["message"] = try value(of: message) }
        return .object(object)
    }

    /// The wait a request asks for: 1 ms to a day.
    public static func timeout(in parameters: JSONValue, subject: String) throws(FieldHALError) -> Duration {
        guard let milliseconds = parameters["timeoutMs"]?.integer, milliseconds >= 1,
              milliseconds <= Int64(longestWait.milliseconds) else {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "timeoutMs must be an integer from 1 to \(longestWait.milliseconds)")
        }
        return .milliseconds(milliseconds)
    }

    /// An NDEF message as the protocol carries it: its bytes, base64.
    public static func value(of message: NDEFMessage) throws(FieldHALError) -> JSONValue {
        do {
            return .string(Data(try message.encoded()).base64EncodedString())
        } catch {
            throw FieldHALError(.invalidArgument, subject: "NDEF message", detail: "cannot be encoded: \(error)")
        }
    }

    /// An NDEF message from its base64 bytes, checked by the NDEF parser.
    public static func message(from value: JSONValue?, subject: String) throws(FieldHALError) -> NDEFMessage {
        guard let text = value?.string, let data = Data(base64Encoded: text) else {
            throw FieldHALError(.malformedData, subject: subject, detail: "an NDEF message that is not a base64 string")
        }
        do {
            return try NDEFMessage(decoding: [UInt8](data))
        } catch {
            throw FieldHALError(.malformedData, subject: subject, detail: "an NDEF message that does not parse: \(error)")
        }
    }

    /// A tag as the protocol carries it: `type`, `uid` (`04:A1:…`), `atqa` (`0044`) and
    /// `sak` (`00`) when known, `ndef` (base64) when the tag holds a message.
    public static func value(of tag: NFCTag) throws(FieldHALError) -> JSONValue {
        var object: [String: JSONValue] = ["type": .string(tag.type.rawValue), "uid": .string(tag.uidString)]
        if let atqa = tag.atqa { object["atqa"] = .string(hex(UInt64(atqa), digits: 4)) }
        if let sak = tag.sak { object["sak"] = .string(hex(UInt64(sak), digits: 2)) }
        if let ndef = tag.ndef { object["ndef"] = try value(of: ndef) }
        if let exchanges = tag.exchanges {
            object["exchanges"] = .array(exchanges.map { exchange in
                var fields: [String: JSONValue] = ["command": .string(exchange.command.map { hex(UInt64($0), digits: 2) }.joined())]
                if let response = exchange.response { fields["response"] = .string(response.map { hex(UInt64($0), digits: 2) }.joined()) }
                return .object(fields)
            })
        }
        return .object(object)
    }

    /// A tag from a plugin's answer, checked: a plugin's nonsense is its `protocolError`.
    public static func tag(from value: JSONValue?, plugin: String) throws(FieldHALError) -> NFCTag {
        let subject = "plugin \(plugin)"
        func wrong(_ detail: String) -> FieldHALError {
            FieldHALError(.protocolError, subject: subject, detail: "sent a tag " + detail,
                          advice: "docs/plugin-protocol.md gives a tag's fields")
        }
        guard let object = value?.object else { throw wrong("that is not an object") }
        guard let typeName = object["type"]?.string, let type = NFCTagType(rawValue: typeName) else {
            throw wrong("without a type of type2, type4, mifare-classic or iso14443a")
        }
        guard let uidText = object["uid"]?.string, let uid = [UInt8](hexString: uidText), (4...10).contains(uid.count) else {
            throw wrong("without a uid of 4 to 10 bytes in hex")
        }
        func number(_ key: String, digits: Int) throws(FieldHALError) -> UInt64? {
            guard let field = object[key], field != .null else { return nil }
            guard let text = field.string, text.count == digits, let number = UInt64(text, radix: 16) else {
                throw wrong("whose \(key) is not \(digits) hex digits")
            }
            return number
        }
        var ndef: NDEFMessage?
        if let field = object["ndef"], field != .null {
            do {
                ndef = try message(from: field, subject: subject)
            } catch {
                throw FieldHALError(.protocolError, subject: subject, detail: "sent a tag with \(error.detail)")
            }
        }
        var exchanges: [TagExchange]?
        if let field = object["exchanges"], field != .null {
            guard let items = field.array else { throw wrong("whose exchanges are not an array") }
            exchanges = try items.map { item throws(FieldHALError) -> TagExchange in
                guard let command = item["command"]?.string.flatMap({ [UInt8](hexString: $0) }), !command.isEmpty else {
                    throw wrong("with an exchange whose command is not hex bytes")
                }
                guard let text = item["response"]?.string else { return TagExchange(command: command, response: nil) }
                guard let response = [UInt8](hexString: text) else { throw wrong("with an exchange whose response is not hex bytes") }
                return TagExchange(command: command, response: response)
            }
        }
        return NFCTag(type: type, uid: uid, atqa: try number("atqa", digits: 4).map { UInt16($0) },
                      sak: try number("sak", digits: 2).map { UInt8($0) }, ndef: ndef, exchanges: exchanges)
    }

    /// An emulation's outcome: `{"wasRead": true, "commandCount": 6}`.
    public static func value(of outcome: EmulationOutcome) -> JSONValue {
        .object(["wasRead": .bool(outcome.wasRead), "commandCount": .integer(Int64(outcome.commandCount))])
    }

    public static func outcome(from value: JSONValue?, plugin: String) throws(FieldHALError) -> EmulationOutcome {
        guard let wasRead = value?["wasRead"]?.bool, let count = value?["commandCount"]?.integer, count >= 0, count <= Int64(Int32.max) else {
            throw FieldHALError(.protocolError, subject: "plugin \(plugin)",
                                detail: "answered nfc.emulate without wasRead (a boolean) and commandCount (a count)",
                                advice: "docs/plugin-protocol.md gives the outcome's fields")
        }
        return EmulationOutcome(wasRead: wasRead, commandCount: Int(count))
    }

    private static func hex(_ value: UInt64, digits: Int) -> String {
        let text = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, digits - text.count)) + text
    }
}

extension Duration {
    /// Whole milliseconds, rounded down: 0 for a negative duration, and capped at 10^12 ms
    /// (about 31 years) so that no caller's duration overflows an `Int`.
    var milliseconds: Int {
        guard components.seconds >= 0 else { return 0 }
        guard components.seconds < 1_000_000_000 else { return 1_000_000_000_000 }
        return Int(wholeMilliseconds)
    }
}
