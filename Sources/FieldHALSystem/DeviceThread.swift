import Dispatch
import FieldHAL
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization

/// A thread of its own for one device's blocking C calls (a libgps `poll`, a libnfc
/// poll, a V4L2 dequeue), so they never occupy a thread of Swift's cooperative pool.
///
/// Jobs run one at a time, in the order they were submitted. `run` bridges a job to
/// async code and lets the caller say how to interrupt it when the task is cancelled
/// (signal a `WakeupEvent` in the job's `poll` set, call `nfc_abort_command`): the
/// blocking call then returns early and the job reports `cancelled`.
public final class DeviceThread: Sendable {
    public typealias Job = @Sendable () -> Void

    private struct Queue {
        var jobs: [Job] = []
        var stopping = false
        /// Why there is no thread: the system would not make one (out of memory, or over its
        /// limit of threads). Every job is then refused with it.
        var unstarted: FieldHALError?
    }

    public let name: String
    private let queue = Mutex(Queue())
    /// One signal per queued job, plus one for `stop()`.
    private let pending = DispatchSemaphore(value: 0)

    /// What every device thread is called in `ps -eL`, `top -H` and /proc: one name for all,
    /// because a thread named after the camera or the microphone appearing only after a
    /// duress sign-in would tell a bystander what the kit is doing (docs/stealth.md).
    public static let threadName = "fieldhal-device"

    /// Starts the thread. `name` (`fieldhal-gpsd`) names the device in errors and in the
    /// debugger's view of the thread object; the system sees `threadName`.
    public init(name: String) {
        self.name = name
        do {
            try SystemThread.start(name: Self.threadName) { [self] in self.serve() }
        } catch {
            // No crash: the device this thread was for fails to open, saying why.
            let failure = FieldHALError(error.kind, subject: name, detail: "cannot start its thread: \(error.detail)", advice: error.advice)
            queue.withLock { $0.stopping = true; $0.unstarted = failure }
        }
    }

    /// Queues `job`; it runs after the jobs queued before it. Returns false, and drops the
    /// job, once `stop()` has been called.
    @discardableResult
    public func submit(_ job: @escaping Job) -> Bool {
        let accepted = queue.withLock { queue in
            guard !queue.stopping else { return false }
            queue.jobs.append(job)
            return true
        }
        if accepted { pending.signal() }
        return accepted
    }

    /// Runs `job` on the device thread and returns its result. When the calling task is
    /// cancelled, `interrupt` is called (from the cancelling thread) to make the job's
    /// blocking call return; the job is expected to notice and throw.
    public func run<T: Sendable>(
        interrupt: @escaping @Sendable () -> Void = {},
        _ job: @escaping @Sendable () throws -> T
    ) async throws -> T {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
                let accepted = submit { continuation.resume(with: Result { try job() }) }
                if !accepted {
                    continuation.resume(throwing: queue.withLock { $0.unstarted } ?? FieldHALError(.disconnected, subject: name,
                                                                                                  detail: "the device has been closed"))
                }
            }
        } onCancel: {
            interrupt()
        }
    }

    /// Refuses new jobs; the thread runs the ones already queued and exits. Interrupt a
    /// long-running job first, or the thread exits only when it returns.
    public func stop() {
        queue.withLock { $0.stopping = true }
        pending.signal()
    }

    private func serve() {
        while true {
            pending.wait()
            let (job, exit) = queue.withLock { queue -> (Job?, Bool) in
                if !queue.jobs.isEmpty { return (queue.jobs.removeFirst(), false) }
                return (nil, queue.stopping)
            }
            if let job { job() } else if exit { return }
        }
    }
}

extension DeviceThread {
    /// One blocking job on a thread of its own, ended after it (a detection's ioctls).
    public static func runOnce<T: Sendable>(name: String, _ job: @escaping @Sendable () throws -> T) async throws -> T {
        let thread = DeviceThread(name: name)
        defer { thread.stop() }
        return try await thread.run(job)
    }
}
