import FieldHAL
import FieldHALLogind
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The update lock (issue 46): a file beside the API's socket (`/run/fieldhal/update.lock`
/// under the unit) that the daemon holds shared while a kit's evidence may be in the
/// making, and that an updater takes exclusively before it reboots the kit
/// (`flock --exclusive /run/fieldhal/update.lock systemctl reboot`), so that an update
/// waits rather than cutting a capture short.
///
/// It is held for the same window after every sign-in and every unlock while signed in,
/// NORMAL or DURESS (`background_run_s`, the detached run's lifetime): a lock held only
/// while a duress capture runs would tell anyone who tried it, and an updater's log, what
/// the PIN was (docs/stealth.md). Evidence that outlasts the window is not lost to a
/// reboot: the queue is on disk and resumes.
final class UpdateLock: Sendable {
    let path: String
    /// logind's shutdown inhibitor, taken and let go with the lock (nil: no system bus).
    let inhibitor: ShutdownInhibitor?
    private let descriptor: Int32
    /// Windows open now; the lock is held while there is one.
    private let holders = Mutex(0)

    /// Opens (or makes) the lock file. A file that is not a regular file of this user's (a
    /// link or a file another user put there) is refused, never followed.
    init(path: String, inhibitor: ShutdownInhibitor? = nil) throws {
        // 0600: an updater runs as root; another user able to open it could take it
        // exclusively and hold every update back, or keep the daemon from holding it.
        let fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw SystemError.io("open", subject: path, advice: "check that the daemon may write to the API socket's directory")
        }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid() else {
            close(fd)
            throw FieldHALError(.permissionDenied, subject: path, detail: "is not a regular file of the daemon's user",
                                advice: "remove it; the daemon makes it")
        }
        _ = fchmod(fd, 0o600)
        self.path = path
        self.inhibitor = inhibitor
        descriptor = fd
    }

    deinit { close(descriptor) }

    /// Holds the lock for `window` on `clock`, beside any window already open. An updater
    /// that holds it already (its reboot under way) is left to it.
    func hold(for window: Duration, on clock: any KitClock) async {
        let descriptor = self.descriptor
        // Taken and let go under the count's lock (both calls return at once), so that a
        // window ending cannot let go of the lock just taken for the next.
        holders.withLock { holders in
            holders += 1
            if holders == 1 {
                _ = flock(descriptor, LOCK_SH | LOCK_NB)
                inhibitor?.take()
            }
        }
        try? await clock.sleep(for: window)
        holders.withLock { holders in
            holders -= 1
            if holders == 0 {
                _ = flock(descriptor, LOCK_UN)
                inhibitor?.release()
            }
        }
    }
}
