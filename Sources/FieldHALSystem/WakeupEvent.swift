import FieldHAL
#if canImport(Glibc)
import Glibc
#endif

/// A self-pipe that a device thread puts in its `poll` set beside the device, so another
/// thread can wake a blocking wait at once (to cancel it, or to close the device) instead
/// of waiting for its timeout. (A pipe rather than `eventfd`, which Glibc's Swift module
/// does not export; both ends are non-blocking, so neither side can ever stall on it.)
public final class WakeupEvent: Sendable {
    /// The descriptor to poll for `POLLIN`.
    public let fileDescriptor: Int32
    private let writeEnd: Int32

    public init() throws {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else {
            throw FieldHALError(.io, subject: "wake-up pipe", detail: SystemError.describe())
        }
        for end in ends {
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
        fileDescriptor = ends[0]
        writeEnd = ends[1]
    }

    deinit {
        close(fileDescriptor)
        close(writeEnd)
    }

    /// Wakes the waiting thread. Safe from any thread, any number of times (a full pipe
    /// already means "wake up").
    public func signal() {
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)
    }

    /// Clears pending signals; the waiting thread calls it after waking.
    public func drain() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(fileDescriptor, &buffer, buffer.count) > 0 {}
    }

    /// Sleeps up to `duration` on the pipe alone: true as soon as a signal is pending (left
    /// pending, so the caller decides whether to drain it), false when the time is up. The
    /// one interruptible pause of the device threads.
    public func wait(upTo duration: Duration) -> Bool {
        var entries = [pollfd(fd: fileDescriptor, events: Int16(POLLIN), revents: 0)]
        return ((try? SystemCall.poll(&entries, timeout: duration, subject: "wake-up pipe")) ?? 0) > 0
    }

    /// Whether a signal is pending, without clearing it.
    public var isSignalled: Bool {
        var entries = [pollfd(fd: fileDescriptor, events: Int16(POLLIN), revents: 0)]
        return ((try? SystemCall.poll(&entries, timeout: .zero).get()) ?? 0) > 0
    }
}

