import FieldHAL
import Synchronization

/// One location watch shared by every client, as gpsd shares one receiver: the first
/// watcher starts the provider's `watch()`, later ones join it, and the watch stops when
/// the last one leaves. A hundred clients cost the kit one stream of fixes.
public final class SharedLocation: Sendable {
    public let provider: any LocationProvider
    private let fixes = Broadcaster<Fix>(bufferLimit: 8)
    private struct State {
        var upstream: Task<Void, Never>?
        /// Bumped for every upstream started: an ending one clears only its own.
        var generation = 0
    }
    private let state = Mutex(State())

    public init(_ provider: any LocationProvider) {
        self.provider = provider
    }

    /// Fixes from now on, until the caller stops iterating. A source failure ends no
    /// stream: the provider reports it as a no-fix with `sourceProblem`, as `watch()` does.
    public func watch() -> AsyncThrowingStream<Fix, any Error> {
        let stream = fixes.subscribe()
        state.withLock { state in
            guard state.upstream == nil else { return }
            state.generation += 1
            let generation = state.generation
            state.upstream = Task { [self] in await pump(generation) }
        }
        return stream
    }

    /// How many clients watch now (for tests and the benchmark).
    public var watcherCount: Int { fixes.subscriberCount }

    /// Whether the provider's watch is running.
    public var isWatching: Bool { state.withLock { $0.upstream != nil } }

    private func pump(_ generation: Int) async {
        var retry = Duration.milliseconds(500)
        while !Task.isCancelled {
            do {
                for try await fix in provider.watch() {
                    fixes.yield(fix)
                    retry = .milliseconds(500)
                    if stopIfUnwatched(generation) { return }
                }
            } catch {
                fixes.yield(.lost("\(error)"))
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
        let upstream = state.withLock { state in defer { state.upstream = nil }; return state.upstream }
        upstream?.cancel()
        await upstream?.value
        fixes.finish()
    }
}
