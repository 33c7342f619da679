import Synchronization

/// Hands each value from one producer (a device thread) to every current subscriber's
/// `AsyncThrowingStream`. A subscriber that stops iterating or is cancelled is removed at
/// once; the producer never waits for a consumer (streams buffer the newest values only).
public final class Broadcaster<Element: Sendable>: Sendable {
    private struct Subscribers {
        var next = 0
        var continuations: [Int: AsyncThrowingStream<Element, any Error>.Continuation] = [:]
        var finished: (any Error)??
    }

    private let subscribers = Mutex(Subscribers())
    private let bufferLimit: Int

    /// `bufferLimit`: how many unread values a slow subscriber keeps (the newest ones).
    public init(bufferLimit: Int = 16) {
        self.bufferLimit = bufferLimit
    }

    /// A new stream of the values broadcast from now on.
    public func subscribe() -> AsyncThrowingStream<Element, any Error> {
        let (stream, continuation) = AsyncThrowingStream<Element, any Error>.makeStream(
            bufferingPolicy: .bufferingNewest(bufferLimit))
        let finished: (any Error)?? = subscribers.withLock { subscribers in
            if let finished = subscribers.finished { return finished }
            let id = subscribers.next
            subscribers.next += 1
            subscribers.continuations[id] = continuation
            continuation.onTermination = { [weak self] _ in
                _ = self?.subscribers.withLock { $0.continuations.removeValue(forKey: id) }
            }
            return nil
        }
        if let finished { continuation.finish(throwing: finished) }
        return stream
    }

    /// The number of live subscribers.
    public var subscriberCount: Int { subscribers.withLock { $0.continuations.count } }

    public func yield(_ value: Element) {
        let current = subscribers.withLock { Array($0.continuations.values) }
        for continuation in current { continuation.yield(value) }
    }

    /// Ends every stream, now and for later subscribers, with `error` (or normally).
    public func finish(throwing error: (any Error)? = nil) {
        let current = subscribers.withLock { subscribers in
            subscribers.finished = .some(error)
            defer { subscribers.continuations.removeAll() }
            return Array(subscribers.continuations.values)
        }
        for continuation in current { continuation.finish(throwing: error) }
    }
}
