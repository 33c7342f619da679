import FieldHAL
import FieldHALSystem
internal import CSpawn
#if canImport(Glibc)
import Glibc
#endif

/// A program started to outlive the one that starts it (the work after a sign-in): its own
/// session, standard descriptors on /dev/null, nothing else inherited, signals at their
/// defaults. Not waited for: when its starter exits, init (or a subreaper) reaps it.
public enum DetachedRun {
    /// glibc's POSIX_SPAWN_SETSID (spawn.h, __USE_GNU), which Swift's Glibc does not export.
    private static let spawnSetSID: Int16 = 0x80

    /// Starts `executable` with `arguments` (argv[0] is `name`) and this process's environment
    /// plus `extraEnvironment`.
    @discardableResult
    public static func start(_ executable: String, name: String, _ arguments: [String],
                             extraEnvironment: [String: String] = [:]) throws(SpawnError) -> Int32 {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t(), allSignals = sigset_t()
        sigemptyset(&noSignals)
        sigfillset(&allSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        posix_spawnattr_setsigdefault(&attributes, &allSignals)
        posix_spawnattr_setflags(&attributes, spawnSetSID | Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for descriptor: Int32 in 0...2 {
            posix_spawn_file_actions_addopen(&actions, descriptor, "/dev/null", descriptor == 0 ? O_RDONLY : O_WRONLY, 0)
        }
        // Nothing else inherited, whichever thread opened it and when: a pipe a caller gave
        // the starter (a kiosk wrapper reading until EOF) must close when the starter exits,
        // or the caller would wait for this run instead.
        posix_spawn_file_actions_addclosefrom_np(&actions, 3)
        let argv = ([name] + arguments).map { strdup($0) } + [nil]
        var inherited: [UnsafeMutablePointer<CChar>?] = []
        var entry = environ
        while let variable = entry.pointee {
            let text = String(cString: variable)
            if let equals = text.firstIndex(of: "="), extraEnvironment[String(text[..<equals])] == nil { inherited.append(strdup(variable)) }
            entry += 1
        }
        let envp = inherited + extraEnvironment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        let failed = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard failed == 0 else { throw SpawnError(step: "posix_spawn", code: failed) }
        return pid
    }

    /// Blocks until process `pid` has exited, at most `limit`; true when it has (or was never
    /// there). Through a pidfd, so it works for a process that is not this one's child (a
    /// detached run waiting for its starter). Blocking: call it from a thread of its own.
    public static func waitForExit(of pid: Int32, upTo limit: Duration) -> Bool {
        let descriptor = fieldhal_pidfd_open(pid)
        guard descriptor >= 0 else { return errno == ESRCH }
        defer { close(descriptor) }
        var entries = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)]
        return ((try? SystemCall.poll(&entries, timeout: limit, subject: "the detached run")) ?? 0) > 0
    }
}
