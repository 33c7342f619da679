import Foundation

/// Runs blocking work (waiting for a process, polling a socket) on a thread of its own,
/// so that tests never hold one of the few threads of Swift's cooperative pool: with two
/// cores the pool has two threads, and a test blocking both stalls every other test.
public func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}
