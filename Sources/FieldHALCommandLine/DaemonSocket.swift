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
        guard let connection = Connection(path: path) else { return nil }
        defer { connection.close() }
        let target = FieldHALAPI.route(name, query: query)
        let subject = "\(method) \(target)"
        let deadline = ContinuousClock.now + waiting + slack
        var request = "\(method) \(target) HTTP/1.1\r\nHost: fieldhal\r\nConnection: close\r\n"
        if let body { request += "Content-Type: application/json\r\nContent-Length: \(body.count)\r\n" }
        var bytes = Array((request + "\r\n").utf8)
        if let body { bytes += body }
        try connection.send(bytes, subject: subject)
        let answer = try connection.receiveAll(until: deadline, subject: subject)
        let response = try HTTPResponse(answer, subject: subject)
        guard response.status == 200 else {
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

/// A connected stream socket, closed by its owner.
private struct Connection {
    let descriptor: Int32

    /// Nil when nobody accepts on `path` (no daemon, a daemon killed with SIGKILL, or a
    /// socket this user may not connect to: the caller then does the work itself).
    init?(path: String) {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard path.utf8.count < capacity else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.utf8)
            raw[path.utf8.count] = 0
        }
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else {
            Glibc.close(descriptor)
            return nil
        }
        self.descriptor = descriptor
    }

    func close() { Glibc.close(descriptor) }

    func send(_ bytes: [UInt8], subject: String) throws {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent < 0 {
                if errno == EINTR { continue }
                throw FieldHALError(.disconnected, subject: subject, detail: "the daemon closed the connection (\(SystemError.describe()))")
            }
            offset += sent
        }
    }

    /// Everything the daemon sends until it closes the connection (it answers with
    /// `Connection: close`), or a timeout at `deadline`.
    func receiveAll(until deadline: ContinuousClock.Instant, subject: String) throws -> [UInt8] {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else {
                throw FieldHALError(.timeout, subject: subject, detail: "no whole answer from the daemon in time")
            }
            var wait = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            let ready = poll(&wait, 1, Int32(clamping: max(1, FieldHALAPI.milliseconds(left))))
            if ready < 0 {
                if errno == EINTR { continue }
                throw SystemError.io("poll", subject: subject)
            }
            if ready == 0 { continue }
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count < 0 {
                if errno == EINTR { continue }
                throw FieldHALError(.disconnected, subject: subject, detail: "the daemon closed the connection (\(SystemError.describe()))")
            }
            if count == 0 { return received }
            received += buffer[0..<count]
        }
    }
}

/// An HTTP/1.1 answer read whole: its status and its body (de-chunked).
struct HTTPResponse {
    let status: Int
    let body: Data

    init(_ bytes: [UInt8], subject: String) throws {
        guard !bytes.isEmpty else {
            throw FieldHALError(.protocolError, subject: subject, detail: "the daemon closed the connection without an answer")
        }
        let malformed = FieldHALError(.protocolError, subject: subject, detail: "the daemon's answer is not HTTP/1.1")
        guard let headEnd = Self.find([13, 10, 13, 10], in: bytes, from: 0) else { throw malformed }
        let lines = String(decoding: bytes[0..<headEnd], as: UTF8.self).split(separator: "\r\n", omittingEmptySubsequences: false)
        let statusLine = lines.first?.split(separator: " ") ?? []
        guard statusLine.count >= 2, statusLine[0].hasPrefix("HTTP/1."), let status = Int(statusLine[1]) else { throw malformed }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        var body = Array(bytes[(headEnd + 4)...])
        if headers["transfer-encoding"]?.lowercased() == "chunked" {
            body = try Self.dechunk(body, malformed: malformed)
        } else if let length = headers["content-length"].flatMap({ Int($0) }) {
            guard body.count >= length else {
                throw FieldHALError(.disconnected, subject: subject, detail: "the daemon's answer ended after \(body.count) of \(length) bytes")
            }
            body = Array(body[0..<length])
        }
        self.status = status
        self.body = Data(body)
    }

    private static func dechunk(_ bytes: [UInt8], malformed: FieldHALError) throws -> [UInt8] {
        var result: [UInt8] = []
        var position = 0
        while true {
            guard let lineEnd = find([13, 10], in: bytes, from: position) else { throw malformed }
            let sizeText = String(decoding: bytes[position..<lineEnd], as: UTF8.self).split(separator: ";").first ?? ""
            guard let size = Int(sizeText.trimmingCharacters(in: .whitespaces), radix: 16), size >= 0 else { throw malformed }
            position = lineEnd + 2
            if size == 0 { return result }
            guard position + size + 2 <= bytes.count else { throw malformed }
            result += bytes[position..<(position + size)]
            position += size + 2
        }
    }

    private static func find(_ needle: [UInt8], in bytes: [UInt8], from start: Int) -> Int? {
        guard bytes.count >= needle.count, start <= bytes.count - needle.count else { return nil }
        for index in start...(bytes.count - needle.count) where bytes[index] == needle[0] {
            if Array(bytes[index..<(index + needle.count)]) == needle { return index }
        }
        return nil
    }
}
