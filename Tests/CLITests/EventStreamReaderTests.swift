import FieldHAL
import FieldHALAPI
@testable import FieldHALClient
import FieldHALSystem
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The event stream's blocking reader: its HTTP/1.1 parse fed split anywhere, bad answers,
/// and a scripted server on a Unix socket (the real daemon's stream is in `APITests`).
@Suite("Event stream reader: HTTP/1.1 as it arrives, and a server that misbehaves")
struct EventStreamReaderTests {
    static let chunked = Array("""
    HTTP/1.1 200 OK\r
    Content-Type: text/event-stream\r
    Transfer-Encoding: chunked\r
    \r
    5;name=value\r
    hello\r
    7\r
    , world\r
    0\r
    Trailer: x\r
    \r

    """.utf8)

    /// What the parts say, whatever the split: the head, the body's bytes joined, and ends.
    static func parse(_ bytes: [UInt8], splits: [Int]) throws -> (status: Int?, body: [UInt8], ends: Int) {
        var reader = HTTPResponseReader(subject: "test")
        var status: Int?
        var body: [UInt8] = []
        var ends = 0
        var from = 0
        for cut in splits + [bytes.count] where cut >= from {
            for part in try reader.feed(bytes[from..<cut]) {
                switch part {
                case .head(let code, _): status = code
                case .body(let piece): body += piece
                case .end: ends += 1
                }
            }
            from = cut
        }
        return (status, body, ends)
    }

    @Test func aChunkedAnswerReadsTheSameSplitAnywhere() throws {
        let whole = try Self.parse(Self.chunked, splits: [])
        #expect(whole.status == 200)
        #expect(String(decoding: whole.body, as: UTF8.self) == "hello, world")
        #expect(whole.ends == 1)
        for cut in 0...Self.chunked.count {
            let split = try Self.parse(Self.chunked, splits: [cut])
            #expect(split.status == whole.status && split.body == whole.body && split.ends == 1, "split at \(cut)")
        }
        let bytewise = try Self.parse(Self.chunked, splits: Array(0..<Self.chunked.count))
        #expect(bytewise.body == whole.body && bytewise.ends == 1)
    }

    @Test func lengthAndCloseDelimitedBodies() throws {
        let sized = try Self.parse(Array("HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnopeEXTRA".utf8), splits: [30])
        #expect(sized.status == 404 && String(decoding: sized.body, as: UTF8.self) == "nope" && sized.ends == 1)

        var reader = HTTPResponseReader(subject: "test")
        let parts = try reader.feed(Array("HTTP/1.0 200 OK\r\n\r\nuntil the close".utf8))
        #expect(parts.contains(.body(Array("until the close".utf8))))
        #expect(try reader.closed() == [.end])
    }

    @Test(arguments: [
        "HTTP/1.1 two hundred OK\r\n\r\n",
        "SMTP 220 hello\r\n\r\n",
        "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    ])
    func aMalformedAnswerIsAProtocolError(_ text: String) {
        var reader = HTTPResponseReader(subject: "test")
        #expect {
            _ = try reader.feed(Array(text.utf8))
        } throws: { ($0 as? FieldHALError)?.kind == .protocolError }
    }

    @Test func boundsHoldOnAHeadOrALineThatNeverEnds() {
        var head = HTTPResponseReader(subject: "test")
        #expect(throws: FieldHALError.self) { _ = try head.feed([UInt8](repeating: 65, count: HTTPResponseReader.headLimit + 1)) }
        var line = HTTPResponseReader(subject: "test")
        #expect(throws: FieldHALError.self) {
            _ = try line.feed(Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".utf8) + [UInt8](repeating: 49, count: HTTPResponseReader.lineLimit + 1))
        }
    }

    /// An event that never ends (no blank line, or a line with no end) is refused at the
    /// limit, not followed into memory.
    @Test func anEventThatNeverEndsIsRefused() throws {
        var endless = ServerSentEvents()
        _ = try endless.feed(Array("event: fix\ndata: ".utf8))
        #expect(throws: FieldHALError.self) {
            for _ in 0...(ServerSentEvents.eventLimit / 4096) { _ = try endless.feed([UInt8](repeating: 65, count: 4096)) }
        }
        var lines = ServerSentEvents()
        #expect(throws: FieldHALError.self) {
            for _ in 0...(ServerSentEvents.eventLimit / 4096) { _ = try lines.feed(Array("data: ".utf8) + [UInt8](repeating: 65, count: 4090) + [10]) }
        }
        var fine = ServerSentEvents()
        for _ in 0..<1000 { #expect(try fine.feed(Array(Self.fixEvent.utf8)).count == 1) }
    }

    @Test func aConnectionClosedMidChunkIsADisconnection() throws {
        var reader = HTTPResponseReader(subject: "test")
        _ = try reader.feed(Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nonly some".utf8))
        #expect { _ = try reader.closed() } throws: { ($0 as? FieldHALError)?.kind == .disconnected }
        var silent = HTTPResponseReader(subject: "test")
        #expect { _ = try silent.closed() } throws: { ($0 as? FieldHALError)?.kind == .disconnected }
    }

    // MARK: - Against a scripted server

    static let fixEvent = "event: fix\ndata: {\"latitude\":51.5,\"longitude\":-0.12,\"mode\":\"2d\",\"time\":\"2026-11-26T03:00:00.000Z\"}\n\n"

    static func chunk(_ text: String) -> [UInt8] { Array((String(text.utf8.count, radix: 16) + "\r\n" + text + "\r\n").utf8) }

    @Test func eventsSentAByteAtATimeArriveWhole() async throws {
        let head = Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)
        let script = head + Self.chunk(": keep-alive\n\n") + Self.chunk(Self.fixEvent) + Self.chunk(Self.fixEvent) + Array("0\r\n\r\n".utf8)
        let server = try ScriptedServer(script.map { [$0] })
        defer { server.stop() }
        var latitudes: [Double] = []
        for try await event in FieldHALClient(socketPath: server.path).events([.fix]) {
            if case .fix(let fix, _) = event { latitudes.append(fix.latitude ?? 0) }
        }
        #expect(latitudes == [51.5, 51.5], "the stream ends normally at the last chunk")
        #expect(server.request.value.hasPrefix("GET /v1/events?types=fix HTTP/1.1\r\n"))
    }

    @Test func aRefusalIsTheDaemonsProblem() async throws {
        let problem = APIErrorBody(error: APIProblem(kind: APIProblem.forbidden, subject: "GET /v1/events?types=fix", detail: "uid 1000 may not follow fixes", advice: "add it to [api] location", status: 403))
        let body = try FieldHALAPI.encoder.encode(problem)
        let server = try ScriptedServer([Array("HTTP/1.1 403 Forbidden\r\nContent-Length: \(body.count)\r\n\r\n".utf8) + Array(body)])
        defer { server.stop() }
        await #expect { for try await _ in FieldHALClient(socketPath: server.path).events([.fix]) {} } throws: {
            ($0 as? APIProblem) == problem.error
        }
    }

    @Test func aDaemonKilledMidStreamIsADisconnection() async throws {
        let head = Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)
        let server = try ScriptedServer([head + Self.chunk(Self.fixEvent) + Array("40\r\nevent: fi".utf8)])
        defer { server.stop() }
        var fixes = 0
        await #expect {
            for try await event in FieldHALClient(socketPath: server.path).events([.fix]) { if case .fix = event { fixes += 1 } }
        } throws: { ($0 as? FieldHALError)?.kind == .disconnected }
        #expect(fixes == 1)
    }

    @Test func noDaemonIsUnavailable() async throws {
        await #expect {
            for try await _ in FieldHALClient(socketPath: "/nonexistent/fieldhal-test.sock").events() {}
        } throws: { ($0 as? FieldHALError)?.kind == .unavailable }
    }

    /// A silent daemon: the caller's cancel ends the wait at once, and the thread with it.
    @Test func cancellingEndsTheWaitOnASilentDaemon() async throws {
        let server = try ScriptedServer([Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)], hold: true)
        defer { server.stop() }
        let follower = Task {
            for try await _ in FieldHALClient(socketPath: server.path).events() {}
        }
        try await Task.sleep(for: .milliseconds(200))
        let start = ContinuousClock.now
        follower.cancel()
        _ = await follower.result
        #expect(ContinuousClock.now - start < .seconds(10), "ended by the cancel; the daemon says nothing, ever")
        let deadline = ContinuousClock.now + .seconds(3)
        while !server.peerClosed.value, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(server.peerClosed.value, "the reader closed its connection")
    }
}

/// One connection on a Unix socket: reads the request, writes `writes` (a pause between
/// them), then closes, or holds the connection open until the peer closes it.
final class ScriptedServer: Sendable {
    let path: String
    let request = LockedValue("")
    let peerClosed = LockedValue(false)
    private let listener: Int32
    private let thread = DeviceThread(name: "scripted-server")

    init(_ writes: [[UInt8]], hold: Bool = false) throws {
        let path = NSTemporaryDirectory() + "fieldhal-scripted-\(UUID().uuidString.prefix(8)).sock"
        self.path = path
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
        }
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, Glibc.listen(listener, 1) == 0 else { throw FieldHALError(.io, subject: path, detail: "cannot listen") }
        self.listener = listener
        let request = request, peerClosed = peerClosed
        thread.submit {
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { return }
            defer { close(connection) }
            var received: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while !received.suffix(4).elementsEqual([13, 10, 13, 10]) {
                let count = buffer.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
                guard count > 0 else { return }
                received += buffer[0..<count]
            }
            request.withLock { $0 = String(decoding: received, as: UTF8.self) }
            for write in writes {
                _ = write.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if writes.count > 1 { usleep(200) }
            }
            if hold {
                // Until the client goes: recv returns 0 when it closes its end.
                while buffer.withUnsafeMutableBytes({ recv(connection, $0.baseAddress, $0.count, 0) }) > 0 {}
                peerClosed.withLock { $0 = true }
            }
        }
    }

    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        thread.stop()
        unlink(path)
    }
}
