import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A script a test writes and then runs (a fixture plugin's `run`).
///
/// Written through a descriptor opened close-on-exec: Foundation's atomic write goes through
/// a temporary file whose descriptor is inherited by any process another test spawns at that
/// moment, and a long-lived child (a fixture plugin) would keep it open for writing, so that
/// running the script fails with ETXTBSY ("Text file busy"). With O_CLOEXEC a concurrent
/// spawn holds it only until its exec.
public enum ExecutableFile {
    public static func write(_ text: String, to path: String, mode: mode_t = 0o755) throws {
        let temporary = path + ".writing"
        unlink(temporary)
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard descriptor >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
        let failed = written != bytes.count || fchmod(descriptor, mode) != 0
        let code = errno
        close(descriptor)
        guard !failed, rename(temporary, path) == 0 else {
            unlink(temporary)
            throw POSIXError(POSIXErrorCode(rawValue: failed ? code : errno) ?? .EIO)
        }
    }
}
