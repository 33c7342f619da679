import FieldHAL
import Foundation
import Testing

/// The manual clock the daemon's services are tested on: a move wakes exactly the waits
/// it reaches, in deadline order; a cancel ends a wait at once; a past deadline does not wait.
struct KitClockTests {
    @Test func aMoveWakesTheWaitsItReachesInDeadlineOrder() async throws {
        let clock = ManualKitClock(Date(timeIntervalSince1970: 1000))
        let woken = WokenLog()
        let sleepers = [30, 10, 20].map { seconds in
            Task {
                try await clock.sleep(for: .seconds(seconds))
                woken.append(seconds)
            }
        }
        while clock.sleeperCount < 3 { await Task.yield() }
        clock.advance(by: .seconds(15))
        _ = try await sleepers[1].value
        #expect(woken.values == [10])
        #expect(clock.sleeperCount == 2)
        clock.set(to: Date(timeIntervalSince1970: 1040))
        for sleeper in sleepers { _ = try await sleeper.value }
        #expect(Set(woken.values) == [10, 20, 30])
        #expect(clock.now == Date(timeIntervalSince1970: 1040))
        clock.set(to: Date(timeIntervalSince1970: 0))
        #expect(clock.now == Date(timeIntervalSince1970: 1040), "a manual clock never goes back")
    }

    @Test func aCancelEndsAWaitAndAPastDeadlineDoesNotWait() async throws {
        let clock = ManualKitClock()
        let waiting = Task { try await clock.sleep(for: .seconds(3600)) }
        while clock.sleeperCount < 1 { await Task.yield() }
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await waiting.value }
        #expect(clock.sleeperCount == 0)

        try await clock.sleep(until: clock.now.addingTimeInterval(-1))
        let cancelledFirst = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await clock.sleep(for: .seconds(1))
        }
        await #expect(throws: CancellationError.self) { try await cancelledFirst.value }
        #expect(clock.sleeperCount == 0)
    }

    @Test func theSystemClockWaitsOnTheMonotonicClock() async throws {
        let clock = SystemKitClock()
        let started = ContinuousClock.now
        try await clock.sleep(for: .milliseconds(20))
        #expect(ContinuousClock.now - started >= .milliseconds(20))
        let cancelled = Task { try await clock.sleep(for: .seconds(3600)) }
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
    }
}

private final class WokenLog: Sendable {
    private let log = LockedValue<[Int]>([])
    func append(_ value: Int) { log.withLock { $0.append(value) } }
    var values: [Int] { log.value }
}
