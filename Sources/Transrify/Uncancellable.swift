import Foundation
import Synchronization

/// Runs `operation` in a task of its own that is never cancelled, and waits for it — unless
/// the caller is cancelled, in which case this throws `CancellationError` at once and leaves
/// the operation to finish (or to die with the process).
///
/// Why: a caller that gives up (a daemon's SIGTERM, a sign-out) returns at once, while the
/// request it started still completes, so the queue's next step finds the server where the
/// request left it rather than halfway (an upload cut mid-body is sent whole again). It came
/// in when requests went through URLSession, whose cancelled uploads could crash the process
/// on Linux (swift-corelibs-foundation, EasyHandle.swift: a `try!` on libcurl error 43);
/// AsyncHTTPClient cancels cleanly, but the behaviour the queue was tested with stays.
public func uncancellable<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) async throws -> T {
    let state = Mutex<(CheckedContinuation<T, any Error>?, Result<T, any Error>?)>((nil, nil))
    Task.detached {
        let result: Result<T, any Error>
        do { result = .success(try await operation()) } catch { result = .failure(error) }
        let waiting = state.withLock { state -> CheckedContinuation<T, any Error>? in
            defer { state.0 = nil }
            if state.0 == nil { state.1 = result }
            return state.0
        }
        waiting?.resume(with: result)
    }
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { continuation in
            let finished = state.withLock { state -> Result<T, any Error>? in
                if let result = state.1 { return result }
                state.0 = continuation
                return nil
            }
            if let finished { continuation.resume(with: finished) }
        }
    } onCancel: {
        let waiting = state.withLock { state -> CheckedContinuation<T, any Error>? in
            defer { state.0 = nil }
            state.1 = .failure(CancellationError())
            return state.0
        }
        waiting?.resume(throwing: CancellationError())
    }
}
