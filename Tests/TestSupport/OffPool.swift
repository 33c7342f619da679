import Foundation

/// Runs blocking work (waiting for a process, polling a socket) on a thread of its own,
/// so that tests never hold one of the few threads of Swift's cooperative pool: with two
/// cores the pool has two threads, and a test blocking both stalls every other test.
public func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}

/// Waits up to `within` for `condition`, which another thread makes true (a daemon's loop,
/// SwiftNIO's), looking every 10 ms: true when it came, false when the time ran out.
public func eventually(within: Duration = .seconds(10), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + within
    while !condition() {
        guard ContinuousClock.now < deadline else { return false }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return true
}
