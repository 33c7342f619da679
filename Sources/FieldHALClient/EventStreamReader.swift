import FieldHAL
import FieldHALAPI
import FieldHALSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `GET /v1/events` read on a thread of its own with blocking calls: the socket, HTTP/1.1
/// (de-chunked), Server-Sent Events and the JSON decoding all happen where the bytes arrive,
/// and each event goes from there to the caller's task.
///
/// Why not the event loop the other calls use: every hop between threads costs a wake-up,
/// and a fix through the daemon is measured against the same fix in-process (issue 20). On
/// SwiftNIO an event woke the loop, then (when read on the pool) a task, then the caller's;
/// here it wakes this thread and the caller's task.
enum EventStreamReader {
    /// Reads `path`'s events from the daemon on `socketPath`, handing each to `deliver`, until
    /// the daemon ends the stream (returns), `stop` is stopped (returns), or it fails (throws
    /// the daemon's problem, or why the connection failed).
    static func read(socketPath: String, path: String, stop: StreamStop, deliver: (APIEvent) -> Void) throws {
        let subject = "GET \(path)"
        let descriptor = try DaemonConnection.connect(socketPath)
        guard stop.reading(descriptor) else {
            close(descriptor)
            return
        }
        defer {
            stop.closing()
            close(descriptor)
        }
        try DaemonConnection.send(Array("GET \(path) HTTP/1.1\r\nHost: fieldhal\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n".utf8),
                 to: descriptor, subject: subject)
        var response = HTTPResponseReader(subject: subject)
        var events = ServerSentEvents()
        let decoder = FieldHALAPI.decoder
        var failure: (status: Int, body: [UInt8])?
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            // Blocking in `recv`, not `poll` then `recv`: one system call an event fewer.
            // `stop` ends the wait by shutting the socket down (`recv` returns 0).
            let count: Int
            switch SystemCall.attempt({ chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) } }) {
            case .success(let got): count = got
            case .failure(let code):
                if stop.isStopped { return }
                throw DaemonConnection.ended(subject, errno: code.rawValue)
            }
            if count == 0, stop.isStopped { return }
            let parts = count == 0 ? try response.closed() : try response.feed(chunk[0..<count])
            for part in parts {
                switch part {
                case .head(let status, _) where status != 200:
                    failure = (status, [])
                case .head:
                    continue
                case .body(let bytes):
                    if var refused = failure {
                        // An error body is small; a hostile one is cut at 1 MiB.
                        refused.body += bytes.prefix(max(0, 1 << 20 - refused.body.count))
                        failure = refused
                        continue
                    }
                    for (kind, data) in try events.feed(bytes) {
                        do {
                            if let event = try APIEvent(kind: kind, data: Data(data), decoder: decoder) { deliver(event) }
                        } catch {
                            throw FieldHALError(.malformedData, subject: subject, detail: "a \(kind) event the client cannot read: \(error)",
                                                advice: "is the daemon the same FieldHAL version as this client?")
                        }
                    }
                case .end:
                    if let failure {
                        if let problem = try? FieldHALAPI.decoder.decode(APIErrorBody.self, from: Data(failure.body)) { throw problem.error }
                        throw FieldHALError(.protocolError, subject: subject, detail: "HTTP \(failure.status) without an error body")
                    }
                    return
                }
            }
            if count == 0 { return }
        }
    }
}

/// How a follower's blocked read is ended from another thread: its socket is shut down, and
/// `recv` returns 0 at once. The reading thread takes the same lock to give the descriptor
/// up before it closes it, so a number the system hands out again after the close is never
/// shut down.
final class StreamStop: Sendable {
    private let state = LockedValue<(descriptor: Int32?, stopped: Bool)>((nil, false))

    /// The reader's socket, once connected; false when `stop()` came first.
    func reading(_ descriptor: Int32) -> Bool {
        state.withLock { state in
            guard !state.stopped else { return false }
            state.descriptor = descriptor
            return true
        }
    }

    /// The reader is about to close its socket.
    func closing() {
        state.withLock { $0.descriptor = nil }
    }

    var isStopped: Bool { state.value.stopped }

    func stop() {
        state.withLock { state in
            state.stopped = true
            if let descriptor = state.descriptor { shutdown(descriptor, Int32(SHUT_RDWR)) }
        }
    }
}
