import ArgumentParser
import FieldHAL
import FieldHALCommandLine
import FieldHALComposition
import FieldHALFlows
import FieldHALSystem
import FieldHALVault
import Foundation
import Synchronization
import Transrify

/// `fieldhal-bench seizure` (issue 19): how soon the evidence of a duress capture is on the
/// server, and how much of a recording a kit taken at t seconds has already sent. The same
/// capture runs twice on the kit's devices against a private lab server: in segments with the
/// uploads beside it (what limited mode does now), and the whole-file pipeline with the
/// uploads after it (what it did before; `evidence_segment_seconds = 0`).
struct SeizureBench: FieldHALSubcommand {
    static let configuration = CommandConfiguration(
        commandName: "seizure",
        abstract: "Time from a duress verdict to evidence on the server, segments vs whole files; what a kit taken at t has sent.",
        discussion: """
        Starts fieldhal-labserver on 127.0.0.1, then runs the duress capture on the kit's camera, \
        microphone and GPS (the built-in fake kit unless --config names another: the fake's \
        devices run in real time) twice: "segments" (audio beside photo and video, in segments of \
        --segment-seconds, each uploaded as it closes) and "whole" (each kind in turn as one \
        file, uploaded after). Both record --seconds of audio and of video at \
        --width x --height and --fps. From the times the server confirmed each item (its \
        finalize), it reports the time from the verdict to the first item, the first audio and \
        the first video confirmed, and for each --taken-at time t: the seconds of audio and video \
        recorded by t and those confirmed on the server by t — what is left if the kit is \
        destroyed or cut off at t.

        Then the faults (--faults), each --taken-at time t in turn, the capture in a process of \
        its own: "kill" sends it SIGKILL at t, then reads what the server has, and reopens the \
        queue it left to check that every sealed item is whole; "cut" ends its connections and \
        refuses new ones from t for --cut-seconds, then lets it finish. A kill may lose the \
        segment being recorded and the one being uploaded (2 × --segment-seconds of each \
        kind); a cut, nothing. The faults take about --seconds plus t each: a few minutes at \
        the defaults (--faults none skips them).

        Exit 0 when both runs put every item on the server and every fault stayed within its \
        bound; 70 otherwise.
        """)
    static var fakeKitUnlessConfigured: Bool { true }
    @OptionGroup var global: GlobalOptions
    @Option(help: "Seconds of audio and of video recorded.") var seconds = 20
    @Option(help: "Segment length in seconds (the segments run).") var segmentSeconds = 4
    @Option(help: "Video size and rate.") var width = 640
    @Option(help: "Video size and rate.") var height = 480
    @Option(help: "Video size and rate.") var fps = 30
    @Option(help: "Times after the verdict (seconds, comma-separated) at which to count what was sent.")
    var takenAt = "2,5,10,20,30"
    @Option(help: "Which pipelines: segments, whole, or both.") var pipelines = "both"
    @Option(help: "Faults injected at each --taken-at time: kill, cut, both (kill and cut), descriptors (run out for --cut-seconds), or none.") var faults = "both"
    @Option(help: "How long a cut keeps the link down (or descriptors run out), in seconds.") var cutSeconds = 10.0
    /// `--json` is the global option's.
    var json: Bool { global.json }

    struct Run: Encodable {
        var pipeline: String
        var captureSeconds: Double
        var items: Int
        var itemsConfirmed: Int
        var firstConfirmedSeconds, firstAudioConfirmedSeconds, firstVideoConfirmedSeconds: Double?
        var allConfirmedSeconds: Double?
        var takenAt: [TakenAt]
        /// Segments only: the video frames recorded and those the camera skipped (the
        /// recorder fell behind), and the rate they make.
        var videoFrames: Int?
        var videoDroppedFrames: Int?
        var videoFramesPerSecond: Double?
    }

    struct TakenAt: Encodable {
        var seconds: Double
        var audioRecorded, audioConfirmed, videoRecorded, videoConfirmed: Double
        /// What a kit taken at `seconds` had recorded and not yet delivered.
        var lostAudio, lostVideo: Double

        init(seconds: Double, audioRecorded: Double, audioConfirmed: Double, videoRecorded: Double, videoConfirmed: Double) {
            (self.seconds, self.audioRecorded, self.audioConfirmed) = (seconds, audioRecorded, audioConfirmed)
            (self.videoRecorded, self.videoConfirmed) = (videoRecorded, videoConfirmed)
            lostAudio = max(0, audioRecorded - audioConfirmed)
            lostVideo = max(0, videoRecorded - videoConfirmed)
        }
    }

    struct Report: Encodable {
        var seconds: Int
        var segmentSeconds: Int
        var video: String
        var runs: [Run]
        /// Whole-file's first evidence time over the segments' (how many times sooner).
        var firstConfirmedRatio: Double?
        var firstAudioConfirmedRatio: Double?
        var firstVideoConfirmedRatio: Double?
        /// The capture killed or cut off at each time (`SeizureFaults`).
        var faults: [SeizureFaults.Run]
    }

    func execute(_ environment: Environment) async throws {
        guard seconds > 0, seconds <= 600, segmentSeconds > 0, segmentSeconds <= 60 else {
            throw FieldHALError(.invalidArgument, subject: "bench seizure", detail: "--seconds must be 1–600 and --segment-seconds 1–60")
        }
        let times = takenAt.split(separator: ",").compactMap { Double($0.trimmingCharacters(in: .whitespaces)) }
        guard !times.isEmpty, times.allSatisfy({ $0 > 0 }) else {
            throw FieldHALError(.invalidArgument, subject: "bench seizure", detail: "--taken-at must be positive seconds, comma-separated, e.g. 2,5,10")
        }
        let injected: [String] = switch faults {
        case "both": ["kill", "cut"]
        case "kill", "cut", "descriptors": [faults]
        case "none": []
        default: throw FieldHALError(.invalidArgument, subject: "bench seizure", detail: "--faults must be kill, cut, both, descriptors or none")
        }
        guard cutSeconds > 0, cutSeconds <= 300 else {
            throw FieldHALError(.invalidArgument, subject: "bench seizure", detail: "--cut-seconds must be above 0 and at most 300")
        }
        let chosen: [String] = switch pipelines {
        case "both": ["segments", "whole"]
        case "segments", "whole": [pipelines]
        default: throw FieldHALError(.invalidArgument, subject: "bench seizure", detail: "--pipelines must be segments, whole or both")
        }
        let scratch = try ScratchDirectory.make("fieldhal-bench-seizure")
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let lab = try LabProcess.start(directory: scratch + "/lab")
        defer { lab.stop() }
        let kit = try await environment.loadEvidenceKit()
        defer { Task { await kit.close() } }
        let progress = Progress(enabled: !json && isatty(STDERR_FILENO) == 1)
        var runs: [Run] = []
        for pipeline in chosen {
            progress.say("\(pipeline): recording \(seconds) s of audio and video…")
            runs.append(try await measure(pipeline, kit: kit, lab: lab, scratch: scratch + "/" + pipeline, times: times))
        }
        let faulted = SeizureFaults(seconds: seconds, segmentSeconds: segmentSeconds,
                                    video: VideoRequest(duration: .seconds(seconds), width: width, height: height, framesPerSecond: fps),
                                    cutSeconds: cutSeconds, config: global.config, lab: lab, scratch: scratch)
        var faultRuns: [SeizureFaults.Run] = []
        for fault in injected {
            for t in times {
                progress.say("\(fault) at \(t) s…")
                switch fault {
                case "kill": faultRuns.append(try await faulted.kill(at: t))
                case "cut": faultRuns.append(try await faulted.cut(at: t))
                default: faultRuns.append(try await faulted.descriptors(at: t))
                }
            }
        }
        let segments = runs.first { $0.pipeline == "segments" }, whole = runs.first { $0.pipeline == "whole" }
        func ratio(_ path: KeyPath<Run, Double?>) -> Double? {
            guard let fast = segments?[keyPath: path], let slow = whole?[keyPath: path], fast > 0 else { return nil }
            return slow / fast
        }
        let report = Report(seconds: seconds, segmentSeconds: segmentSeconds, video: "\(width)x\(height) at \(fps)", runs: runs,
                            firstConfirmedRatio: ratio(\.firstConfirmedSeconds), firstAudioConfirmedRatio: ratio(\.firstAudioConfirmedSeconds),
                            firstVideoConfirmedRatio: ratio(\.firstVideoConfirmedSeconds), faults: faultRuns)
        try Output.emit(report, json: json) { Self.text(report) }
        if runs.contains(where: { $0.itemsConfirmed < $0.items }) || faultRuns.contains(where: { !$0.withinBound }) {
            throw ExitCode(70)  // EX_SOFTWARE: evidence that never reached the server
        }
    }

    private func measure(_ pipeline: String, kit: Kit, lab: LabProcess, scratch: String, times: [Double]) async throws -> Run {
        let state = StateDirectory(path: scratch)
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let queue = try EvidenceQueue(stateDirectory: state, vault: try Vault(stateDirectory: state))
        let client = TransrifyClient(baseURL: lab.baseURL, tenantKey: lab.tenantKey)
        var capture = EvidenceCapture(queue: queue, kit: kit)
        capture.silent = true
        capture.audioDuration = .seconds(seconds)
        capture.video = VideoRequest(duration: .seconds(seconds), width: width, height: height, framesPerSecond: fps)
        capture.segmentLength = pipeline == "segments" ? .seconds(segmentSeconds) : nil
        let frames = Mutex((count: 0, dropped: 0, segments: 0))
        capture.segmentRecorded = { kind, count, dropped in
            if kind == .video { frames.withLock { $0.count += count; $0.dropped += dropped; $0.segments += 1 } }
        }
        let incident = "bench-\(pipeline)-\(UUID().uuidString.prefix(8).lowercased())"
        let uploader = EvidenceUploader(client: client, queue: queue)
        let verdict = Date()
        let started = ContinuousClock.now
        let items = await capture.captureIncident(incident, note: "bench seizure", uploadingWith: pipeline == "segments" ? uploader : nil)
        let captureSeconds = (ContinuousClock.now - started).seconds
        await uploader.uploadUntilDone(within: .seconds(120))
        let server = try await client.labState().evidence.filter { $0.incidentId == incident }
        // A segment by its place (a steady tone's segments are alike byte for byte), anything
        // else by its digest.
        func confirmedAt(_ item: EvidenceItem) -> Double? {
            let match = server.first { stored in
                if let segment = item.segment {
                    return stored.segment?.recording == segment.recording && stored.segment?.sequence == segment.sequence
                }
                return stored.segment == nil && stored.sha256 == item.sha256 && stored.size == item.size
            }
            return match?.finalizedAtMs.map { Double($0) / 1000 - verdict.timeIntervalSince1970 }
        }
        let confirmed = items.compactMap { item in confirmedAt(item).map { (item, $0) } }
        func first(_ kind: EvidenceKind?) -> Double? {
            confirmed.filter { kind == nil || ($0.0.kind == kind && $0.0.failedKind == nil) }.map(\.1).min()
        }
        // A recording's seconds: a segment's own, or the whole file's (read back from its
        // header would need the plaintext; the request's length is what was recorded).
        func length(_ item: EvidenceItem) -> Double { item.segment?.durationSeconds ?? Double(seconds) }
        func start(_ item: EvidenceItem) -> Double {
            item.segment.map { $0.startedAt.timeIntervalSince(verdict) } ?? (item.createdAt.timeIntervalSince(verdict) - length(item))
        }
        let video = frames.withLock { $0 }
        let videoSeconds = items.filter { $0.kind == .video }.compactMap(\.segment?.durationSeconds).reduce(0, +)
        let taken = times.map { t in
            func recorded(_ kind: EvidenceKind) -> Double {
                items.filter { $0.kind == kind && $0.failedKind == nil }.reduce(0) { $0 + min(length($1), max(0, t - start($1))) }
            }
            func sent(_ kind: EvidenceKind) -> Double {
                confirmed.filter { $0.0.kind == kind && $0.0.failedKind == nil && $0.1 <= t }.reduce(0) { $0 + length($1.0) }
            }
            return TakenAt(seconds: t, audioRecorded: recorded(.audio), audioConfirmed: sent(.audio), videoRecorded: recorded(.video), videoConfirmed: sent(.video))
        }
        return Run(pipeline: pipeline, captureSeconds: captureSeconds, items: items.count, itemsConfirmed: confirmed.count,
                   firstConfirmedSeconds: first(nil), firstAudioConfirmedSeconds: first(.audio), firstVideoConfirmedSeconds: first(.video),
                   allConfirmedSeconds: confirmed.count == items.count ? confirmed.map(\.1).max() : nil, takenAt: taken,
                   videoFrames: video.segments > 0 ? video.count : nil, videoDroppedFrames: video.segments > 0 ? video.dropped : nil,
                   videoFramesPerSecond: videoSeconds > 0 ? Double(video.count) / videoSeconds : nil)
    }

    static func text(_ report: Report) -> String {
        func time(_ value: Double?) -> String { value.map { String(format: "%.2f s", $0) } ?? "never" }
        var lines = ["duress capture: \(report.seconds) s of audio and of video (\(report.video)), segments of \(report.segmentSeconds) s"]
        for run in report.runs {
            lines.append("\n\(run.pipeline): capture \(String(format: "%.1f", run.captureSeconds)) s, \(run.itemsConfirmed) of \(run.items) items confirmed")
            lines.append("  first item confirmed \(time(run.firstConfirmedSeconds)) after the verdict; first audio \(time(run.firstAudioConfirmedSeconds)); first video \(time(run.firstVideoConfirmedSeconds)); all \(time(run.allConfirmedSeconds))")
            if let count = run.videoFrames, let fps = run.videoFramesPerSecond {
                lines.append(String(format: "  video: %d frames (%.1f per second), %d dropped by the camera", count, fps, run.videoDroppedFrames ?? 0))
            }
            lines.append("  taken at   audio recorded / on the server   video recorded / on the server")
            for taken in run.takenAt {
                lines.append(String(format: "  %5.0f s   %7.1f s / %5.1f s (lost %4.1f)        %7.1f s / %5.1f s (lost %4.1f)",
                                    taken.seconds, taken.audioRecorded, taken.audioConfirmed, taken.lostAudio,
                                    taken.videoRecorded, taken.videoConfirmed, taken.lostVideo))
            }
        }
        func ratio(_ value: Double?) -> String { value.map { String(format: "%.1f×", $0) } ?? "n/a" }
        if report.runs.count == 2 {
            lines.append("\nsegments vs whole files: first evidence \(ratio(report.firstConfirmedRatio)) sooner, first audio \(ratio(report.firstAudioConfirmedRatio)), first video \(ratio(report.firstVideoConfirmedRatio))")
        }
        if !report.faults.isEmpty {
            lines.append("\nfaults (the capture in a process of its own)   audio recorded / on the server   video recorded / on the server")
            for run in report.faults {
                let what = run.fault == "kill" ? String(format: "SIGKILL at %4.0f s", run.atSeconds)
                    : String(format: "cut at %4.0f s for %.0f s", run.atSeconds, run.cutSeconds ?? 0)
                var line = String(format: "  %@  %7.1f s / %5.1f s (lost %4.1f)   %7.1f s / %5.1f s (lost %4.1f)  %@",
                                  what.padding(toLength: 22, withPad: " ", startingAt: 0), run.audioRecorded, run.audioConfirmed, run.lostAudio,
                                  run.videoRecorded, run.videoConfirmed, run.lostVideo,
                                  run.withinBound ? "within" : "OVER")
                line += String(format: " %.1f s allowed", run.allowedLoss)
                if let left = run.sealedLeft { line += "; \(left) sealed left, \(run.sealedIntact == true ? "all whole" : "NOT ALL WHOLE")" }
                if run.fault == "cut" {
                    line += "; \(run.connectionsEnded ?? 0) connections ended and \(run.connectionsRefused ?? 0) refused by the cut"
                    line += run.allConfirmedAfterRestoreSeconds.map { String(format: "; all on the server %.1f s after the link was back and the recording over", $0) } ?? ""
                }
                lines.append(line)
            }
        }
        return lines.joined(separator: "\n")
    }

    /// One line on stderr at a terminal: the runs take a while.
    struct Progress {
        var enabled: Bool
        func say(_ text: String) {
            guard enabled else { return }
            FileHandle.standardError.write(Data((text + "\n").utf8))
        }
    }
}
