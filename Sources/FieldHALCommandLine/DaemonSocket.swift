import FieldHAL
import FieldHALAPI
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// One call to the daemon's API over its Unix socket, with blocking system calls and no
/// event loop: what a short-lived command needs, and all it can afford at start (SwiftNIO's
/// threads and the loader's work for them cost more than the call). The same requests and
/// the same errors as `FieldHALClient`, whose calls the whole CLI makes.
///
/// Used on the main thread of `fieldhal-front` only: nothing here may run on the
/// cooperative pool, since every wait blocks its thread (bounded by `poll`).
public struct DaemonSocket: Sendable {
    public let path: String
    /// How long a call may take beyond the wait it asks for (connect, the answer's transfer).
    public var slack: Duration = .seconds(10)

    public init(path: String) {
        self.path = path
    }

    /// The daemon's answer to `method path` (body: JSON), or nil when no daemon answers on the
    /// socket (none there, or nobody accepting: the caller does the work itself, as the CLI
    /// does). A socket in a directory this user may not search is an error, as in the CLI.
    public func call(_ method: String, _ name: String, query: [(String, String)] = [], body: Data? = nil,
                     waiting: Duration = .zero) throws -> Data? {
        guard try Self.exists(path) else { return nil }
        let target = FieldHALAPI.route(name, query: query)
        let subject = "\(method) \(target)"
        let deadline = ContinuousClock.now + waiting + slack
        var request = "\(method) \(target) HTTP/1.1\r\nHost: fieldhal\r\nConnection: close\r\n"
        if let body { request += "Content-Type: application/json\r\nContent-Length: \(body.count)\r\n" }
        var bytes = Array((request + "\r\n").utf8)
        if let body { bytes += body }
        var parts: [HTTPResponseReader.Part] = []
        do {
            try DaemonConnection.exchange(socketPath: path, request: bytes, subject: subject, deadline: deadline, stop: nil) { parts.append($0) }
        } catch let error as FieldHALError where error.kind == .unavailable && error.subject == path {
            return nil  // nobody accepts there (no daemon, or one killed with SIGKILL): the caller does the work
        }
        let response = try HTTPResponse(parts, subject: subject)
        guard (200...299).contains(response.status) else {
            if let problem = try? FieldHALAPI.decoder.decode(APIErrorBody.self, from: response.body) { throw problem.error }
            throw FieldHALError(.protocolError, subject: subject, detail: "HTTP \(response.status) without an error body")
        }
        return response.body
    }

    /// Whether a socket file is at `path` (false: no daemon). One in a directory this user
    /// may not search is there, not absent: an error, for both command-line programs.
    public static func exists(_ path: String) throws -> Bool {
        var info = stat()
        guard stat(path, &info) == 0 else {
            if errno == EACCES {
                throw FieldHALError(.permissionDenied, subject: path, detail: "this user may not reach the daemon's socket",
                                    advice: "ask for the socket's directory to be searchable, or use fieldhal as a member of fieldhal-control")
            }
            return false
        }
        return true
    }

    /// `call`, decoded as the API's `T`.
    public func call<T: Decodable>(_ method: String, _ name: String, query: [(String, String)] = [], body: (some Encodable)? = nil as String?,
                                   waiting: Duration = .zero, as type: T.Type) throws -> T? {
        let encoded = try body.map { try FieldHALAPI.encoder.encode($0) }
        guard let data = try call(method, name, query: query, body: encoded, waiting: waiting) else { return nil }
        do {
            return try FieldHALAPI.decoder.decode(T.self, from: data)
        } catch {
            throw FieldHALError(.malformedData, subject: "\(method) \(FieldHALAPI.route(name, query: query))",
                                detail: "the daemon's answer is not a \(T.self): \(error)",
                                advice: "is the daemon the same FieldHAL version as this client?")
        }
    }
}

/// An HTTP/1.1 answer read whole: its status and its body (de-chunked), by the same reader
/// the event stream uses (`HTTPResponseReader`).
struct HTTPResponse {
    let status: Int
    let body: Data

    init(_ parts: [HTTPResponseReader.Part], subject: String) throws {
        var status: Int?
        var body: [UInt8] = []
        for part in parts {
            switch part {
            case .head(let code, _): status = code
            case .body(let bytes): body += bytes
            case .end: break
            }
        }
        guard let status else {
            throw FieldHALError(.protocolError, subject: subject, detail: "the daemon's answer is not HTTP/1.1")
        }
        self.status = status
        self.body = Data(body)
    }
}
