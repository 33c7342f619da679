import Dispatch

/// Keeps one libdispatch overcommit worker parked for the life of the process, so that the
/// process's thread names (`ps -eL`) are the same whether or not it has made an HTTP
/// request yet.
///
/// Why: swift-corelibs-foundation's URLSession runs libcurl on private serial queues, whose
/// workers are `com.apple.root.default-qos.overcommit` threads (one stays for good after the
/// first request). A daemon on the WebSocket channel makes no HTTP request after a NORMAL
/// sign-in and a burst of them after a DURESS one (the silent alert and uploads): without
/// this, a duressed kit's daemon gained that thread name for good (found by
/// lab/stealth-check). With one parked from the start, later requests only add threads of a
/// name already there; counts vary anyway (device threads come and go). URLSession's other
/// root queue, the global default one, is where Swift concurrency itself runs on Linux
/// (`…default-qos`): its threads are always there, and parking one would take a thread from
/// the cooperative pool (two on a 2-core board), so it is left alone.
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
