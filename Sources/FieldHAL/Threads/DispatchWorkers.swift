import Dispatch

/// Keeps one libdispatch overcommit worker parked for the life of the process, so that the
/// process's thread names (`ps -eL`) are the same whether or not it has made an HTTP
/// request yet.
///
/// Why: a duressed kit's daemon makes a burst of requests (the silent alert, uploads) where
/// a normal one may make none, and `lab/stealth-check` compares thread names. When requests
/// went through URLSession, libcurl ran on private serial queues whose workers are
/// `com.apple.root.default-qos.overcommit` threads, one staying for good after the first
/// request: a duressed kit gained that name. Requests now go through AsyncHTTPClient on
/// NIO's threads, started up front (`HTTPSession.prepare`); Foundation still serves
/// `Process` and file-handle callbacks from libdispatch queues, so the parked worker stays
/// until the stealth harness shows a build without it keeps the same names (a thread is
/// its whole cost; `docs/known-issues.md`). The global default root queue is where Swift
/// concurrency itself runs on Linux (`…default-qos`): its threads are always there, and
/// parking one would take a thread from the cooperative pool, so it is left alone.
public enum DispatchWorkers {
    private static let parked: Void = {
        let never = DispatchSemaphore(value: 0)
        // A serial queue of default QoS targets the default overcommit root queue.
        DispatchQueue(label: "fieldhal-parked").async { never.wait() }
    }()

    /// Parks the workers (once per process; later calls do nothing).
    public static func hold() {
        _ = parked
    }
}
