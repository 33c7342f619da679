import Dispatch

/// Keeps one libdispatch worker of each root queue that URLSession uses parked for the life
/// of the process, so that the process's thread names (`ps -eL`) are the same whether or not
/// it has made an HTTP request yet.
///
/// Why: swift-corelibs-foundation's URLSession runs libcurl on private serial queues, whose
/// workers are `com.apple.root.default-qos.overcommit` threads (one stays for good after the
/// first request), and completes on the global default queue (`…default-qos`, gone 5 s after
/// the last use). A daemon on the WebSocket channel makes no HTTP request after a NORMAL
/// sign-in and a burst of them after a DURESS one (the silent alert and uploads): without
/// this, a duressed kit's daemon gained a thread name for good (found by lab/stealth-check).
/// With a worker of each parked from the start, later requests only add more threads of
/// names that are already there; counts vary anyway (device threads come and go).
public enum DispatchWorkers {
    private static let parked: Void = {
        let never = DispatchSemaphore(value: 0)
        // A serial queue of default QoS targets the default overcommit root queue.
        DispatchQueue(label: "fieldhal-parked").async { never.wait() }
        DispatchQueue.global(qos: .default).async { never.wait() }
    }()

    /// Parks the workers (once per process; later calls do nothing).
    public static func hold() {
        _ = parked
    }
}
