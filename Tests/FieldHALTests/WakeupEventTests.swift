import FieldHAL
import FieldHALSystem
import Foundation
import Testing

/// The device threads' one interruptible pause, and poll(2)'s timeout conversion.
@Suite struct WakeupEventTests {
    @Test func pollTimeoutsRoundUpAndClamp() {
        #expect(Duration.zero.pollTimeout == 0)
        #expect(Duration.seconds(-1).pollTimeout == 0)
        #expect(Duration.microseconds(400).pollTimeout == 1, "a short wait must not become a busy 0")
        #expect(Duration.milliseconds(1500).pollTimeout == 1500)
        #expect(Duration.seconds(86_400 * 365 * 100).pollTimeout == Int32.max)
    }

    @Test func waitSleepsTheWholeTimeUnlessSignalled() async throws {
        let wakeup = try WakeupEvent()
        let quiet = try await offThePool { () -> (Bool, Duration) in
            let start = ContinuousClock.now
            return (wakeup.wait(upTo: .milliseconds(60)), ContinuousClock.now - start)
        }
        #expect(quiet.0 == false)
        #expect(quiet.1 >= .milliseconds(60))

        let woken = try await offThePool { () -> (Bool, Duration) in
            Thread { usleep(20_000); wakeup.signal() }.start()
            let start = ContinuousClock.now
            return (wakeup.wait(upTo: .seconds(30)), ContinuousClock.now - start)
        }
        #expect(woken.0 == true)
        #expect(woken.1 < .seconds(10), "woken by the signal, not at the wait's 30 s")
        #expect(wakeup.isSignalled, "the signal stays pending for the caller to drain")
        wakeup.drain()
        #expect(!wakeup.isSignalled)
    }

    /// Blocking waits run on a thread of their own, never on the cooperative pool.
    private func offThePool<T: Sendable>(_ body: @escaping @Sendable () -> T) async throws -> T {
        await withCheckedContinuation { continuation in Thread { continuation.resume(returning: body()) }.start() }
    }
}
