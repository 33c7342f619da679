import FieldHAL
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The protocol's messages as bytes on the channel, and the values both sides read and
/// write: the host (`FieldHALPluginHost`) and a plugin in Swift (`FieldHALPluginSDK`) use
/// the same encoding, so that neither can drift from the other.
extension PluginProtocol {
    public static func request(_ identifier: Int64, _ method: String, _ parameters: JSONValue) -> [UInt8] {
        line(.object(["jsonrpc": .string("2.0"), "id": .integer(identifier), "method": .string(method), "params": parameters]))
    }

    public static func notification(_ method: String, _ parameters: JSONValue) -> [UInt8] {
        line(.object(["jsonrpc": .string("2.0"), "method": .string(method), "params": parameters]))
    }

    public static func response(_ identifier: JSONValue, result: JSONValue) -> [UInt8] {
        line(.object(["jsonrpc": .string("2.0"), "id": identifier, "result": result]))
    }

    /// A failed request: `code` -32000 (a server error in JSON-RPC's terms) with FieldHAL's
    /// typed error in `data`, which the host turns back into the same error.
    public static func response(_ identifier: JSONValue, error: FieldHALError) -> [UInt8] {
        response(identifier, code: -32000, message: error.description, data: value(of: error))
    }

    /// A typed error as the protocol carries it: `kind`, `detail`, and `subject` and
    /// `advice` when there are (an error answer's `data`, a recording's `endedEarly`).
    public static func value(of error: FieldHALError) -> JSONValue {
        var data: [String: JSONValue] = ["kind": .string(error.kind.rawValue), "detail": .string(error.detail)]
        if !error.subject.isEmpty { data["subject"] = .string(error.subject) }
        if let advice = error.advice { data["advice"] = .string(advice) }
        return .object(data)
    }

    /// `value(of:)` read back, `subject` (the plugin's: `plugin NAME`) put before the
    /// error's own; nil when `value` names no kind the host knows.
    public static func error(from value: JSONValue?, subject: String, detail fallback: String? = nil) -> FieldHALError? {
        guard let kindName = value?["kind"]?.string, let kind = FieldHALError.Kind(rawValue: kindName),
              let detail = value?["detail"]?.string ?? fallback else { return nil }
        return FieldHALError(kind, subject: value?["subject"]?.string.map { "\(subject): \($0)" } ?? subject,
                             detail: detail, advice: value?["advice"]?.string)
    }

    /// A JSON-RPC error of the protocol itself (-32601: no such method; -32602: bad params).
    public static func response(_ identifier: JSONValue, code: Int64, message: String, data: JSONValue? = nil) -> [UInt8] {
        var error: [String: JSONValue] = ["code": .integer(code), "message": .string(message)]
        if let data { error["data"] = data }
        return line(.object(["jsonrpc": .string("2.0"), "id": identifier, "error": .object(error)]))
    }

    /// One message as a line: compact JSON and a newline.
    public static func line(_ message: JSONValue) -> [UInt8] {
        var bytes = message.jsonText  // by hand: see JSONText.swift
        bytes.append(10)
        return bytes
    }

    /// A line read from the channel as a JSON-RPC 2.0 message, or nil when it is not one.
    public static func message(_ line: some Collection<UInt8>) -> JSONValue? {
        guard let message = try? JSONValue(parsing: line), message.object != nil,
              message["jsonrpc"] == .string("2.0") else { return nil }
        return message
    }
}

extension JSONValue {
    /// A configuration section's values, as the plugin receives them in `open`.
    public init(_ values: [String: ConfigValue]) {
        self = .object(values.mapValues(JSONValue.init))
    }

    public init(_ value: ConfigValue) {
        switch value {
        case .string(let text): self = .string(text)
        case .integer(let number): self = .integer(Int64(number))
        case .float(let number): self = number.isFinite ? .number(number) : .null
        case .boolean(let flag): self = .bool(flag)
        case .array(let items): self = .array(items.map(JSONValue.init))
        case .table(let table): self = .object(table.mapValues(JSONValue.init))
        case .dateTime(let text): self = .string(text)
        }
    }
}

extension ConfigValue {
    /// A value of `open`'s parameters as the configuration holds it; nil for `null`, which a
    /// configuration cannot say.
    public init?(_ value: JSONValue) {
        switch value {
        case .null: return nil
        case .bool(let flag): self = .boolean(flag)
        case .integer(let number): self = .integer(Int(clamping: number))
        case .number(let number): self = .float(number)
        case .string(let text): self = .string(text)
        case .array(let items): self = .array(items.compactMap(ConfigValue.init))
        case .object(let object): self = .table(object.compactMapValues(ConfigValue.init))
        }
    }
}
