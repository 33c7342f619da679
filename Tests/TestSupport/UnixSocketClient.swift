import FieldHAL
#if canImport(Glibc)
import Glibc
#endif

/// A blocking client connection to a Unix socket, for tests that write raw HTTP to the
/// daemon's socket and read what comes back byte by byte.
public enum UnixSocketClient {
    /// A connected, close-on-exec stream socket to `path`; the caller closes it.
    public static func connect(_ path: String) throws -> Int32 {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else {
            close(descriptor)
            throw FieldHALError(.unavailable, subject: path, detail: "cannot connect")
        }
        return descriptor
    }

    /// What `descriptor` brings until `done` says it is enough, the peer closes, or `within`
    /// has passed (blocking: call it off the pool).
    public static func read(_ descriptor: Int32, within: Duration, until done: (String) -> Bool) -> String {
        var text = ""
        var buffer = [UInt8](repeating: 0, count: 4096)
        let deadline = ContinuousClock.now + within
        while !done(text), ContinuousClock.now < deadline {
            var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&entry, 1, 200) == 1 else { continue }
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count <= 0 { break }
            text += String(decoding: buffer[0..<count], as: UTF8.self)
        }
        return text
    }
}
