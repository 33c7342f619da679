#if canImport(Glibc)
import Glibc
#endif

/// The main thread of an executable whose work is all in tasks.
///
/// Why not an `await` at the top level (or an async `@main`): Swift's async `main` ends in
/// `dispatch_main`, which leaves the main thread through `pthread_exit`. That forced unwind
/// loads libgcc_s's unwinder and walks the executable's unwind tables (`.eh_frame_hdr`,
/// `.eh_frame`), and their pages stay resident for the life of the process: about 0.6 MiB of
/// a plugin process's or the daemon's (docs/performance.md, "Idle memory per process").
public enum MainThread {
    /// Runs `work` in a task and parks the calling thread, the main one, for good; `work` ends
    /// the process (`exit`). The parked thread blocks every signal once the task has started
    /// (the task's threads keep the mask they were made with), so a signal reaches the
    /// threads that run tasks, as it did once `dispatch_main` had ended the main thread.
    /// Nothing here runs on the main actor: no job is ever drained from the main queue.
    /// The loader's relocation table is given back first (`RelocationTable`): it has been
    /// read, and nothing reads it again.
    public static func hand(to work: @escaping @Sendable () async -> Never) -> Never {
        RelocationTable.release()
        Task.detached { await work() }
        var all = sigset_t()
        sigfillset(&all)
        pthread_sigmask(SIG_BLOCK, &all, nil)
        while true { pause() }
    }
}
