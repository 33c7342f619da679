import FieldHAL
import Synchronization

/// One location watch shared by every client, as gpsd shares one receiver: the first
/// watcher starts the provider's `watch()`, later ones join it, and the watch stops when
/// the last one leaves. A hundred clients cost the kit one stream of fixes.
///
/// The provider can be replaced (a reload opened the receiver again, or another one):
/// watchers stay subscribed and the fixes continue from the new provider. Without one, they
/// hear a no-fix report with the reason, as for any lost source, and no stream ends.
public final class SharedLocation: Sendable {
    private let fixes = Broadcaster<Fix>(bufferLimit: 8)
    private struct State {
        var provider: (any LocationProvider)?
        var upstream: Task<Void, Never>?
        /// Bumped for every upstream started: an ending one clears only its own.
        var generation = 0
    }
    private let state: Mutex<State>

    public init(_ provider: (any LocationProvider)?) {
        state = Mutex(State(provider: provider))
    }

    /// The provider fixes come from now, if any.
    public var provider: (any LocationProvider)? { state.withLock { $0.provider } }

    /// Fixes from now on, until the caller stops iterating. A source failure ends no
    /// stream: the provider reports it as a no-fix with `sourceProblem`, as `watch()` does.
    public func watch() -> AsyncThrowingStream<Fix, any Error> {
        let stream = fixes.subscribe()
        state.withLock { startIfNeeded(&$0) }
        return stream
    }

    /// Fixes come from `provider` from now on (nil: none, said to watchers as a lost source).
    /// Returns when the old provider's watch has ended, so that it can be closed.
    public func replace(with provider: (any LocationProvider)?, reason: String = "the location capability is not loaded") async {
        let old = state.withLock { state -> Task<Void, Never>? in
            defer {
                state.provider = provider
                state.upstream = nil
                if fixes.subscriberCount > 0 { startIfNeeded(&state) }
            }
            state.generation += 1
            return state.upstream
        }
        old?.cancel()
        await old?.value
        if provider == nil { fixes.yield(.lost(reason)) }
    }

    /// How many clients watch now (for tests and the benchmark).
    public var watcherCount: Int { fixes.subscriberCount }

    /// Whether the provider's watch is running.
    public var isWatching: Bool { state.withLock { $0.upstream != nil } }

    private func startIfNeeded(_ state: inout State) {
        guard state.upstream == nil, let provider = state.provider else { return }
        state.generation += 1
        let generation = state.generation
        state.upstream = Task { [self] in await pump(provider, generation) }
    }

    private func pump(_ provider: any LocationProvider, _ generation: Int) async {
        var retry = Duration.milliseconds(500)
        while !Task.isCancelled {
            do {
                for try await fix in provider.watch() {
                    fixes.yield(fix)
                    retry = .milliseconds(500)
                    if stopIfUnwatched(generation) { return }
                }
            } catch where !Task.isCancelled {
                fixes.yield(.lost("\(error)"))
            } catch {
                return
            }
            if stopIfUnwatched(generation) { return }
            // The provider's stream ended (a scripted track, a receiver gone): try again.
            try? await Task.sleep(for: retry)
            retry = min(retry * 2, .seconds(10))
        }
    }

    /// With nobody watching, the upstream ends, under the lock that `watch()` takes, so a
    /// watcher arriving at this moment starts a new one instead of joining a dying one.
    private func stopIfUnwatched(_ generation: Int) -> Bool {
        state.withLock { state in
            guard fixes.subscriberCount == 0, state.generation == generation else { return false }
            state.upstream = nil
            return true
        }
    }

    /// Ends the upstream and every client's stream.
    public func close() async {
        let upstream = state.withLock { state in
            defer { state.upstream = nil; state.provider = nil; state.generation += 1 }
            return state.upstream
        }
        upstream?.cancel()
        await upstream?.value
        fixes.finish()
    }
}
