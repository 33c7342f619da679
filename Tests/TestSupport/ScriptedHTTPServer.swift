import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// An HTTP server on 127.0.0.1 that answers each request as its script says, byte for byte:
/// a redirect elsewhere, a body larger than promised, a body that never ends. It records the
/// requests it was sent and the bytes it managed to write.
public final class ScriptedHTTPServer: @unchecked Sendable {
    /// What to write for a request (its head: request line and headers, and its body);
    /// `write` returns false once the client has gone.
    public typealias Script = @Sendable (_ head: String, _ body: Data, _ write: (Data) -> Bool) -> Void

    public let port: Int
    private let listening: Int32
    private let stopped = Atomic<Bool>(false)
    private let log = Mutex<(requests: [String], bodies: [Data], written: Int)>(([], [], 0))

    public var requests: [String] { log.withLock { $0.requests } }
    public var bodies: [Data] { log.withLock { $0.bodies } }
    /// Bytes written to clients so far (answers' heads and bodies).
    public var written: Int { log.withLock { $0.written } }
    public var baseURL: URL { URL(string: "http://127.0.0.1:\(port)")! }

    public init(_ script: @escaping Script) throws {
        let listening = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listening = listening
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listening, $0, length) == 0 && getsockname(listening, $0, &length) == 0 }
        }
        guard bound, listen(listening, 8) == 0 else {
            close(listening)
            throw POSIXError(.EADDRINUSE)
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread { [self] in
            while !stopped.load(ordering: .relaxed) {
                var wait = pollfd(fd: listening, events: Int16(POLLIN), revents: 0)
                guard poll(&wait, 1, 50) > 0 else { continue }
                let connection = accept(listening, nil, nil)
                guard connection >= 0 else { continue }
                Thread { [self] in serve(connection, script) }.start()
            }
            close(listening)
        }.start()
    }

    private func serve(_ connection: Int32, _ script: Script) {
        defer { close(connection) }
        var received = Data()
        var buffer = [UInt8](repeating: 0, count: 65536)
        // The head, then as much body as Content-Length says.
        while true {
            if let end = received.range(of: Data("\r\n\r\n".utf8)) {
                let head = String(decoding: received[..<end.lowerBound], as: UTF8.self)
                let length = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                    .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
                if received.count - end.upperBound >= length {
                    let body = received[end.upperBound..<(end.upperBound + length)]
                    log.withLock { $0.requests.append(head); $0.bodies.append(Data(body)) }
                    script(head, Data(body)) { bytes in
                        let sent = bytes.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                        guard sent == bytes.count else { return false }
                        log.withLock { $0.written += sent }
                        return !stopped.load(ordering: .relaxed)
                    }
                    return
                }
            }
            let count = read(connection, &buffer, buffer.count)
            guard count > 0 else { return }
            received.append(contentsOf: buffer[0..<count])
        }
    }

    public func stop() { stopped.store(true, ordering: .relaxed) }

    /// A whole answer: status line, headers, body.
    public static func answer(_ status: String, headers: [String: String] = [:], body: Data = Data()) -> Data {
        var head = "HTTP/1.1 \(status)\r\nConnection: close\r\nContent-Length: \(body.count)\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        return Data((head + "\r\n").utf8) + body
    }
}
