import FieldHAL
import Synchronization

/// One body at a time, across its awaits, in the order they arrived: for changes that must
/// not interleave (a reload of the kit and a device coming back both replace devices). An
/// actor would not do: it lets another call in at every await.
public final class SerialGate: Sendable {
    private struct State {
        var busy = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())

    public init() {}

    public func run<T: Sendable>(_ body: () async -> T) async -> T {
        await withCheckedContinuation { (turn: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.busy { state.waiting.append(turn); return false }
                state.busy = true
                return true
            }
            if now { turn.resume() }
        }
        defer {
            let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
                if state.waiting.isEmpty { state.busy = false; return nil }
                return state.waiting.removeFirst()
            }
            next?.resume()
        }
        return await body()
    }
}
