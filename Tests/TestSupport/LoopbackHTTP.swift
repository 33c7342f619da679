import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// One HTTP/1.1 exchange over TCP on loopback, the way a browser's request reaches the web
/// door (blocking, off the pool): the head exactly as given, `Connection: close`, the answer
/// read to its end.
public enum LoopbackHTTP {
    public struct Answer: Sendable {
        public var status: Int
        /// Lowercased names.
        public var headers: [String: String]
        public var body: String
    }

    /// A port nobody listens on now (the kernel's choice).
    public static func freePort() throws -> Int {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(descriptor, pointer, length) == 0 && getsockname(descriptor, pointer, &length) == 0
            }
        }
        guard bound else { throw POSIXError(.EADDRINUSE) }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// `method path` to `127.0.0.1:port` with `headers` (a `Host` of the door's own unless
    /// one is given) and `body`; the answer, or nil when the connection was refused.
    public static func exchange(port: Int, _ method: String, _ path: String, headers: [String: String] = [:], body: String? = nil,
                                timeout: Duration = .seconds(30)) async throws -> Answer? {
        try await offPool {
            guard let descriptor = connected(port: port) else { return nil }
            defer { close(descriptor) }
            var head = "\(method) \(path) HTTP/1.1\r\n"
            var all = headers
            if all.keys.first(where: { $0.lowercased() == "host" }) == nil { all["Host"] = "127.0.0.1:\(port)" }
            all["Connection"] = "close"
            if let body { all["Content-Length"] = "\(body.utf8.count)" }
            for (name, value) in all.sorted(by: { $0.key < $1.key }) { head += "\(name): \(value)\r\n" }
            let request = Array((head + "\r\n" + (body ?? "")).utf8)
            _ = request.withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            var received: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 16_384)
            let deadline = ContinuousClock.now + timeout
            while ContinuousClock.now < deadline {
                var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
                guard poll(&entry, 1, 200) == 1 else { continue }
                let count = recv(descriptor, &buffer, buffer.count, 0)
                if count <= 0 { break }
                received += buffer[0..<count]
            }
            let text = String(decoding: received, as: UTF8.self)
            guard let split = text.range(of: "\r\n\r\n") else { return Answer(status: 0, headers: [:], body: text) }
            let lines = text[..<split.lowerBound].components(separatedBy: "\r\n")
            let status = Int(lines.first?.split(separator: " ").dropFirst().first ?? "") ?? 0
            var fields: [String: String] = [:]
            for line in lines.dropFirst() {
                guard let colon = line.firstIndex(of: ":") else { continue }
                fields[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
            var body = String(text[split.upperBound...])
            if fields["transfer-encoding"] == "chunked" { body = dechunked(body) }
            return Answer(status: status, headers: fields, body: body)
        }
    }

    /// A TCP connection to `127.0.0.1:port`, or nil when it was refused.
    static func connected(port: Int) -> Int32? {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let status = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard status == 0 else {
            close(descriptor)
            return nil
        }
        return descriptor
    }

    static func dechunked(_ text: String) -> String {
        var rest = Substring(text), out = ""
        while let line = rest.range(of: "\r\n"), let size = Int(rest[..<line.lowerBound], radix: 16), size > 0 {
            let start = line.upperBound
            let end = rest.utf8.index(start, offsetBy: size, limitedBy: rest.endIndex) ?? rest.endIndex
            out += rest[start..<end]
            rest = rest[end...].dropFirst(2)
        }
        return out
    }
}

extension LoopbackHTTP {
    /// A request whose answer is read as it comes (an event stream): what has come so far,
    /// until a text is in it or the connection ends.
    public final class Following: @unchecked Sendable {
        private let descriptor: Int32
        public private(set) var received = ""

        public init(port: Int, _ path: String, headers: [String: String]) throws {
            guard let descriptor = LoopbackHTTP.connected(port: port) else { throw POSIXError(.ECONNREFUSED) }
            self.descriptor = descriptor
            var head = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n"
            for (name, value) in headers.sorted(by: { $0.key < $1.key }) { head += "\(name): \(value)\r\n" }
            let request = Array((head + "\r\n").utf8)
            _ = request.withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }

        deinit { close(descriptor) }

        /// Reads until `text` has come (true), the connection ended (false), or `timeout`.
        public func read(until text: String?, timeout: Duration = .seconds(30)) async throws -> Bool {
            try await offPool { [self] in
                var buffer = [UInt8](repeating: 0, count: 16_384)
                let deadline = ContinuousClock.now + timeout
                while ContinuousClock.now < deadline {
                    if let text, received.contains(text) { return true }
                    var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
                    guard poll(&entry, 1, 200) == 1 else { continue }
                    let count = recv(descriptor, &buffer, buffer.count, 0)
                    if count <= 0 { return false }
                    received += String(decoding: buffer[0..<count], as: UTF8.self)
                }
                return false
            }
        }
    }
}
