#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization

/// A recording cut into segments as it goes (issue 19): each segment a complete file of its
/// own (a WAV, a Motion-JPEG AVI) in memory, handed over the moment it closes while the
/// next one records. A backend that can keeps one stream from the device for the whole
/// recording and cuts it between two frames, so nothing is lost at a boundary; the default
/// (`recordOneAtATime`) records each segment as a recording of its own, which restarts
/// the device between segments.
///
/// When the device fails mid-segment (unplugged, stalled), a backend with one stream closes
/// the segment under way at its last frame and hands it over before it throws: what was
/// recorded is kept. A cancellation drops the segment under way.
public struct RecordingSegments<Recording: Sendable>: Sendable {
    /// Each segment's length; the last may be shorter, to end at the request's duration.
    public var length: Duration
    /// Ends the recording at its next segment boundary (a sign-out).
    public var finish: RecordingFinish
    /// Hears each segment as it closes, in order, on the recording's thread: it must return
    /// at once (hand the segment on, as to an `AsyncStream`).
    public var closed: @Sendable (RecordedSegment<Recording>) -> Void

    public init(length: Duration, finish: RecordingFinish = RecordingFinish(), closed: @escaping @Sendable (RecordedSegment<Recording>) -> Void) {
        self.length = length
        self.finish = finish
        self.closed = closed
    }

    public func validate(subject: String) throws(FieldHALError) {
        guard length >= .milliseconds(100), length <= .seconds(600) else {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "segment length \(length.secondsDescription) is outside 0.1 s–10 min")
        }
    }

    /// Segment after segment, each recorded on its own by `record(length, destination)` into
    /// a new `MemoryFile`, until `total` or `finish`. What a backend without a segmented stream
    /// does; a cancellation or a failure ends it, the segments handed over before staying
    /// the caller's. A segment that `endedEarly` says the device failed in is handed over,
    /// then its failure thrown.
    public func recordOneAtATime(total: Duration, seconds: (Recording) -> Double, endedEarly: (Recording) -> FieldHALError? = { _ in nil },
                                 _ record: (_ length: Duration, _ destination: RecordingDestination) async throws -> Recording) async throws {
        var recorded = Duration.zero
        var sequence = 0
        while recorded < total {
            if sequence > 0, finish.isFinished { return }
            try Task.checkCancellation()
            let segmentLength = min(length, total - recorded)
            // One neutral name: /proc/PID/fd shows it and must say no more than the devices do.
            let file = try MemoryFile(name: "fieldhal")
            let startedAt = Date()
            let recording = try await record(segmentLength, .memory(file))
            closed(RecordedSegment(sequence: sequence, startedAt: startedAt, seconds: seconds(recording), file: file, recording: recording))
            if let failure = endedEarly(recording) { throw failure }
            sequence += 1
            recorded += segmentLength
        }
    }
}

/// One closed segment of a `RecordingSegments` recording.
public struct RecordedSegment<Recording: Sendable>: Sendable {
    /// 0, 1, 2… with no gap.
    public var sequence: Int
    /// When its first frame was taken.
    public var startedAt: Date
    /// The media time it holds.
    public var seconds: Double
    /// The whole file, the receiver's from now on.
    public var file: MemoryFile
    /// What the backend reports of this segment (its path "memory").
    public var recording: Recording

    public init(sequence: Int, startedAt: Date, seconds: Double, file: MemoryFile, recording: Recording) {
        self.sequence = sequence
        self.startedAt = startedAt
        self.seconds = seconds
        self.file = file
        self.recording = recording
    }
}

/// Asks a segmented recording to end at its next segment boundary: the segment being
/// recorded closes whole at its length, and no other starts. Unlike a cancellation, which
/// drops the segment under way, nothing recorded is lost. Backends read `isFinished` at
/// each boundary; a plugin host hears it through `onFinish` and tells its plugin.
public final class RecordingFinish: Sendable {
    private let state = Mutex<(finished: Bool, handlers: [@Sendable () -> Void])>((false, []))

    public init() {}

    public var isFinished: Bool { state.withLock { $0.finished } }

    public func finish() {
        let handlers = state.withLock { state -> [@Sendable () -> Void] in
            guard !state.finished else { return [] }
            state.finished = true
            defer { state.handlers = [] }
            return state.handlers
        }
        for handler in handlers { handler() }
    }

    /// Runs `handler` once when the recording is asked to finish (at once if it has been).
    public func onFinish(_ handler: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            guard !state.finished else { return true }
            state.handlers.append(handler)
            return false
        }
        if now { handler() }
    }
}
