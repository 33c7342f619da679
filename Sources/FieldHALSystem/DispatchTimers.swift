import Dispatch

/// The descriptors libdispatch's timers need, made at a process's start.
///
/// libdispatch makes them lazily — an epoll instance and an eventfd with its event loop, and
/// one timerfd per clock at the first timer on that clock — and when one cannot be made it
/// traps: SIGILL, with no message (`DISPATCH_INTERNAL_CRASH`). A Swift `Task.sleep` is such a
/// timer. So a process that runs out of descriptors (a capture under `bench seizure`'s
/// descriptor fault, a daemon under a flood) would die at its first sleep on a clock it had
/// not slept on yet, instead of reporting the open that failed; CI saw exactly that
/// (2026-11-28, at c7afaaa and 5f663be). Sleeping once on each clock at the start, while
/// descriptors are plenty, makes them all: later sleeps reuse them. Each sleep is 10 ms, far
/// enough ahead that its deadline has not passed when libdispatch takes it (a deadline
/// already past is run at once, with no timer, and would make nothing); the three run at
/// once, so a process starts 10 ms later.
public enum DispatchTimers {
    /// One short sleep on each of libdispatch's clocks: `ContinuousClock` (its monotonic
    /// clock), `SuspendingClock` (its uptime clock) and a wall-clock deadline, at once.
    public static func prepare() async {
        async let continuous: Void = sleep(on: ContinuousClock())
        async let suspending: Void = sleep(on: SuspendingClock())
        async let wall: Void = withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().asyncAfter(wallDeadline: .now() + .milliseconds(10)) { done.resume() }
        }
        _ = await (continuous, suspending, wall)
    }

    private static func sleep<C: Clock>(on clock: C) async where C.Duration == Duration {
        // Not cancellable on purpose: a cancelled sleep may never arm its timer.
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            Task.detached {
                try? await clock.sleep(until: clock.now.advanced(by: .milliseconds(10)), tolerance: nil)
                done.resume()
            }
        }
    }
}
