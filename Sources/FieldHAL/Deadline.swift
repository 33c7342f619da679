/// Runs `operation`, throwing `FieldHALError.timeout` if it has not finished within
/// `duration`. The operation is cancelled when the deadline passes or the caller is
/// cancelled; the function returns only after the operation has ended.
public func withDeadline<T: Sendable>(
    _ duration: Duration,
    subject: String = "",
    waitingFor what: String = "result",
    operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            try await Task.sleep(for: duration)
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next() else {
            throw FieldHALError.cancelled(subject)
        }
        guard let value = first else {
            throw FieldHALError.timeout(subject, after: duration, waitingFor: what)
        }
        return value
    }
}
