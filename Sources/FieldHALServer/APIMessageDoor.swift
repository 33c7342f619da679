import FieldHAL
import FieldHALAPI
import Foundation
import Hummingbird
import HTTPTypes
import Logging
import NIOCore

/// API requests that arrive as messages rather than on a connection: the MQTT bridge's
/// command topic (`[mqtt] commands`, docs/fleet.md). Each is answered by the same routes as
/// the socket's and the web door's, as a caller known by its grant (the scopes `[mqtt]
/// commands` names), so a command is checked exactly as a request would be: its scope, its
/// device, its body, its parameters.
///
/// Only a small set of routes is open here: those that answer at once with a small JSON
/// object. Event streams, previews, photos and recordings answer with streams or bytes a
/// broker's message is not for; sign-in, the lock's PIN and the web door's tokens stay on the
/// kit's own doors.
public struct APIMessageDoor: Sendable {
    /// What a command is answered with: the route's status and its JSON body.
    public struct Answer: Sendable, Equatable {
        public var status: Int
        /// The answer's JSON (the API's error object for a refusal).
        public var body: [UInt8]
    }

    /// The routes a command may name, with their methods.
    public static let routes: [String: HTTPRequest.Method] = [
        "status": .get, "health": .get, "capabilities": .get, "devices": .get, "location": .get, "lock": .get, "alerts": .get,
        "evidence": .get, "biometrics": .get,
        "nfc/read": .post, "nfc/write": .post, "haptics/play": .post, "speaker/play": .post, "evidence/flush": .post,
    ].reduce(into: [:]) { $0["/\(FieldHALAPI.version)/\($1.key)"] = $1.value }

    /// An answer longer than this is refused (the broker's message stays small).
    public static let answerLimit = 64 * 1024

    private let responder: RouterResponder<APIRequestContext>
    private let grant: APIAuthorisation.Grant

    /// `scopes`: what the commands may do; `place` names the broker in refusals.
    public init(api: APIServer, scopes: Set<APIScope>, place: String) {
        responder = api.makeRouter(door: "mqtt").buildResponder()
        grant = APIAuthorisation.Grant(who: .broker(place: place), scopes: scopes, devices: nil)
    }

    /// The answer to `method target` with `body` (a JSON object, or nothing). Never throws:
    /// every failure is an answer, as a request's would be.
    public func answer(method: String, target: String, body: [UInt8]) async -> Answer {
        let path = String(target.prefix { $0 != "?" })
        guard let allowed = Self.routes[path] else {
            return Self.refusal(APIProblem(
                kind: APIProblem.forbidden, subject: "\(TerminalText.escaped(method)) \(TerminalText.escaped(path))",
                detail: "not a command the kit takes from the broker",
                advice: "the commands: " + Self.routes.map { "\($1.rawValue) \($0)" }.sorted().joined(separator: ", "), status: 403))
        }
        guard method == allowed.rawValue else {
            return Self.refusal(APIProblem(
                kind: FieldHALError.Kind.invalidArgument.rawValue, subject: "\(TerminalText.escaped(method)) \(path)",
                detail: "\(path) takes \(allowed.rawValue)", advice: "send it as \(allowed.rawValue) \(path)", status: 405))
        }
        var head = HTTPRequest(method: allowed, scheme: nil, authority: "mqtt", path: target)
        if !body.isEmpty { head.headerFields[.contentType] = "application/json" }
        let request = Request(head: head, body: RequestBody(buffer: ByteBuffer(bytes: body)))
        // No connection: no hang-up cancels it, so a command's read or play runs to its own
        // timeout, as a request on a connection kept open does.
        let context = APIRequestContext(message: grant, logger: Self.quiet)
        do {
            let response = try await responder.respond(to: request, context: context)
            let collected = Collected()
            try await response.body.write(collected)
            guard collected.bytes.count <= Self.answerLimit else {
                return Self.refusal(APIProblem(
                    kind: FieldHALError.Kind.invalidArgument.rawValue, subject: "\(method) \(path)",
                    detail: "its answer is longer than \(Self.answerLimit / 1024) KiB", advice: "ask for less, or over the kit's own API", status: 413))
            }
            return Answer(status: Int(response.status.code), body: collected.bytes)
        } catch let problem as APIProblem {
            return Self.refusal(problem)
        } catch {
            return Self.refusal(APIProblem(kind: FieldHALError.Kind.io.rawValue, subject: "\(method) \(path)", detail: "\(error)", advice: "", status: 500))
        }
    }

    private static func refusal(_ problem: APIProblem) -> Answer {
        Answer(status: problem.status, body: (try? Array(FieldHALAPI.encoder.encode(APIErrorBody(error: problem)))) ?? Array("{}".utf8))
    }

    private static let quiet: Logger = {
        var logger = Logger(label: "fieldhal.mqtt.commands")
        logger.logLevel = .critical
        return logger
    }()

    /// The answer's bytes, as the route writes them.
    private final class Collected: ResponseBodyWriter, @unchecked Sendable {
        var bytes: [UInt8] = []
        func write(_ buffer: ByteBuffer) async throws {
            guard bytes.count <= APIMessageDoor.answerLimit else { return }
            bytes += buffer.readableBytesView
        }
        func finish(_ trailingHeaders: HTTPFields?) async throws {}
    }
}
