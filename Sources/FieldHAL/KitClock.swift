#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization

/// The time a kit's services keep: the wall clock for what they record and compare (when a
/// lock relocks, how old a sign-in is) and their waits measured against it. A running kit
/// uses the system's (`SystemKitClock`); a test, or a simulated kit, a `ManualKitClock` that
/// it moves forward, so that an hour's idle relock is checked without an hour's wait.
public protocol KitClock: Sendable {
    /// Now, on this clock.
    var now: Date { get }
    /// Returns once `deadline` has come on this clock (at once if it has); throws
    /// `CancellationError` if the task is cancelled first.
    func sleep(until deadline: Date) async throws
}

extension KitClock {
    /// Returns once `duration` has passed on this clock, or throws `CancellationError`.
    public func sleep(for duration: Duration) async throws {
        try await sleep(until: now.addingTimeInterval(duration.seconds))
    }
}

/// The system's clock. Waits run on the monotonic clock, so a wall clock set back or
/// forward (NTP, a board without a battery) changes no wait already begun.
public struct SystemKitClock: KitClock {
    public init() {}
    public var now: Date { Date() }
    public func sleep(until deadline: Date) async throws {
        let left = deadline.timeIntervalSinceNow
        guard left > 0 else { try Task.checkCancellation(); return }
        try await Task.sleep(for: .nanoseconds(Int64((left * 1e9).rounded(.up))))
    }
}

/// A clock that moves only when told (`advance(by:)`, `set(to:)`): each wait whose deadline
/// the move reaches returns, in deadline order. For tests and simulated kits.
public final class ManualKitClock: KitClock {
    private struct Sleeper {
        let deadline: Date
        let continuation: CheckedContinuation<Void, any Error>
    }
    private struct State {
        var now: Date
        var next = 0
        var sleepers: [Int: Sleeper] = [:]
        /// Waits begun and not yet registered, and those of them cancelled meanwhile.
        var starting: Set<Int> = []
        var cancelled: Set<Int> = []
    }
    private let state: Mutex<State>

    /// Starts at `start`: by default the real now, so that what the kit recorded before
    /// (a sign-in's time) reads as it would.
    public init(_ start: Date = Date()) {
        state = Mutex(State(now: start))
    }

    public var now: Date { state.withLock { $0.now } }

    /// How many waits are pending: a test waits for a service to be asleep before it moves
    /// the clock past the service's deadline.
    public var sleeperCount: Int { state.withLock { $0.sleepers.count } }

    /// The deadlines waited for, earliest first.
    public var deadlines: [Date] { state.withLock { $0.sleepers.values.map(\.deadline).sorted() } }

    public func advance(by duration: Duration) {
        set(to: now.addingTimeInterval(duration.seconds))
    }

    /// Moves the clock to `date` (never back) and wakes every wait it reaches.
    public func set(to date: Date) {
        let due = state.withLock { state -> [Sleeper] in
            state.now = max(state.now, date)
            let due = state.sleepers.filter { $0.value.deadline <= state.now }
            for id in due.keys { state.sleepers.removeValue(forKey: id) }
            return due.values.sorted { $0.deadline < $1.deadline }
        }
        for sleeper in due { sleeper.continuation.resume() }
    }

    public func sleep(until deadline: Date) async throws {
        let id = state.withLock { state -> Int in
            defer { state.next += 1 }
            state.starting.insert(state.next)
            return state.next
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let outcome = state.withLock { state -> Result<Void, any Error>? in
                    state.starting.remove(id)
                    if state.cancelled.remove(id) != nil { return .failure(CancellationError()) }
                    if deadline <= state.now { return .success(()) }
                    state.sleepers[id] = Sleeper(deadline: deadline, continuation: continuation)
                    return nil
                }
                if let outcome { continuation.resume(with: outcome) }
            }
        } onCancel: {
            let sleeper = state.withLock { state -> Sleeper? in
                guard let sleeper = state.sleepers.removeValue(forKey: id) else {
                    if state.starting.contains(id) { state.cancelled.insert(id) }  // else: already woken
                    return nil
                }
                return sleeper
            }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }
}
