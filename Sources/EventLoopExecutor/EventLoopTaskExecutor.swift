public import NIOCore

/// Runs a task's jobs on a SwiftNIO event loop: with `withTaskExecutorPreference` (SE-0417),
/// the code that reads or writes a channel runs on the loop that owns it.
///
/// Why: an awaiting task on the cooperative pool is one more thread woken for every message
/// (the loop hands the bytes to the pool, the pool hands the write back to the loop). For
/// the event stream's fixes those wake-ups were most of the daemon's and the client's share
/// of the latency (issue 20). On the loop, a write from the task goes straight to the channel
/// and a read resumes the task in the same turn of the loop.
///
/// Only for short, non-blocking work: anything that blocks here stalls every connection
/// on the loop.
public final class EventLoopTaskExecutor: TaskExecutor {
    public let eventLoop: any EventLoop

    public init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
