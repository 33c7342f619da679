import FieldHAL

/// How a plugin process stands for the devices it serves (`SupervisedDevice`): why it is down
/// while it is, nil while it serves. Told to followers once per change; a new follower hears
/// the present state at once if the process is down.
final class PluginHealth: Sendable {
    private let changes = Broadcaster<String?>(bufferLimit: 4)
    private let down = LockedValue<String?>(nil)

    /// The process went down for `reason`, or (nil) serves again.
    func say(_ reason: String?) {
        guard down.withLock({ state in defer { state = reason }; return state != reason }) else { return }
        changes.yield(reason)
    }

    func follow(_ handler: @escaping @Sendable (String?) -> Void) -> Subscription {
        let subscription = changes.subscribe(handler)
        if let now = down.value { handler(now) }
        return subscription
    }
}
