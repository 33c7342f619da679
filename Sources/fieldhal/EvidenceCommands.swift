import ArgumentParser
import FieldHAL
import FieldHALComposition
import FieldHALAPI
import FieldHALFlows
import Foundation
import Transrify
import FieldHALCommandLine

struct EvidenceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "evidence", abstract: "Capture evidence into the encrypted queue, list it, upload it.",
        discussion: """
        Evidence is sealed with libsodium's secretstream in <state>/evidence as it is captured, \
        with its SHA-256 and size; it leaves the queue only when the server has confirmed it \
        (presign → PUT → finalize). Uploads resume after a restart or when the network returns. \
        What the kit captures by itself after a duress sign-in is uploaded in the background \
        and is never listed here (docs/stealth.md).
        """,
        subcommands: [Capture.self, Queue.self, Flush.self])

    struct Capture: FieldHALSubcommand {
        static let configuration = CommandConfiguration(commandName: "capture", abstract: "Capture one piece of evidence into the queue.")
        @OptionGroup var global: GlobalOptions
        @Argument(help: "photo, audio, video, text or nearby.") var kind: String
        @Option(help: "The note, for text.") var text: String?
        @Option(help: "Seconds of audio (default 10) or video (default evidence_video_seconds, else 10); 1–600.") var seconds: Int?
        @Option(help: "The incident (default: the signed-in session's).") var incident: String?

        func execute(_ environment: Environment) async throws {
            guard let evidenceKind = EvidenceKind(rawValue: kind.uppercased()) else {
                throw FieldHALError(.invalidArgument, subject: "evidence capture", detail: "\"\(kind)\" is not photo, audio, video, text or nearby")
            }
            if evidenceKind == .text, text == nil {
                throw FieldHALError(.invalidArgument, subject: "evidence capture text", detail: "give the note with --text")
            }
            let asked = APIEvidenceCapture(kind: evidenceKind.rawValue, text: text, seconds: seconds, incidentId: incident)
            // The daemon's limits, whoever captures: the same command is refused the same way.
            try asked.checkLimits()
            // A running daemon captures with the camera and microphone it holds.
            if let item = try await environment.throughDaemon({ try await $0.captureEvidence(asked) }) {
                let report = ItemReport(item)
                try Output.emit(report, json: global.json) { "queued \(report.line)" }
                return
            }
            // The session's id whatever its mode: an alert id here would show a duress sign-in
            // in this command's --json output. The server joins the session to its alert.
            let session = try environment.sessionStore().load()
            guard let incidentId = incident ?? session?.sessionId else { throw EvidenceCaptureError.noIncident }
            let queue = try EvidenceQueue(stateDirectory: environment.stateDirectory, vault: try environment.vault())
            let kit = await environment.loadKit(only: [.camera, .microphone, .location])
            var capture = EvidenceCapture(queue: queue, kit: kit)
            capture.audioDuration = .seconds(seconds ?? 10)
            capture.video = environment.evidenceVideo(seconds: seconds)
            let result = await Result { try await capture.capture(evidenceKind, incidentId: incidentId, note: text ?? "") }
            await kit.close()
            let item = try result.get()
            let report = ItemReport(item)
            try Output.emit(report, json: global.json) { "queued \(report.line)" }
        }
    }

    struct Queue: FieldHALSubcommand {
        static let configuration = CommandConfiguration(commandName: "queue", abstract: "List the evidence waiting to be uploaded.")
        @OptionGroup var global: GlobalOptions

        func execute(_ environment: Environment) async throws {
            let items: [ItemReport]
            if let answer = try await environment.throughDaemon({ try await $0.evidence() }) {
                items = answer.items.map(ItemReport.init)
            } else {
                let queue = try EvidenceQueue(stateDirectory: environment.stateDirectory, vault: try environment.vault(), exclusive: false)
                items = try queue.visibleItems().map(ItemReport.init)
            }
            try Output.emit(items, json: global.json) {
                items.isEmpty ? "the evidence queue is empty" : items.map(\.line).joined(separator: "\n")
            }
        }
    }

    struct Flush: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "flush",
            abstract: "Upload every queued item now, ignoring backoff.",
            discussion: """
            Exit status 0 when the queue is empty afterwards, 75 when items remain (offline, server errors). \
            Without a running service, each upload's progress is shown at a terminal (or asked for with --progress).
            """)
        @OptionGroup var global: GlobalOptions
        @OptionGroup var progress: ProgressOptions

        func execute(_ environment: Environment) async throws {
            var flushed = try await environment.throughDaemon { try await $0.flushEvidence() }
            if flushed == nil {
                let queue = try EvidenceQueue(stateDirectory: environment.stateDirectory, vault: try environment.vault())
                var uploader = EvidenceUploader(client: try environment.transrifyClient(), queue: queue)
                uploader.includeSilent = false  // the silent items are the background uploads' (see EvidenceUploader)
                let lines = LockedValue<[String: ProgressLine]>([:])
                let json = global.json, asked = progress.progress
                uploader.progress = { item, sent in
                    let line = lines.withLock { lines -> ProgressLine? in
                        if let line = lines[item.id] { return line }
                        lines[item.id] = ProgressLine("uploading \(item.kind.rawValue) \(item.id.prefix(18))", total: Double(item.size),
                                                      unit: .bytes, json: json, asked: asked)
                        return lines[item.id]
                    }
                    line?.update(Double(sent), force: sent == item.size)
                }
                defer { for line in lines.withLock({ Array($0.values) }) { line.finish() } }
                let report = try await uploader.flush(ignoringBackoff: true)
                flushed = APIEvidenceFlush(uploaded: report.uploaded, remaining: try queue.visibleItems().count, errors: report.deferred)
            }
            guard let flushed else { return }
            try Output.emit(flushed, json: global.json) {
                var lines = ["uploaded \(flushed.uploaded.count), remaining \(flushed.remaining)"]
                lines += flushed.errors.sorted { $0.key < $1.key }.map { "  \($0.key.prefix(18)): \($0.value)" }
                return lines.joined(separator: "\n")
            }
            if flushed.remaining > 0 { throw ExitCode(75) }
        }
    }

    struct ItemReport: Encodable {
        var id, kind, incident, phase: String
        var size: Int64
        var sha256: String
        var attempts: Int
        var lastError: String?
        /// The kind whose capture failed, when this TEXT item reports it.
        var failedKind: String?

        /// As the daemon reported it.
        init(_ item: APIEvidenceItem) {
            id = item.id
            kind = item.kind
            incident = item.incidentId
            phase = switch item.phase {
            case "queued" where item.uploadingSince != nil:
                "uploading (for \(Int(Date().timeIntervalSince(item.uploadingSince!))) s)"
            case "queued": "waiting to upload"
            default: "uploaded, waiting to finalize"
            }
            failedKind = item.failedKind
            size = item.bytes
            sha256 = item.sha256
            attempts = item.attempts
            lastError = item.lastError
        }

        init(_ item: EvidenceItem) {
            id = item.id
            kind = item.kind.rawValue
            incident = item.incidentId
            phase = switch item.phase {
            case .queued where item.uploadingSince != nil:
                "uploading (for \(Int(Date().timeIntervalSince(item.uploadingSince!))) s)"
            case .queued: "waiting to upload"
            case .uploaded: "uploaded, waiting to finalize"
            }
            failedKind = item.failedKind?.rawValue
            size = item.size
            sha256 = item.sha256
            attempts = item.attempts
            lastError = item.lastError
        }

        var line: String {
            var text = "\(id.prefix(18))  \(kind.padding(toLength: 6, withPad: " ", startingAt: 0))  \(phase)"
            if let failedKind { text += "  (reports: \(failedKind) not captured)" }
            text += "  \(size) bytes  sha256 \(sha256.prefix(16))…"
            if attempts > 0 { text += "  attempts \(attempts)" }
            if let lastError { text += "  (\(lastError))" }
            return text
        }
    }
}
