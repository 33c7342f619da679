@testable import FieldHALServer
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The event stream written past SwiftNIO (`EventStreamSocket`), on a socket pair: the other
/// end is the client, which reads when the test says.
@Suite(.timeLimit(.minutes(1)))
struct EventStreamSocketTests {
    /// Both ends, the daemon's non-blocking as SwiftNIO leaves it, with small buffers so that
    /// a client that does not read fills them quickly.
    static func pair() throws -> (daemon: Int32, client: Int32) {
        var ends: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0)
        _ = fcntl(ends[0], F_SETFL, fcntl(ends[0], F_GETFL) | O_NONBLOCK)
        var size: Int32 = 4096
        setsockopt(ends[0], SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        setsockopt(ends[1], SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        return (ends[0], ends[1])
    }

    /// Everything the client can read within `wait`, until the daemon's end closes or nothing more comes.
    static func readAll(_ descriptor: Int32, wait: Int32 = 200) -> (bytes: [UInt8], closed: Bool) {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&entry, 1, wait) == 1 else { return (bytes, false) }
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count <= 0 { return (bytes, true) }
            bytes += buffer[0..<count]
        }
    }

    static func event(_ number: Int) -> String { "event: fix\ndata: {\"n\":\(number),\"pad\":\"\(String(repeating: "x", count: 200))\"}\n\n" }

    @Test func eachEventIsOneChunkAndTheEndIsTheLastChunk() throws {
        let (daemon, client) = try Self.pair()
        defer { close(client) }
        let stream = EventStreamSocket(descriptor: daemon)
        #expect(stream.send(": keep-alive\n\n"))
        #expect(stream.send(chunk: EventStreamSocket.chunk("event: fix\ndata: {}\n\n")))
        stream.end(cleanly: true)
        let (bytes, closed) = Self.readAll(client)
        #expect(closed, "the descriptor is closed at the end")
        #expect(String(decoding: bytes, as: UTF8.self) == "e\r\n: keep-alive\n\n\r\n15\r\nevent: fix\ndata: {}\n\n\r\n0\r\n\r\n")
        #expect(!stream.send("late"), "nothing is written after the end")
    }

    /// A client that stops reading never blocks the writer (the receiver's thread); what the
    /// kernel does not take waits, and goes out in order once the client reads again.
    @Test func whatTheClientDoesNotTakeWaitsAndGoesOutInOrder() async throws {
        let (daemon, client) = try Self.pair()
        defer { close(client) }
        let stream = EventStreamSocket(descriptor: daemon)
        let flushing = Task { await stream.flushWhenStalled(every: .milliseconds(5)) }
        defer { flushing.cancel() }
        let started = ContinuousClock.now
        for number in 0..<200 { #expect(stream.send(Self.event(number))) }
        #expect(ContinuousClock.now - started < .seconds(10), "200 writes to a client that reads nothing must not wait (a blocked write waits for ever)")
        // No new event: the flusher alone empties what waits, as the client reads.
        var text = ""
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline, !text.contains("\"n\":199,") {
            text += String(decoding: Self.readAll(client, wait: 50).bytes, as: UTF8.self)
        }
        let numbers = text.split(separator: "\"n\":").dropFirst().map { Int($0.prefix { $0.isNumber })! }
        #expect(numbers == Array(0..<200))
        #expect(!stream.hasEnded)
    }

    /// A client that leaves more than the limit unread is let go: the stream ends (the
    /// response's task is told) and the connection is closed.
    @Test func aClientThatReadsNothingIsLetGoAtTheLimit() async throws {
        let (daemon, client) = try Self.pair()
        defer { close(client) }
        let stream = EventStreamSocket(descriptor: daemon)
        let ending = Task { await stream.ended() }
        var sent = 0
        while stream.send(Self.event(sent)) {
            sent += 1
            try #require(sent < 10_000, "never let go")
        }
        await ending.value
        #expect(stream.hasEnded)
        // The client gets what was in the kernel, then the end: no last chunk (it was cut).
        let (bytes, closed) = Self.readAll(client)
        #expect(closed)
        #expect(!bytes.isEmpty)
        let offered = (0...sent).reduce(0) { $0 + EventStreamSocket.chunk(Self.event($1)).count }
        #expect(offered - bytes.count > EventStreamSocket.pendingLimit, "let go before the limit")
        #expect(offered - bytes.count - EventStreamSocket.chunk(Self.event(sent)).count <= EventStreamSocket.pendingLimit, "let go late")
        #expect(!String(decoding: bytes, as: UTF8.self).hasSuffix("0\r\n\r\n"))
    }

    /// A client that went away ends the stream at the next write.
    @Test func aClientGoneEndsTheStream() async throws {
        let (daemon, client) = try Self.pair()
        let stream = EventStreamSocket(descriptor: daemon)
        close(client)
        #expect(!stream.send(Self.event(0)))
        await stream.ended()
        #expect(stream.hasEnded)
    }
}
