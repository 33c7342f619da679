import Synchronization

/// A callback subscription (to a `Broadcaster`, or a provider's `follow`): it lasts until
/// `cancel()`. After `cancel()` returns no new delivery starts; one already running on the
/// producer's thread may finish.
public final class Subscription: Sendable {
    private let action: Mutex<(@Sendable () -> Void)?>
    private let task: Task<Void, Never>?

    /// `cancel`: what ending it does (run once). `task`: the task that delivers, when one
    /// does (a provider without a callback path pumps its stream), for `cancelAndWait()`.
    public init(task: Task<Void, Never>? = nil, cancel: @escaping @Sendable () -> Void) {
        self.action = Mutex(cancel)
        self.task = task
    }

    public func cancel() {
        let run = action.withLock { action -> (@Sendable () -> Void)? in
            defer { action = nil }
            return action
        }
        run?()
        task?.cancel()
    }

    /// Cancels, then returns when a delivering task has ended (at once when none does).
    public func cancelAndWait() async {
        cancel()
        await task?.value
    }
}
