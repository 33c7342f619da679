import FieldHAL
import Foundation
import Transrify

/// Captures evidence through whatever the kit has (Req 19, 21) and queues it. A kind whose
/// device is missing or fails is recorded in the queue as an error for that kind; the
/// other kinds go on (Req 21.5). Nothing is printed.
public struct EvidenceCapture: Sendable {
    public var queue: EvidenceQueue
    public var camera: (any Camera)?
    public var microphone: (any Microphone)?
    public var location: (any LocationProvider)?
    /// The kit's other cameras and microphones with the `evidence` role: in segments, each
    /// records beside the first as a chain of its own (its own recording id) under the same
    /// incident, listed in the same manifest. The photo and the whole-file pipeline use the
    /// first only.
    public var moreCameras: [any Camera] = []
    public var moreMicrophones: [any Microphone] = []
    public var audioDuration: Duration = .seconds(10)
    /// The VIDEO clip: Motion-JPEG AVI at the size and rate the camera offers nearest to these.
    public var video = VideoRequest(duration: .seconds(10))
    /// The silent capture after a duress sign-in or unlock: its items are never listed at the device.
    public var silent = false
    /// Audio and video in segments of this length, recorded at the same time and queued as
    /// each closes (issue 19); nil: the whole-file pipeline (each kind in turn, one file
    /// each), kept as the baseline `bench seizure` measures against.
    public var segmentLength: Duration? = .seconds(4)
    /// Asked every quarter second while recording: false ends the recordings at their next
    /// segment boundary (the session signed out).
    public var keepRecording: @Sendable () async -> Bool = { true }
    /// Hears each item as it enters the queue (the uploader beside the capture waits on it).
    public var queued: @Sendable (EvidenceItem) -> Void = { _ in }
    /// Hears what each segment holds as it closes: its frames (video) or samples (audio),
    /// and those the device skipped (video) or the overruns (audio). `bench seizure` reports
    /// the video's rate and dropped frames from it.
    public var segmentRecorded: @Sendable (_ kind: EvidenceKind, _ frames: Int, _ dropped: Int) -> Void = { _, _, _ in }
    /// How long to wait for a live fix after the cached one has gone out as NEARBY.
    public var liveFixWait: Duration = .seconds(5)

    public init(queue: EvidenceQueue, camera: (any Camera)?, microphone: (any Microphone)?, location: (any LocationProvider)?) {
        self.queue = queue
        self.camera = camera
        self.microphone = microphone
        self.location = location
    }

    /// The kit's camera, microphone and GPS, whichever it has.
    public init(queue: EvidenceQueue, kit: Kit) {
        self.init(queue: queue, camera: try? kit.camera(), microphone: try? kit.microphone(), location: try? kit.location())
    }

    /// Limited mode's capture (Req 19, 21): every kind, filed under the duress alert's
    /// incident (the session's, if the alert has not gone out yet).
    /// With an `uploader`, each item goes up as it enters the queue, while the recording goes
    /// on (issue 19): a kit taken mid-recording has already sent what it recorded before.
    public func captureDuressEvidence(for record: SessionRecord, uploadingWith uploader: EvidenceUploader? = nil) async -> [EvidenceItem] {
        let note = "Duress sign-in by \(record.customerRef) at \(ISO8601DateFormatter().string(from: record.signedInAt))."
        return await captureIncident(record.alertId ?? record.sessionId, note: note, uploadingWith: uploader)
    }

    /// Every kind for one incident: in segments (`segmentLength`) or the whole-file pipeline,
    /// with the uploads beside it when an `uploader` is given.
    public func captureIncident(_ incidentId: String, note: String, uploadingWith uploader: EvidenceUploader? = nil) async -> [EvidenceItem] {
        guard let uploader else { return await captureEveryKind(incidentId, note: note) }
        let (wakeups, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        var capture = self
        let heard = queued
        capture.queued = { item in
            heard(item)
            wake.yield()
        }
        return await withTaskGroup(of: [EvidenceItem].self) { group in
            group.addTask {
                for await _ in wakeups { _ = try? await uploader.flush() }
                return []
            }
            let items = await capture.captureEveryKind(incidentId, note: note)
            wake.finish()
            await group.waitForAll()
            return items
        }
    }

    private func captureEveryKind(_ incidentId: String, note: String) async -> [EvidenceItem] {
        guard let segmentLength else {
            // Each item as it is queued, here too (the uploader beside it hears them).
            var items: [EvidenceItem] = []
            for kind in [EvidenceKind.text, .nearby, .photo, .audio, .video] {
                let captured = await capture([kind], incidentId: incidentId, note: note)
                captured.forEach(queued)
                items += captured
            }
            return items
        }
        return await captureInSegments(incidentId: incidentId, note: note, segmentLength: segmentLength)
    }

    /// Issue 19's order: TEXT and the cached fix at once (they are on their way before any
    /// device has started); then the audio recording, beside the PHOTO and then the video
    /// recording (one camera); and a live fix as a second NEARBY if one comes within
    /// `liveFixWait`; last, the manifest. Every item is handed to `queued` as it enters the queue.
    func captureInSegments(incidentId: String, note: String, segmentLength: Duration) async -> [EvidenceItem] {
        var items = await capture([.text], incidentId: incidentId, note: note)
        let cached = Self.nearby(await location?.lastKnownFix().map { ($0.fix, "cached") })
        if let item = try? await seal({ [queue, silent] in
            try queue.add(kind: .nearby, contentType: "application/json", incidentId: incidentId, bytes: cached, silent: silent)
        }) {
            items.append(item)
        }
        items.forEach(queued)
        let parts = await withTaskGroup(of: (Int, [EvidenceItem]).self) { group in
            group.addTask { (0, await liveNearby(incidentId: incidentId)) }
            group.addTask {
                var camera = await capture([.photo], incidentId: incidentId, note: note)
                camera.forEach(queued)
                camera += await recordInSegments(.video, incidentId: incidentId, segmentLength: segmentLength)
                return (1, camera)
            }
            group.addTask { (2, await recordInSegments(.audio, incidentId: incidentId, segmentLength: segmentLength)) }
            // The other evidence devices, each its own recording, at the same time.
            for (index, camera) in moreCameras.enumerated() {
                group.addTask { (3 + index, await recordInSegments(.video, incidentId: incidentId, segmentLength: segmentLength, camera: camera)) }
            }
            for (index, microphone) in moreMicrophones.enumerated() {
                let place = 3 + moreCameras.count + index
                group.addTask { (place, await recordInSegments(.audio, incidentId: incidentId, segmentLength: segmentLength, microphone: microphone)) }
            }
            return await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
        }
        items += (0..<(3 + moreCameras.count + moreMicrophones.count)).flatMap { parts[$0] ?? [] }
        if let manifest = try? await closingManifest(incidentId: incidentId, listing: items) {
            queued(manifest)
            items.append(manifest)
        }
        return items
    }

    /// The incident's last item (issue 19): every item before it, segments with their place,
    /// so that the server can tell what never arrived — the chain cannot show the last
    /// segments missing. A kit stopped before this point sends none, and the server knows
    /// the recordings did not end.
    private func closingManifest(incidentId: String, listing items: [EvidenceItem]) async throws -> EvidenceItem {
        let manifest = EvidenceManifest(incidentId: incidentId, closedAtMs: Int64(Date().timeIntervalSince1970 * 1000), items: items.map {
            EvidenceManifest.Item(kind: $0.kind, size: $0.size, sha256: $0.sha256, segment: $0.segment.map(EvidenceUploader.wire))
        })
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let bytes = Array(try encoder.encode(manifest))
        // A last word: the process may have run out of descriptors (`DescriptorReserve`).
        return try await lastWord { [queue, silent] in
            try queue.add(kind: .text, contentType: EvidenceManifest.contentType, incidentId: incidentId, bytes: bytes, silent: silent)
        }
    }

    /// `work` sealed as a last word: with the descriptor reserve, and tried again while it fails.
    private func lastWord(_ work: @escaping @Sendable () throws -> EvidenceItem) async throws -> EvidenceItem {
        try await Self.persistently {
            try await seal { try DescriptorReserve.evidence.lastWord(work) }
        }
    }

    /// The waits between attempts at a last word that failed even with the reserve given
    /// back: about 8 s in all.
    static let lastWordWaits: [Duration] = [.milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2), .seconds(4)]

    /// A last word (an error item, the manifest) tried again while it fails: the reserve
    /// helps only when its descriptors are below the process's limit, and descriptors come
    /// back (a burst of connections ends, the limit is raised). Giving up at once left a
    /// silent gap (the seizure bench in CI, 2026-11-28 at 09a153a and 835ca1d). Stops
    /// trying when the task is cancelled.
    static func persistently<T>(_ attempt: () async throws -> T) async throws -> T {
        for wait in lastWordWaits {
            do {
                return try await attempt()
            } catch {
                if Task.isCancelled { throw error }
                try? await Task.sleep(for: wait)
            }
        }
        return try await attempt()
    }

    /// A live fix within `liveFixWait`, as a second NEARBY; nothing if none comes.
    private func liveNearby(incidentId: String) async -> [EvidenceItem] {
        guard let location, let reading = try? await location.currentFix(FixRequest(timeout: liveFixWait, maxAge: nil)),
              reading.source == .live else { return [] }
        let live = Self.nearby((reading.fix, "live"))
        guard let item = try? await seal({ [queue, silent] in
            try queue.add(kind: .nearby, contentType: "application/json", incidentId: incidentId, bytes: live, silent: silent)
        }) else { return [] }
        queued(item)
        return [item]
    }

    /// One kind recorded in segments; a failure ends it with an error item after the
    /// segments already queued (a kind whose device is missing gets only the error item).
    /// `camera` and `microphone`: another of the kit's evidence devices than the first.
    private func recordInSegments(_ kind: EvidenceKind, incidentId: String, segmentLength: Duration,
                                  camera: (any Camera)? = nil, microphone: (any Microphone)? = nil) async -> [EvidenceItem] {
        let camera = camera ?? self.camera, microphone = microphone ?? self.microphone
        let contentType: String
        let record: @Sendable (Duration, RecordingFinish, @escaping @Sendable (SegmentedRecording.Closed) -> Void) async throws -> Void
        switch kind {
        case .audio:
            guard let microphone else { return await recordError(kind, incidentId: incidentId, Self.missing("microphone")) }
            contentType = "audio/wav"
            let request = RecordingRequest(duration: audioDuration)
            let heard = segmentRecorded
            record = { length, finish, closed in
                try await microphone.record(request, in: RecordingSegments(length: length, finish: finish) { segment in
                    heard(.audio, segment.recording.frames, segment.recording.overruns)
                    closed(.init(segment))
                })
            }
        case .video:
            guard let camera else { return await recordError(kind, incidentId: incidentId, Self.missing("camera")) }
            contentType = "video/x-msvideo"
            let request = video
            let heard = segmentRecorded
            record = { length, finish, closed in
                try await camera.recordVideo(request, in: RecordingSegments(length: length, finish: finish) { segment in
                    heard(.video, segment.recording.frames, segment.recording.droppedFrames)
                    closed(.init(segment))
                })
            }
        default:
            return []
        }
        let recording = SegmentedRecording(queue: queue, kind: kind, contentType: contentType, incidentId: incidentId, silent: silent,
                                           segmentLength: segmentLength, keepRecording: keepRecording, queued: queued, record: record)
        let outcome = await recording.run()
        // The kit's own stop (this task cancelled) is not a failure of the device: no error
        // item, however the device told it (a wait woken by the cancellation throws
        // `FieldHALError` `cancelled`, in process as through a plugin process). A `cancelled`
        // while this task goes on (a plugin stopped by a reload) is told like any failure.
        guard let failure = outcome.failure, !(failure is CancellationError), !Task.isCancelled else { return outcome.items }
        return outcome.items + (await recordError(kind, incidentId: incidentId, failure))
    }

    private func recordError(_ kind: EvidenceKind, incidentId: String, _ error: any Error) async -> [EvidenceItem] {
        let message = "\(error)"
        // A last word, like the manifest: what ended the recording may be the process out of
        // descriptors, and the item saying so needs files of its own.
        guard let item = try? await lastWord({ [queue, silent] in
            try queue.recordCaptureError(kind: kind, incidentId: incidentId, message: message, silent: silent)
        }) else { return [] }
        queued(item)
        return [item]
    }

    /// NEARBY's record: where the kit was, and whether the fix was live, cached or missing.
    static func nearby(_ reading: (fix: Fix, source: String)?) -> [UInt8] {
        struct Nearby: Encodable { var capturedAt: Date; var latitude, longitude, accuracyMeters: Double?; var source: String }
        var record = Nearby(capturedAt: Date(), source: "none")
        if let (fix, source) = reading {
            record.latitude = fix.latitude
            record.longitude = fix.longitude
            record.accuracyMeters = fix.horizontalAccuracy
            record.source = source
        }
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys]
        return Array((try? encoder.encode(record)) ?? Data("{}".utf8))
    }

    /// Captures each kind in turn; returns what went into the queue (items and errors).
    public func capture(_ kinds: [EvidenceKind], incidentId: String, note: String) async -> [EvidenceItem] {
        var items: [EvidenceItem] = []
        for kind in kinds {
            do {
                items.append(try await capture(kind, incidentId: incidentId, note: note))
            } catch {
                let message = "\(error)"
                if let item = try? await seal({ [queue, silent] in
                    try queue.recordCaptureError(kind: kind, incidentId: incidentId, message: message, silent: silent)
                }) {
                    items.append(item)
                }
            }
        }
        return items
    }

    public func capture(_ kind: EvidenceKind, incidentId: String, note: String) async throws -> EvidenceItem {
        switch kind {
        case .photo:
            guard let camera else { throw Self.missing("camera") }
            let photo = try await camera.captureStill(PhotoRequest())
            return try await seal { [queue, silent] in
                try queue.add(kind: .photo, contentType: "image/jpeg", incidentId: incidentId, bytes: photo.jpeg, silent: silent)
            }
        case .audio:
            guard let microphone else { throw Self.missing("microphone") }
            return try await captureInMemory(.audio, contentType: "audio/wav", incidentId: incidentId) { scratch in
                _ = try await microphone.record(RecordingRequest(duration: audioDuration), to: scratch)
            }
        case .video:
            guard let camera else { throw Self.missing("camera") }
            return try await captureInMemory(.video, contentType: "video/x-msvideo", incidentId: incidentId) { scratch in
                _ = try await camera.recordVideo(video, to: scratch)
            }
        case .text:
            return try await seal { [queue, silent] in
                try queue.add(kind: .text, contentType: "text/plain; charset=utf-8", incidentId: incidentId, bytes: Array(note.utf8), silent: silent)
            }
        case .nearby:
            let reading = try? await location?.currentFix(.flows)
            return try queue.add(kind: .nearby, contentType: "application/json", incidentId: incidentId,
                                 bytes: Self.nearby(reading.map { ($0.fix, $0.source.rawValue) }), silent: silent)
        }
    }

    /// Records into a file in memory (`MemoryFile`), then seals it into the queue: the
    /// recording never reaches the disk in plaintext, and a kill leaves nothing behind.
    private func captureInMemory(_ kind: EvidenceKind, contentType: String, incidentId: String,
                                           record: (RecordingDestination) async throws -> Void) async throws -> EvidenceItem {
        let scratch = try MemoryFile(name: "fieldhal")  // neutral, as a segment's (SegmentedRecording)
        try await record(.memory(scratch))
        return try await seal { [queue, silent] in
            try queue.add(kind: kind, contentType: contentType, incidentId: incidentId, memory: scratch, silent: silent)
        }
    }

    /// Seals on the sealer's thread (`EvidenceSealer`), never on the cooperative pool.
    private func seal(_ work: @escaping @Sendable () throws -> EvidenceItem) async throws -> EvidenceItem {
        try await EvidenceSealer.seal(work)
    }

    static func missing(_ device: String) -> FieldHALError {
        FieldHALError(.notConfigured, subject: "evidence", detail: "no \(device) in this kit")
    }
}
