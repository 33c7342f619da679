import FieldHAL
import Foundation
import Transrify

/// Records one kind of evidence (audio or video) as a sequence of segments, each a complete
/// file of its own recorded into memory (`MemoryFile`, through the device's
/// `RecordingSegments` recording: one stream cut between frames where the backend can),
/// sealed into the queue the moment it closes while the next one records, and chained to
/// the one before it by its SHA-256 (issue 19). Plaintext never reaches the disk; a kill
/// loses at most the segment being recorded (memory), never one already sealed.
struct SegmentedRecording: Sendable {
    var queue: EvidenceQueue
    var kind: EvidenceKind
    var contentType: String
    var incidentId: String
    var silent: Bool
    /// Each segment's length (the last may be shorter, to end at the recording's duration).
    var segmentLength: Duration
    /// Asked every `signOutCheck` while recording: false ends the recording at the next
    /// segment boundary (a sign-out). The first segment is always recorded whole.
    var keepRecording: @Sendable () async -> Bool
    var signOutCheck: Duration = .milliseconds(250)
    /// Hears each segment as it enters the queue (wakes the uploader).
    var queued: @Sendable (EvidenceItem) -> Void
    /// Records the whole recording in segments of `length`, handing each to `closed` as it
    /// closes, until its duration or until `finish` is asked.
    var record: @Sendable (_ length: Duration, _ finish: RecordingFinish, _ closed: @escaping @Sendable (Closed) -> Void) async throws -> Void

    /// What was recorded and queued, and the error that ended the recording early, if one did:
    /// the segments sealed before it stay queued whatever happened after.
    struct Outcome: Sendable {
        var items: [EvidenceItem]
        var failure: (any Error)?
    }

    struct Closed: Sendable {
        var file: MemoryFile
        var sequence: Int
        var startedAt: Date
        var seconds: Double

        init<Recording>(_ segment: RecordedSegment<Recording>) {
            (file, sequence, startedAt, seconds) = (segment.file, segment.sequence, segment.startedAt, segment.seconds)
        }
    }

    private enum Finished: Sendable {
        case recorder((any Error)?)
        case sealer([EvidenceItem], (any Error)?)
    }

    func run() async -> Outcome {
        let recording = EvidenceQueue.newID()
        // Unbounded on purpose, but it never grows: sealing a segment takes milliseconds and
        // recording the next one takes seconds.
        let (closed, closer) = AsyncStream.makeStream(of: Closed.self)
        return await withTaskGroup(of: Finished.self) { group in
            group.addTask { [self] in
                defer { closer.finish() }
                let finish = RecordingFinish()
                do {
                    try await withThrowingTaskGroup(of: Void.self) { watching in
                        // A sign-out ends the recording at the next boundary, not mid-segment:
                        // what is being recorded is kept whole.
                        watching.addTask { [self] in
                            while true {
                                try await Task.sleep(for: signOutCheck)
                                if !(await keepRecording()) { return finish.finish() }
                            }
                        }
                        try await record(segmentLength, finish) { closer.yield($0) }
                        watching.cancelAll()
                    }
                    return .recorder(nil)
                } catch {
                    return .recorder(error)
                }
            }
            group.addTask { [self] in
                var items: [EvidenceItem] = []
                var previous: String?
                for await segment in closed {
                    do {
                        let place = EvidenceItem.Segment(recording: recording, sequence: segment.sequence, startedAt: segment.startedAt,
                                                         durationSeconds: segment.seconds, previousSHA256: previous)
                        let item = try await EvidenceSealer.seal { [queue, kind, contentType, incidentId, silent] in
                            try queue.add(kind: kind, contentType: contentType, incidentId: incidentId, memory: segment.file, silent: silent, segment: place)
                        }
                        previous = item.sha256
                        items.append(item)
                        queued(item)
                    } catch {
                        // A full disk: what is sealed stays; recording more would only be lost.
                        return .sealer(items, error)
                    }
                }
                return .sealer(items, nil)
            }
            var items: [EvidenceItem] = []
            var failure: (any Error)?
            for await finished in group {
                switch finished {
                case .recorder(let error):
                    failure = failure ?? error
                case .sealer(let sealed, let error):
                    items = sealed
                    if let error {
                        failure = error
                        group.cancelAll()
                    }
                }
            }
            return Outcome(items: items, failure: failure)
        }
    }
}
