import FieldHAL

/// Several devices' streams followed at once (`gps watch --all`, `nfc watch --device a
/// --device b`), merged in the order their items arrive, each with its device's name.
public enum SeveralWatches {
    /// Follows every source until `handle` says to stop (true), one stream fails (its error),
    /// or every stream has ended. Each stream is read in a task of its own; the others are
    /// cancelled when the follow ends.
    public static func follow<Item: Sendable>(_ sources: [(name: String, items: AsyncThrowingStream<Item, any Error>)],
                                              until handle: (Item, String) throws -> Bool) async throws {
        let (merged, sink) = AsyncThrowingStream<(Item, String), any Error>.makeStream()
        let running = LockedValue(sources.count)
        if sources.isEmpty { sink.finish() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for source in sources {
                group.addTask {
                    do {
                        for try await item in source.items { sink.yield((item, source.name)) }
                        // The last stream to end ends the merge.
                        if running.withLock({ $0 -= 1; return $0 == 0 }) { sink.finish() }
                    } catch {
                        sink.finish(throwing: error)
                    }
                }
            }
            for try await (item, name) in merged where try handle(item, name) { break }
            group.cancelAll()
        }
    }
}
