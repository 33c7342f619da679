import FieldHAL

/// Runs every `attempt` at once; the first to answer wins and the others are cancelled (each
/// device's wait is cancellable). When none answers: the first failure of a device (one
/// unplugged), which says more than the others' timeouts; else the timeout. Several readers
/// as one (`FirstTagReader`), several fingerprint sensors as one (`AnySensor`).
func firstAnswer<T: Sendable>(_ attempts: [@Sendable () async throws -> T]) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        for attempt in attempts { group.addTask { try await attempt() } }
        var failures: [any Error] = []
        while let result = await group.nextResult() {
            switch result {
            case .success(let answer):
                group.cancelAll()
                return answer
            case .failure(let error):
                failures.append(error)
            }
        }
        try Task.checkCancellation()
        throw failures.first { ($0 as? FieldHALError)?.kind != .timeout } ?? failures[0]
    }
}
