import FieldHAL
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// A fresh private directory for a command's scratch work (the demo, the benchmarks).
/// Why `mkdtemp` and not a name made from the pid: a predictable name in /tmp can be made
/// first by another user, as a directory they own or a symlink to one, and the command would
/// then write its keys and evidence where that user reads them.
public enum ScratchDirectory {
    /// Makes `$TMPDIR/<prefix>-XXXXXX`, mode 0700, owned by this user.
    public static func make(_ prefix: String) throws -> String {
        var template = Array((temporaryDirectory + prefix + "-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else {
            throw SystemError.io("cannot make a scratch directory", subject: temporaryDirectory)
        }
        return String(cString: made)
    }

    /// `$TMPDIR` with a slash at its end, or `/tmp/`: where `NSTemporaryDirectory` looks.
    public static var temporaryDirectory: String {
        guard let value = getenv("TMPDIR").map({ String(cString: $0) }), !value.isEmpty else { return "/tmp/" }
        return value.hasSuffix("/") ? value : value + "/"
    }
}
