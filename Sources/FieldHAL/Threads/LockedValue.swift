import Synchronization

/// A value shared between threads and tasks: a `Mutex` in a class, so that escaping
/// closures (stream handlers, cancellation handlers, device-thread jobs) can hold it.
public final class LockedValue<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>

    public init(_ value: Value) { mutex = Mutex(value) }

    public var value: Value { mutex.withLock { $0 } }

    @discardableResult
    public func withLock<Result: Sendable>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try mutex.withLock { try body(&$0) }
    }
}
