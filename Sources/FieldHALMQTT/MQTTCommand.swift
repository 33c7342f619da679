import FieldHAL
import FieldHALAPI
import Foundation

/// A command on `<prefix>/command` (docs/fleet.md): an API request as a JSON object,
///
///     {"id": "42", "method": "POST", "path": "/v1/haptics/play", "body": {"pattern": "confirm"}}
///
/// answered on `<prefix>/answers` with `{"id": "42", "status": 200, "body": {…}}`, where the
/// body is what the API's route answers (its error object for a refusal). MQTT 3.1.1 has no
/// reply-to: the id, the sender's own, is how it finds its answer.
public struct MQTTCommand: Sendable, Equatable {
    public var id: String?
    public var method: String
    /// The API's path with its query (`/v1/location?device=left`).
    public var path: String
    /// The request's JSON body, or nothing.
    public var body: [UInt8]

    static let fields: Set<String> = ["id", "method", "path", "body"]

    /// The command in `payload`, or the 400 answer that says what is wrong with it (with the
    /// id, when one could be read).
    public static func parse(_ payload: [UInt8]) -> Result<MQTTCommand, MQTTAnswer> {
        func refuse(_ detail: String, id: String? = nil) -> Result<MQTTCommand, MQTTAnswer> {
            .failure(MQTTAnswer(id: id, problem: APIProblem(kind: FieldHALError.Kind.invalidArgument.rawValue, subject: "command", detail: detail,
                                                            advice: "send {\"id\": \"…\", \"method\": \"GET\", \"path\": \"/v1/status\"} (docs/fleet.md)", status: 400)))
        }
        guard let object = try? JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any] else {
            return refuse("not a JSON object")
        }
        let id = object["id"] as? String
        if object["id"] != nil, !(id.map { $0.utf8.count <= 128 && !$0.contains(where: \.isASCIIControl) } ?? false) {
            return refuse("\"id\" is not a string of at most 128 printable characters")
        }
        if let unknown = Set(object.keys).subtracting(fields).sorted().first {
            return refuse("no field \"\(TerminalText.escaped(unknown))\" (the fields: id, method, path, body)", id: id)
        }
        guard let method = object["method"] as? String, !method.isEmpty, method.utf8.count <= 16 else {
            return refuse("\"method\" is missing, or not a method such as \"GET\"", id: id)
        }
        guard let path = object["path"] as? String, path.hasPrefix("/"), path.utf8.count <= 2048,
              path.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            return refuse("\"path\" is missing, or not an API path such as \"/v1/status\"", id: id)
        }
        var body: [UInt8] = []
        if let value = object["body"] {
            guard value is [String: Any], let data = try? JSONSerialization.data(withJSONObject: value) else {
                return refuse("\"body\" is not a JSON object", id: id)
            }
            body = Array(data)
        }
        return .success(MQTTCommand(id: id, method: method, path: path, body: body))
    }
}

/// A command's answer, as published on `<prefix>/answers`.
public struct MQTTAnswer: Sendable, Equatable, Error {
    public var id: String?
    public var status: Int
    /// The route's JSON answer.
    public var body: [UInt8]

    public init(id: String?, status: Int, body: [UInt8]) {
        self.id = id
        self.status = status
        self.body = body
    }

    init(id: String?, problem: APIProblem) {
        self.init(id: id, status: problem.status, body: (try? Array(FieldHALAPI.encoder.encode(APIErrorBody(error: problem)))) ?? Array("{}".utf8))
    }

    /// `{"id": …, "status": …, "body": …}`: the route's answer as it is (it is JSON already).
    public var payload: [UInt8] {
        let id = (try? JSONEncoder().encode(id)).map(Array.init) ?? Array("null".utf8)
        let body = self.body.isEmpty ? Array("null".utf8) : self.body
        return Array("{\"id\":".utf8) + id + Array(",\"status\":\(status),\"body\":".utf8) + body + Array("}".utf8)
    }
}

private extension Character {
    var isASCIIControl: Bool { unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F } }
}
