import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// Reading a file named by outside input (a configuration, a parameter) that must be a
/// regular file of bounded size: a device (`/dev/zero`), a FIFO or a growing file is
/// refused before it is read, rather than read until memory runs out or forever.
public enum RegularFile {
    /// The file's bytes, or nil when it does not exist. Throws `invalidArgument` for a file
    /// that is not regular or is larger than `limit`, `io` when it cannot be read.
    public static func read(_ path: String, limit: Int, what: String) throws(FieldHALError) -> [UInt8]? {
        // O_NONBLOCK: opening a FIFO with no writer must not wait; it is refused below.
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw SystemError.file(path, "open the \(what)")
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw SystemError.file(path, "inspect the \(what)") }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw FieldHALError(.invalidArgument, subject: path, detail: "the \(what) is not a regular file (a device, a pipe or a folder)",
                                advice: "name a regular file")
        }
        guard info.st_size <= limit else {
            throw FieldHALError(.invalidArgument, subject: path, detail: "the \(what) is \(info.st_size) bytes; at most \(limit) are read",
                                advice: "name a smaller file")
        }
        // A file that grows while it is read is cut at the limit, not followed.
        guard let bytes = try readToEnd(fd, path: path, operation: "read the \(what)", limit: limit) else {
            throw FieldHALError(.invalidArgument, subject: path, detail: "the \(what) grew past \(limit) bytes while it was read",
                                advice: "name a file that is not being written")
        }
        return bytes
    }

    /// Everything `fd` gives until its end, or nil as soon as more than `limit` bytes come.
    /// `operation` names the read in an error ("read the NMEA log").
    public static func readToEnd(_ fd: Int32, path: String, operation: String, limit: Int = .max) throws(FieldHALError) -> [UInt8]? {
        var result: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count: Int
            do {
                count = try buffer.withUnsafeMutableBytes { try FileDescriptor(rawValue: fd).read(into: $0) }
            } catch {
                throw SystemError.file(path, operation, code: (error as? Errno)?.rawValue ?? EIO)
            }
            if count == 0 { return result }
            guard result.count + count <= limit else { return nil }
            result += buffer[0..<count]
        }
    }
}
