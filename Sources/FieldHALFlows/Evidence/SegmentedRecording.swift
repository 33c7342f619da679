import FieldHAL
import Foundation
import Transrify

/// Records one kind of evidence (audio or video) as a sequence of segments, each a complete
/// file of its own recorded into memory (`MemoryFile`), sealed into the queue the moment it
/// closes while the next one records, and chained to the one before it by its SHA-256
/// (issue 19). Plaintext never reaches the disk; a kill loses at most the segment being
/// recorded (memory), never one already sealed.
struct SegmentedRecording: Sendable {
    var queue: EvidenceQueue
    var kind: EvidenceKind
    var contentType: String
    var incidentId: String
    var silent: Bool
    /// Each segment's length (the last may be shorter, to end at `total`).
    var segmentLength: Duration
    var total: Duration
    /// Asked before each segment after the first: false ends the recording there (a sign-out).
    var keepRecording: @Sendable () async -> Bool
    /// Hears each segment as it enters the queue (wakes the uploader).
    var queued: @Sendable (EvidenceItem) -> Void
    /// Records one segment of `length` into the file at the path; returns the seconds it holds.
    var record: @Sendable (_ path: String, _ length: Duration) async throws -> Double

    /// What was recorded and queued, and the error that ended the recording early, if one did:
    /// the segments sealed before it stay queued whatever happened after.
    struct Outcome: Sendable {
        var items: [EvidenceItem]
        var failure: (any Error)?
    }

    private struct Closed: Sendable {
        var file: MemoryFile
        var sequence: Int
        var startedAt: Date
        var seconds: Double
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
                do {
                    var recorded = Duration.zero
                    var sequence = 0
                    // The first segment whatever happens: a sign-out at once must not leave
                    // the server with nothing of this kind.
                    while recorded < total {
                        if sequence > 0, !(await keepRecording()) { break }
                        try Task.checkCancellation()
                        let length = min(segmentLength, total - recorded)
                        // One neutral name for every kind: /proc/PID/fd shows it (to root and
                        // the daemon's user) and must say no more than the devices do.
                        let file = try MemoryFile(name: "fieldhal")
                        let startedAt = Date()
                        let seconds = try await record(file.path, length)
                        closer.yield(Closed(file: file, sequence: sequence, startedAt: startedAt, seconds: seconds))
                        sequence += 1
                        recorded += length
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
                        let item = try queue.add(kind: kind, contentType: contentType, incidentId: incidentId, memory: segment.file, silent: silent,
                                                 segment: .init(recording: recording, sequence: segment.sequence, startedAt: segment.startedAt,
                                                                durationSeconds: segment.seconds, previousSHA256: previous))
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
