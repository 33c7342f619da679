import FieldHAL
import FieldHALSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// One daemon per state directory: an exclusive `flock` on `daemon.lock` inside it, held for
/// the daemon's life and let go by the kernel however it ends (SIGKILL included).
///
/// Why on the state directory and not the socket: two daemons with sockets of their own
/// both ran the evidence queue of one kit, and uploaded the same evidence twice.
public final class DaemonLock: Sendable {
    public static let fileName = "daemon.lock"
    private let fd: Int32

    /// Takes the lock, writing this pid into the file; throws `busy` naming the pid of the
    /// daemon that holds it.
    public init(_ state: StateDirectory) throws(FieldHALError) {
        do { try state.prepare() } catch let error as FieldHALError { throw error } catch {
            throw FieldHALError(.io, subject: state.path, detail: "\(error)")
        }
        let path = state.path + "/" + Self.fileName
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0o600)
        guard fd >= 0 else { throw SystemError.io("open the daemon lock", subject: path) }
        if case .failure(let failure) = SystemCall.attempt({ flock(fd, LOCK_EX | LOCK_NB) }) {
            let code = failure.rawValue
            var bytes = [UInt8](repeating: 0, count: 32)
            let count = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 31, 0) }
            close(fd)
            guard code == EWOULDBLOCK else { throw SystemError.io("lock", subject: path, code: code) }
            let holder = count > 0 ? String(decoding: bytes.prefix(count), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines) : "?"
            throw FieldHALError(.busy, subject: state.path, detail: "another daemon (pid \(holder)) runs on this state directory",
                                advice: "stop it (systemctl stop fieldhal) or give this one another --state-dir")
        }
        let text = Array(Self.record(pid: getpid()).utf8)
        _ = ftruncate(fd, 0)
        _ = text.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        self.fd = fd
    }

    /// The pid as the file holds it: right-aligned in 10 columns, so the file is 11 bytes
    /// whatever the pid. Its size is in every listing of the state directory, and a size
    /// that changes with the pid's digits is a difference between two runs (a normal and a
    /// duress sign-in) that the stealth checks cannot tell from a real one.
    static func record(pid: Int32) -> String {
        let digits = String(pid)
        return String(repeating: " ", count: max(0, 10 - digits.count)) + digits + "\n"
    }

    deinit { close(fd) }
}
