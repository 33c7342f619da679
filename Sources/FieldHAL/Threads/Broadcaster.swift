import Synchronization

/// Hands each value from one producer (a device thread) to every current subscriber: an
/// `AsyncThrowingStream`, or a handler called on the producer's thread. A subscriber that
/// stops iterating, is cancelled or cancels its subscription is removed at once; the
/// producer never waits for a consumer (streams buffer the newest values only, and a handler
/// must not block: it hands the value on, as a server writing to its clients does).
///
/// Handlers exist for latency: a stream's consumer is a task, woken on the cooperative pool
/// for every value; a handler runs where the value is, so a server can fan a fix out to its
/// clients' connections without a task in between (issue 20's event-stream latency).
public final class Broadcaster<Element: Sendable>: Sendable {
    /// What a handler subscriber is given: the values, then the end.
    public typealias Handler = @Sendable (Element) -> Void
    public typealias EndHandler = @Sendable ((any Error)?) -> Void

    private struct Subscribers {
        var next = 0
        var continuations: [Int: AsyncThrowingStream<Element, any Error>.Continuation] = [:]
        var handlers: [Int: (value: Handler, end: EndHandler)] = [:]
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

    /// `handler` is called with each value broadcast from now on, on the producer's thread,
    /// and `end` once when the broadcaster finishes (at once if it has). Both must return
    /// quickly and must not call back into this broadcaster.
    public func subscribe(_ handler: @escaping Handler, end: @escaping EndHandler = { _ in }) -> Subscription {
        let added: Int? = subscribers.withLock { subscribers in
            guard subscribers.finished == nil else { return nil }
            let id = subscribers.next
            subscribers.next += 1
            subscribers.handlers[id] = (handler, end)
            return id
        }
        guard let id = added else {
            end(subscribers.withLock { $0.finished ?? nil })
            return Subscription {}
        }
        return Subscription { [weak self] in
            _ = self?.subscribers.withLock { $0.handlers.removeValue(forKey: id) }
        }
    }

    /// The number of live subscribers, streams and handlers.
    public var subscriberCount: Int { subscribers.withLock { $0.continuations.count + $0.handlers.count } }

    public func yield(_ value: Element) {
        let (streams, handlers) = subscribers.withLock { (Array($0.continuations.values), Array($0.handlers.values)) }
        for handler in handlers { handler.value(value) }
        for continuation in streams { continuation.yield(value) }
    }

    /// Ends every stream, now and for later subscribers, with `error` (or normally).
    public func finish(throwing error: (any Error)? = nil) {
        let (streams, handlers) = subscribers.withLock { subscribers in
            subscribers.finished = .some(error)
            defer {
                subscribers.continuations.removeAll()
                subscribers.handlers.removeAll()
            }
            return (Array(subscribers.continuations.values), Array(subscribers.handlers.values))
        }
        for handler in handlers { handler.end(error) }
        for continuation in streams { continuation.finish(throwing: error) }
    }
}
