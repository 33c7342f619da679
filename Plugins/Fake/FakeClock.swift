#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Scripted time for the fakes: a schedule is measured from the moment the device
/// opened, so the same configuration plays out the same way on every run.
struct ScriptClock: Sendable {
    let start = ContinuousClock.now
    let startDate = Date()

    /// Milliseconds since the device opened.
    var elapsedMilliseconds: Int {
        let elapsed = ContinuousClock.now - start
        return Int(elapsed.wholeMilliseconds)
    }

    /// Sleeps until `milliseconds` after opening (at once if that has passed).
    func sleep(untilMilliseconds milliseconds: Int, subject: String) async throws {
        try await sleepCancellable(until: start + .milliseconds(milliseconds), subject: subject)
    }

    func instant(atMilliseconds milliseconds: Int) -> ContinuousClock.Instant {
        start + .milliseconds(milliseconds)
    }

    func date(atMilliseconds milliseconds: Int) -> Date {
        startDate.addingTimeInterval(Double(milliseconds) / 1000)
    }
}

/// Sleeps for `duration`, throwing FieldHAL's typed `.cancelled` when the task is cancelled.
func sleepCancellable(for duration: Duration, subject: String) async throws {
    do {
        try await Task.sleep(for: duration)
    } catch {
        throw FieldHALError.cancelled(subject)
    }
}

/// Sleeps until `instant`, throwing FieldHAL's typed `.cancelled` when the task is cancelled.
func sleepCancellable(until instant: ContinuousClock.Instant, subject: String) async throws {
    do {
        try await Task.sleep(until: instant, clock: .continuous)
    } catch {
        throw FieldHALError.cancelled(subject)
    }
}

import FieldHAL
