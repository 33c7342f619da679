import FieldHAL
import FieldHALSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The daemon's Unix socket, spoken to with blocking calls: what every client of the API
/// uses — the Swift client's calls (each on a thread of its own), its event streams, and
/// the front's one call — so that there is one way to connect, send and read an answer
/// (`HTTPResponseReader`). Never on the cooperative pool: every wait blocks its thread.
public enum DaemonConnection {
    /// One request, blocking: connects, sends `request`, and hands each part of the answer to
    /// `deliver` as it is read, until the answer ends, `deadline` passes (`timeout`), or
    /// `stop` is signalled (returns early). A socket nobody accepts on is `unavailable` with
    /// the socket's path as its subject.
    public static func exchange(socketPath: String, request: [UInt8], subject: String, deadline: ContinuousClock.Instant?,
                                stop: WakeupEvent?, deliver: (HTTPResponseReader.Part) -> Void) throws {
        let descriptor = try connect(socketPath)
        defer { close(descriptor) }
        try send(request, to: descriptor, subject: subject)
        var reader = HTTPResponseReader(subject: subject)
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while !reader.isDone {
            let wait = deadline.map { ContinuousClock.now.duration(to: $0) }
            if let wait, wait <= .zero {
                throw FieldHALError(.timeout, subject: subject, detail: "no whole answer from the daemon in time")
            }
            var entries = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0),
                           pollfd(fd: stop?.fileDescriptor ?? -1, events: Int16(POLLIN), revents: 0)]
            let ready = try SystemCall.poll(&entries, timeout: wait, subject: subject)
            if entries[1].revents != 0 { return }  // the caller stopped listening
            if ready == 0 { continue }  // the deadline, checked above
            let count: Int
            switch SystemCall.attempt({ chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) } }) {
            case .success(let got): count = got
            case .failure(.resourceTemporarilyUnavailable): continue
            case .failure(let code): throw ended(subject, errno: code.rawValue)
            }
            for part in count == 0 ? try reader.closed() : try reader.feed(chunk[0..<count]) { deliver(part) }
        }
    }

    public static func connect(_ socketPath: String) throws -> Int32 {
        func unavailable(_ why: String) -> FieldHALError {
            FieldHALError(.unavailable, subject: socketPath, detail: "no daemon answers here (\(why))",
                          advice: "start it (systemctl start fieldhal, or fieldhal run) or give its [api] socket")
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(socketPath.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { throw unavailable("the path is too long for a socket") }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
        }
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw unavailable("socket: \(SystemError.describe())") }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else {
            let why = SystemError.describe()
            close(descriptor)
            throw unavailable(why)
        }
        return descriptor
    }

    /// The daemon hung up (or the connection broke) in the middle of a call.
    public static func ended(_ subject: String, errno code: Int32) -> FieldHALError {
        FieldHALError(.disconnected, subject: subject, detail: "the daemon ended the connection mid-call (\(SystemError.describe(code)))",
                      advice: "is the daemon stopping or restarting? (journalctl -u fieldhal)")
    }

    public static func send(_ bytes: [UInt8], to descriptor: Int32, subject: String) throws {
        var sent = 0
        while sent < bytes.count {
            switch SystemCall.attempt({ bytes[sent...].withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } }) {
            case .success(let count): sent += count
            case .failure(let code): throw ended(subject, errno: code.rawValue)
            }
        }
    }
}
