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
    /// the daemon ends the stream (returns), `stop` is signalled (returns), or it fails (throws
    /// the daemon's problem, or why the connection failed).
    static func read(socketPath: String, path: String, stop: WakeupEvent, deliver: (APIEvent) -> Void) throws {
        let subject = "GET \(path)"
        let descriptor = try DaemonConnection.connect(socketPath)
        defer { close(descriptor) }
        try DaemonConnection.send(Array("GET \(path) HTTP/1.1\r\nHost: fieldhal\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n".utf8),
                 to: descriptor, subject: subject)
        var response = HTTPResponseReader(subject: subject)
        var events = ServerSentEvents()
        let decoder = FieldHALAPI.decoder
        var failure: (status: Int, body: [UInt8])?
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            var entries = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0),
                           pollfd(fd: stop.fileDescriptor, events: Int16(POLLIN), revents: 0)]
            try SystemCall.poll(&entries, timeout: nil, subject: subject)
            if entries[1].revents != 0 { return }
            let count: Int
            switch SystemCall.attempt({ chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) } }) {
            case .success(let got): count = got
            case .failure(.resourceTemporarilyUnavailable): continue
            case .failure(let code): throw DaemonConnection.ended(subject, errno: code.rawValue)
            }
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
