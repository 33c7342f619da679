/// A `Duration` in the units system calls and the wire take: one conversion each, written
/// once (there were five hand-written copies, one of them rounding a poll's wait down).
extension Duration {
    /// `poll(2)`'s timeout: whole milliseconds rounded up (a 0.4 ms wait must not become a
    /// busy 0), clamped to Int32; negative durations are 0.
    public var pollTimeout: Int32 {
        guard self > .zero else { return 0 }
        let (seconds, attoseconds) = components
        let milliseconds = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        return Int32(clamping: milliseconds)
    }

    /// Whole milliseconds, rounded down (toward zero), as a report or the wire states a
    /// length: `timeoutMs`, a clip's `milliseconds`, a log line.
    public var wholeMilliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
