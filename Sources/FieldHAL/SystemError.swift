#if canImport(Glibc)
import Glibc
#endif

/// A failed system call in FieldHAL's words: the call's name and the C library's text for
/// its errno, in one place (there were 48 hand-written `strerror` copies).
public enum SystemError {
    /// What `code` (default: this thread's `errno`, read at the call) means, as `strerror`
    /// words it.
    public static func describe(_ code: Int32 = errno) -> String {
        String(cString: strerror(code))
    }

    /// The typed error for a failed call on `subject`: kind `io`, detail "`call`: text".
    public static func io(_ call: String, subject: String, code: Int32 = errno, advice: String? = nil) -> FieldHALError {
        FieldHALError(.io, subject: subject, detail: "\(call): \(describe(code))", advice: advice)
    }

    /// A failed call on a file (`operation`: "open", "rename into place"), with the advice a
    /// technician can act on for the usual errnos.
    public static func file(_ path: String, _ operation: String, code: Int32 = errno) -> FieldHALError {
        let advice: String? = switch code {
        case EACCES, EPERM: "check the owner and mode of the directory, or run as the fieldhal user"
        case ENOSPC, EDQUOT: "free some disk space"
        case EROFS: "the file system is read-only; use a state directory on a writable one"
        case ENOENT: "create the directory, or use another state directory"
        default: nil
        }
        return FieldHALError(.io, subject: path, detail: "\(operation): \(describe(code))", advice: advice)
    }
}
