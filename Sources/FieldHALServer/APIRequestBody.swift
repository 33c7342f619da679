import FieldHAL
import FieldHALAPI
import Foundation
import Hummingbird
import NIOCore

/// A request's JSON body: at most 64 KiB, only the fields the contract gives (a misspelt
/// field is an error, not silently ignored), every problem a 400 that names it.
enum APIRequestBody {
    static let limit = 64 * 1024

    static func decode<T: Decodable>(_ type: T.Type, _ request: Request, fields: Set<String>, empty: T? = nil) async throws -> T {
        let data = try await bodyData(request)
        if data.isEmpty, let empty { return empty }
        _ = try object(data, fields: fields)
        return try decode(type, data)
    }

    /// A write's or an emulation's body, each record's fields checked too.
    static func message(_ request: Request) async throws -> APINFCMessage {
        let data = try await bodyData(request)
        let object = try object(data, fields: ["records", "timeoutMs"])
        for (index, record) in ((object["records"] as? [Any]) ?? []).enumerated() {
            guard let record = record as? [String: Any] else { continue }  // the decoder says what it is
            try check(record, fields: ["text", "language", "uri"], subject: "records[\(index)]")
        }
        return try decode(APINFCMessage.self, data)
    }

    private static func bodyData(_ request: Request) async throws -> Data {
        do {
            return Data(try await request.body.collect(upTo: limit).readableBytesView)
        } catch is NIOTooManyBytesError {
            throw APIProblem(kind: FieldHALError.Kind.invalidArgument.rawValue, subject: "request body",
                             detail: "longer than \(limit / 1024) KiB", advice: "the API takes small JSON objects", status: 413)
        }
    }

    private static func object(_ data: Data, fields: Set<String>) throws -> [String: Any] {
        guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw FieldHALError(.invalidArgument, subject: "request body", detail: "not a JSON object",
                                advice: "send a JSON object as api/openapi.yaml gives it for this route")
        }
        try check(object, fields: fields, subject: "request body")
        return object
    }

    /// Only known fields, and none of them null (the contract has no nullable field).
    private static func check(_ object: [String: Any], fields: Set<String>, subject: String) throws {
        if let unknown = object.keys.sorted().first(where: { !fields.contains($0) }) {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "no field \"\(unknown)\" here",
                                advice: "the fields are " + fields.sorted().joined(separator: ", "))
        }
        if let null = object.keys.sorted().first(where: { object[$0] is NSNull }) {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "\(null) is null",
                                advice: "leave a field out for its default")
        }
    }

    private static func decode<T: Decodable>(_ type: T.Type, _ data: Data) throws -> T {
        do {
            return try FieldHALAPI.decoder.decode(T.self, from: data)
        } catch let error as DecodingError {
            // Foundation reports a fraction where a whole number belongs ("timeoutMs": 1.5) as
            // data that is "not valid JSON", with no path: the field is found here instead.
            if case .dataCorrupted(let context) = error, context.codingPath.isEmpty, let field = fractionalField(data) {
                throw FieldHALError(.invalidArgument, subject: "request body", detail: "\(field) is not a whole number")
            }
            throw FieldHALError(.invalidArgument, subject: "request body", detail: describe(error))
        }
    }

    /// The first top-level field holding a number that is not a whole one that fits an Int.
    private static func fractionalField(_ data: Data) -> String? {
        guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return nil }
        return object.keys.sorted().first { key in
            guard let number = object[key] as? NSNumber, !(object[key] is Bool) else { return false }
            let value = number.doubleValue
            return value.rounded() != value || Swift.abs(value) >= 9.2e18
        }
    }

    /// A string field within the contract's `maxLength` (counted in code points, as JSON Schema counts).
    static func limit(_ value: String?, _ name: String, _ maximum: Int) throws {
        guard let value, value.unicodeScalars.count > maximum else { return }
        throw FieldHALError(.invalidArgument, subject: name, detail: "longer than \(maximum) characters")
    }

    /// `timeoutMs`, 1 to 300000 (five minutes), or the route's default.
    static func timeout(_ milliseconds: Int?, default value: Int) throws -> Duration {
        let milliseconds = milliseconds ?? value
        guard (1...300_000).contains(milliseconds) else {
            throw FieldHALError(.invalidArgument, subject: "timeoutMs", detail: "\(milliseconds) is not from 1 to 300000")
        }
        return .milliseconds(milliseconds)
    }

    static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            let names = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined()
            return names.isEmpty ? "the body" : String(names.drop { $0 == "." })
        }
        switch error {
        case .typeMismatch(let type, let context): return "\(path(context)) is not \(type == String.self ? "a string" : type == Int.self ? "a whole number" : "a \(type)")"
        case .valueNotFound(_, let context): return "\(path(context)) is null"
        case .keyNotFound(let key, let context): return "\(path(context)) lacks \"\(key.stringValue)\""
        case .dataCorrupted(let context): return "\(path(context)): \(context.debugDescription)"
        @unknown default: return "\(error)"
        }
    }
}
