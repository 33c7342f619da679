import FieldHAL
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// The one seam between FieldHAL and the C library's system calls (issue 42): a call that
/// an interruption (EINTR) cuts short is made again, and a failure becomes one typed error
/// that keeps the call's name and the errno's words (swift-system's `Errno`), instead of an
/// EINTR loop and a `strerror` written out at every call site.
public enum SystemCall {
    /// Makes `body` — a C call that returns -1 and sets `errno` on failure — until it is not
    /// interrupted. A failure throws `FieldHALError` kind `io`: "`call`: the errno's words".
    @discardableResult
    public static func retrying<T: FixedWidthInteger>(_ call: String, subject: String, advice: String? = nil,
                                                      _ body: () -> T) throws(FieldHALError) -> T {
        while true {
            let result = body()
            if result != -1 { return result }
            let code = Errno(rawValue: errno)
            if code == .interrupted { continue }
            throw error(call, subject: subject, code: code, advice: advice)
        }
    }

    /// Like `retrying`, for a call on a file: the error names the file and carries the advice
    /// a technician can act on for the usual errnos (`SystemError.file`).
    @discardableResult
    public static func retrying<T: FixedWidthInteger>(_ operation: String, file path: String, _ body: () -> T) throws(FieldHALError) -> T {
        switch attempt(body) {
        case .success(let result): return result
        case .failure(let code): throw SystemError.file(path, operation, code: code.rawValue)
        }
    }

    /// `body` made until it is not interrupted, and its errno when it failed otherwise: for a
    /// caller that answers some errnos itself (`EWOULDBLOCK` from a lock another holds).
    public static func attempt<T: FixedWidthInteger>(_ body: () -> T) -> Result<T, Errno> {
        while true {
            let result = body()
            if result != -1 { return .success(result) }
            let code = Errno(rawValue: errno)
            if code != .interrupted { return .failure(code) }
        }
    }

    /// All of `bytes` written to `descriptor` (swift-system's `writeAll`: short writes and
    /// interruptions carried on), or the typed error naming `operation` on `path`.
    public static func writeAll(_ bytes: UnsafeRawBufferPointer, to descriptor: Int32, _ operation: String = "write",
                                file path: String) throws(FieldHALError) {
        do {
            _ = try FileDescriptor(rawValue: descriptor).writeAll(bytes)
        } catch let code as Errno {
            throw SystemError.file(path, operation, code: code.rawValue)
        } catch {
            throw FieldHALError(.io, subject: path, detail: "\(operation): \(error)")
        }
    }

    /// The typed error for `call` failing on `subject` with `code` (default: this thread's
    /// `errno`, read now).
    public static func error(_ call: String, subject: String, code: Errno = Errno(rawValue: errno), advice: String? = nil) -> FieldHALError {
        FieldHALError(.io, subject: subject, detail: "\(call): \(code.description)", advice: advice)
    }

    /// `poll(2)` on `entries` for at most `timeout` (nil: until one is ready), the time left
    /// worked out again after an interruption, so a signal neither ends the wait early nor
    /// makes it longer. Returns how many entries are ready (their `revents` set); 0 when the
    /// time ran out.
    @discardableResult
    public static func poll(_ entries: inout [pollfd], timeout: Duration?, subject: String) throws(FieldHALError) -> Int {
        switch poll(&entries, timeout: timeout) {
        case .success(let ready): return ready
        case .failure(let code): throw error("poll", subject: subject, code: code)
        }
    }

    /// `poll(2)` as above, its errno returned rather than thrown: for a backend that words
    /// the failure in its device's terms.
    public static func poll(_ entries: inout [pollfd], timeout: Duration?) -> Result<Int, Errno> {
        let deadline = timeout.map { ContinuousClock.now + $0 }
        while true {
            let wait = deadline.map { max(.zero, ContinuousClock.now.duration(to: $0)).pollTimeout } ?? -1
            let ready = entries.withUnsafeMutableBufferPointer { Glibc.poll($0.baseAddress, nfds_t($0.count), wait) }
            if ready >= 0 { return .success(Int(ready)) }
            let code = Errno(rawValue: errno)
            if code != .interrupted { return .failure(code) }
        }
    }
}
