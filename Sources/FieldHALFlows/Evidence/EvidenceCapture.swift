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
    public var audioDuration: Duration = .seconds(10)
    /// The VIDEO clip: Motion-JPEG AVI at the size and rate the camera offers nearest to these.
    public var video = VideoRequest(duration: .seconds(10))
    /// The silent capture after a duress sign-in or unlock: its items are never listed at the device.
    public var silent = false

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
    public func captureDuressEvidence(for record: SessionRecord) async -> [EvidenceItem] {
        let note = "Duress sign-in by \(record.customerRef) at \(ISO8601DateFormatter().string(from: record.signedInAt))."
        return await capture([.text, .nearby, .photo, .audio, .video], incidentId: record.alertId ?? record.sessionId, note: note)
    }

    /// Captures each kind in turn; returns what went into the queue (items and errors).
    public func capture(_ kinds: [EvidenceKind], incidentId: String, note: String) async -> [EvidenceItem] {
        var items: [EvidenceItem] = []
        for kind in kinds {
            do {
                items.append(try await capture(kind, incidentId: incidentId, note: note))
            } catch {
                if let item = try? queue.recordCaptureError(kind: kind, incidentId: incidentId, message: "\(error)", silent: silent) {
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
            return try queue.add(kind: .photo, contentType: "image/jpeg", incidentId: incidentId, bytes: photo.jpeg, silent: silent)
        case .audio:
            guard let microphone else { throw Self.missing("microphone") }
            return try await captureThroughScratchFile(.audio, "wav", contentType: "audio/wav", incidentId: incidentId) { scratch in
                _ = try await microphone.record(RecordingRequest(duration: audioDuration), to: scratch)
            }
        case .video:
            guard let camera else { throw Self.missing("camera") }
            return try await captureThroughScratchFile(.video, "avi", contentType: "video/x-msvideo", incidentId: incidentId) { scratch in
                _ = try await camera.recordVideo(video, to: scratch)
            }
        case .text:
            return try queue.add(kind: .text, contentType: "text/plain; charset=utf-8", incidentId: incidentId, bytes: Array(note.utf8), silent: silent)
        case .nearby:
            struct Nearby: Encodable { var capturedAt: Date; var latitude, longitude, accuracyMeters: Double?; var source: String }
            var record = Nearby(capturedAt: Date(), source: "none")
            if let location, let reading = try? await location.currentFix(.flows) {
                record.latitude = reading.fix.latitude
                record.longitude = reading.fix.longitude
                record.accuracyMeters = reading.fix.horizontalAccuracy
                record.source = reading.source.rawValue
            }
            let encoder = JSONEncoder()
            encoder.dateEncodingStrategy = .iso8601
            encoder.outputFormatting = [.sortedKeys]
            return try queue.add(kind: .nearby, contentType: "application/json", incidentId: incidentId, bytes: Array(try encoder.encode(record)), silent: silent)
        }
    }

    /// Records into a dot-file in the queue's own directory (0700, and removed on the next
    /// open if a kill leaves it), seals it into the queue as it is read, then removes it:
    /// a recording is never kept unsealed.
    private func captureThroughScratchFile(_ kind: EvidenceKind, _ fileExtension: String, contentType: String, incidentId: String,
                                           record: (String) async throws -> Void) async throws -> EvidenceItem {
        let scratch = queue.directory + "/.capture-\(EvidenceQueue.newID()).\(fileExtension)"
        defer { unlink(scratch) }
        try await record(scratch)
        return try queue.add(kind: kind, contentType: contentType, incidentId: incidentId, file: scratch, silent: silent)
    }

    static func missing(_ device: String) -> FieldHALError {
        FieldHALError(.notConfigured, subject: "evidence", detail: "no \(device) in this kit")
    }
}
