import FieldHAL
import FieldHALSystem
internal import CSpawn
#if canImport(Glibc)
import Glibc
#endif

/// A program the core starts (an fprintd tool), with the kernel's word on when it ended.
///
/// Not Foundation's `Process`, because on Linux that learns of a child's exit when a socket
/// the child inherited closes, and the socket is made without close-on-exec: a program that
/// another thread starts in the same instant can inherit it too, and `waitUntilExit` then
/// waits for *that* program. A CI run saw it: an fprintd verify that had ended waited two
/// minutes for a schemathesis run started by another test. Here the exit is a pidfd (the
/// kernel's; nobody else can hold it open), both pipes are close-on-exec from the start,
/// and the child inherits its three standard descriptors and nothing else.
///
/// A plugin process (issue 21) is started the same way with a `connection`: its standard
/// input and output are one end of a socket pair, so the host writes with MSG_NOSIGNAL (a
/// plugin that died is an EPIPE, never a SIGPIPE that would kill the host), and the same
/// socket can later carry descriptors (SCM_RIGHTS).
///
/// One thread uses an instance; it is not `Sendable`.
public final class ChildProcess {
    public enum Output: Sendable { case pipe, discard }

    public let pid: Int32
    /// Readable once the process has exited. Nil on kernels before 5.3: then `hasExited`
    /// asks `waitpid` and the caller polls on a short tick.
    public let exitDescriptor: Int32?
    /// The read ends of the pipes (non-blocking), when asked for.
    public let standardOutput: Int32?
    public let standardError: Int32?
    /// The host's end of the socket that is the child's standard input and output (blocking,
    /// close-on-exec), when started with `connection: true`.
    public let connection: Int32?
    /// Nil while it runs; then its wait status, itself nil when someone else reaped it (a
    /// host program that sets SIGCHLD to SIG_IGN has the kernel reap every child).
    private var waitStatus: Int32??

    /// Starts `executable` with exactly `environment`, standard input on /dev/null, every
    /// signal at its default disposition and none blocked (a thread of ours may block some,
    /// and the Swift runtime ignores SIGPIPE — a tool must not inherit either).
    public init(_ executable: String, _ arguments: [String], environment: [String: String],
                output: Output = .pipe, errors: Output = .pipe, connection: Bool = false,
                workingDirectory: String? = nil) throws(SpawnError) {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }

        var parentEnds: [Int32] = []
        var childEnds: [Int32] = []
        defer { childEnds.forEach { close($0) } }
        func wire(_ target: Int32, _ output: Output) throws(SpawnError) -> Int32? {
            guard output == .pipe else {
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", O_WRONLY, 0)
                return nil
            }
            var ends: [Int32] = [-1, -1]
            guard pipe2(&ends, O_CLOEXEC) == 0 else {
                parentEnds.forEach { close($0) }
                throw SpawnError(step: "pipe", code: errno)
            }
            _ = fcntl(ends[0], F_SETFL, fcntl(ends[0], F_GETFL) | O_NONBLOCK)
            parentEnds.append(ends[0])
            childEnds.append(ends[1])
            // dup2 clears close-on-exec on the copy, so the tool keeps exactly this one.
            posix_spawn_file_actions_adddup2(&actions, ends[1], target)
            return ends[0]
        }
        if connection {
            var ends: [Int32] = [-1, -1]
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
                throw SpawnError(step: "socketpair", code: errno)
            }
            parentEnds.append(ends[0])
            childEnds.append(ends[1])
            posix_spawn_file_actions_adddup2(&actions, ends[1], 0)
            posix_spawn_file_actions_adddup2(&actions, ends[1], 1)
            self.connection = ends[0]
            standardOutput = nil
        } else {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
            self.connection = nil
            standardOutput = try wire(1, output)
        }
        standardError = try wire(2, errors)
        if let workingDirectory { posix_spawn_file_actions_addchdir_np(&actions, workingDirectory) }
        posix_spawn_file_actions_addclosefrom_np(&actions, 3)

        var noSignals = sigset_t(), allSignals = sigset_t()
        sigemptyset(&noSignals)
        sigfillset(&allSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        posix_spawnattr_setsigdefault(&attributes, &allSignals)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        let failed = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard failed == 0 else {
            parentEnds.forEach { close($0) }
            throw SpawnError(step: "posix_spawn", code: failed)
        }
        self.pid = pid
        let descriptor = fieldhal_pidfd_open(pid)
        exitDescriptor = descriptor >= 0 ? descriptor : nil
    }

    deinit {
        // Never leave a zombie, nor a tool running on after the run that started it.
        if waitStatus == nil {
            _ = Glibc.kill(pid, SIGKILL)
            waitForExit()
        }
        [exitDescriptor, standardOutput, standardError, connection].compactMap { $0 }.forEach { close($0) }
    }

    /// Whether the process has ended (reaping it if so). Does not block.
    public var hasExited: Bool {
        if waitStatus != nil { return true }
        var status: Int32 = 0
        switch waitpid(pid, &status, WNOHANG) {
        case pid: waitStatus = .some(status)
        case -1 where errno == ECHILD: waitStatus = .some(nil)
        default: return false
        }
        return true
    }

    /// Waits for the process to end. Only after `kill()`, or once `exitDescriptor` is
    /// readable: otherwise this can wait as long as the tool runs.
    public func waitForExit() {
        guard waitStatus == nil else { return }
        var status: Int32 = 0
        switch SystemCall.attempt({ waitpid(pid, &status, 0) }) {
        case .success: waitStatus = .some(status)
        case .failure: waitStatus = .some(nil)  // reaped elsewhere: no status to keep
        }
    }

    /// Ends the process at once: SIGKILL, which nothing in the tool can block or delay.
    public func kill() {
        guard waitStatus == nil else { return }
        _ = Glibc.kill(pid, SIGKILL)
    }

    /// The exit status, or 128 + the signal that ended it (as a shell reports it); nil
    /// while it runs.
    public var terminationStatus: Int32? {
        guard let ended = waitStatus, let status = ended else { return nil }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }
}

/// A child process that could not be started: which step failed, with its errno.
public struct SpawnError: Error, CustomStringConvertible {
    public var step: String
    public var code: Int32
    public var description: String { "\(step): \(SystemError.describe(code))" }
}
