import FieldHAL
import Foundation
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
        var template = Array((NSTemporaryDirectory() + prefix + "-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else {
            throw SystemError.io("cannot make a scratch directory", subject: NSTemporaryDirectory())
        }
        return String(cString: made)
    }
}
