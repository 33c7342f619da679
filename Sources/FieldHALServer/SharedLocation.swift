import FieldHAL
import Synchronization

/// One location watch shared by every client, as gpsd shares one receiver: the first
/// watcher starts following the provider, later ones join it, and the following stops when
/// the last one leaves. A hundred clients cost the kit one stream of fixes.
///
/// Fixes are fanned out where the provider hands them over (its device thread, through
/// `follow`), to streams and to handlers: a client connection's handler writes the event
/// from there, with no task in between (issue 20: the event stream's latency).
///
/// The provider can be replaced (a reload opened the receiver again, or another one):
/// watchers stay subscribed and the fixes continue from the new provider. Without one, they
/// hear a no-fix report with the reason, as for any lost source, and no stream ends.
public final class SharedLocation: Sendable {
    private let fixes = Broadcaster<Fix>(bufferLimit: 8)
    private struct State {
        var provider: (any LocationProvider)?
        var upstream: Subscription?
        /// A start again after the provider's stream ended, while it waits.
        var restart: Task<Void, Never>?
        var retry = Duration.milliseconds(500)
        /// Bumped for every upstream started: an ending one clears only its own.
        var generation = 0
        var closed = false
    }
    private let state: Mutex<State>
    /// What the watch has heard, for the metrics: only while someone follows it, so a
    /// receiver nobody follows is not watched for them.
    private let heard = Mutex<(fixes: Int, last: Fix?, at: ContinuousClock.Instant?)>((0, nil, nil))

    /// Fixes heard since the start, the last one and when it came.
    public var hearing: (fixes: Int, last: Fix?, at: ContinuousClock.Instant?) { heard.withLock { $0 } }

    public init(_ provider: (any LocationProvider)?) {
        state = Mutex(State(provider: provider))
    }

    /// The provider fixes come from now, if any.
    public var provider: (any LocationProvider)? { state.withLock { $0.provider } }

    /// Fixes from now on, until the caller stops iterating. A source failure ends no
    /// stream: the provider reports it as a no-fix with `sourceProblem`, as `watch()` does.
    public func watch() -> AsyncThrowingStream<Fix, any Error> {
        let stream = fixes.subscribe()
        startIfNeeded()
        return stream
    }

    /// Fixes from now on, handed to `handler` on the thread they arrive on, until the
    /// subscription is cancelled (`end`: when the watch closes). `handler` must not block.
    public func follow(_ handler: @escaping @Sendable (Fix) -> Void, end: @escaping @Sendable ((any Error)?) -> Void = { _ in }) -> Subscription {
        let subscription = fixes.subscribe(handler, end: end)
        startIfNeeded()
        return subscription
    }

    /// Fixes come from `provider` from now on (nil: none, said to watchers as a lost source).
    /// Returns when the old provider's following has ended, so that it can be closed.
    public func replace(with provider: (any LocationProvider)?, reason: String = "the location capability is not loaded") async {
        let (old, restart) = state.withLock { state -> (Subscription?, Task<Void, Never>?) in
            defer {
                state.provider = provider
                state.upstream = nil
                state.restart = nil
                state.retry = .milliseconds(500)
            }
            state.generation += 1
            return (state.upstream, state.restart)
        }
        restart?.cancel()
        await old?.cancelAndWait()
        startIfNeeded()
        if provider == nil { fixes.yield(.lost(reason)) }
    }

    /// How many clients watch now (for tests and the benchmark).
    public var watcherCount: Int { fixes.subscriberCount }

    /// Whether the provider is being followed (or a restart of it awaited).
    public var isWatching: Bool { state.withLock { $0.upstream != nil || $0.restart != nil } }

    private func startIfNeeded() {
        let started = state.withLock { state -> (Subscription?, (any LocationProvider)?, Int) in
            guard !state.closed, state.upstream == nil, state.restart == nil, let provider = state.provider,
                  fixes.subscriberCount > 0 else { return (nil, nil, 0) }
            state.generation += 1
            // A placeholder holds the place while `follow` runs outside the lock (a
            // provider may deliver a first fix from inside it).
            state.upstream = Subscription {}
            return (nil, provider, state.generation)
        }
        guard let provider = started.1 else { return }
        let generation = started.2
        let subscription = provider.follow({ [weak self] fix in
            self?.received(fix, generation)
        }, end: { [weak self] error in
            self?.ended(error, generation)
        })
        let stale = state.withLock { state -> Bool in
            guard state.generation == generation, state.upstream != nil else { return true }
            state.upstream = subscription
            return false
        }
        if stale { subscription.cancel() }
    }

    private func received(_ fix: Fix, _ generation: Int) {
        fixes.yield(fix)
        heard.withLock { $0 = ($0.fixes + 1, fix, .now) }
        // With nobody watching, the following ends, under the lock that `startIfNeeded`
        // takes, so a watcher arriving now starts a new one instead of joining a dying one.
        let idle = state.withLock { state -> Subscription? in
            guard state.generation == generation else { return nil }
            state.retry = .milliseconds(500)
            guard fixes.subscriberCount == 0, let upstream = state.upstream else { return nil }
            state.upstream = nil
            return upstream
        }
        idle?.cancel()
    }

    /// The provider's stream ended (a scripted track finished, a backend gave up): watchers
    /// hear why, and it is followed again after a wait that doubles up to 10 s.
    private func ended(_ error: (any Error)?, _ generation: Int) {
        if let error { fixes.yield(.lost("\(error)")) }
        state.withLock { state in
            guard state.generation == generation, !state.closed else { return }
            let wait = state.retry
            state.retry = min(state.retry * 2, .seconds(10))
            state.upstream = nil
            state.restart = Task { [weak self] in
                try? await Task.sleep(for: wait)
                guard !Task.isCancelled else { return }
                self?.restart(generation)
            }
        }
    }

    private func restart(_ generation: Int) {
        let current = state.withLock { state -> Bool in
            guard state.generation == generation, state.restart != nil else { return false }
            state.restart = nil
            return true
        }
        if current { startIfNeeded() }
    }

    /// Ends the following and every client's stream.
    public func close() async {
        let (upstream, restart) = state.withLock { state in
            defer {
                state.upstream = nil
                state.restart = nil
                state.provider = nil
                state.generation += 1
                state.closed = true
            }
            return (state.upstream, state.restart)
        }
        restart?.cancel()
        await upstream?.cancelAndWait()
        fixes.finish()
    }
}
