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
}
