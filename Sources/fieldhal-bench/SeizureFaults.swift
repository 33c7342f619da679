import ArgumentParser
import FieldHAL
import FieldHALComposition
import FieldHALFlows
import FieldHALVault
import Foundation
import Transrify
import FieldHALCommandLine
#if canImport(Glibc)
import Glibc
#endif

/// `bench seizure`'s faults (issue 19): the capture in a process of its own, killed with
/// SIGKILL at t, or its link to the server cut at t and restored. What the server has
/// afterwards, against what the kit had recorded, is what a seized kit leaves behind.
struct SeizureFaults {
    var seconds: Int
    var segmentSeconds: Int
    var video: VideoRequest
    var cutSeconds: Double
    /// `--config`, passed on to the worker (nil: the built-in fake kit).
    var config: String?
    var lab: LabProcess
    var scratch: String

    struct Run: Encodable {
        var fault: String
        var atSeconds: Double
        var audioRecorded, audioConfirmed, videoRecorded, videoConfirmed: Double
        var lostAudio, lostVideo: Double
        /// What may be lost: the segment in memory and the one being uploaded (kill); none (cut).
        var allowedLoss: Double
        var withinBound: Bool
        /// Kill: the worker's queue reopened after it — every item opened to its SHA-256.
        var sealedLeft: Int?
        var sealedIntact: Bool?
        /// Cut: how long the link was down, connections ended by the cut and refused during
        /// it, and how long after the link came back and the recording ended everything was
        /// on the server.
        var cutSeconds: Double?
        var connectionsEnded: Int?
        var connectionsRefused: Int?
        var allConfirmedAfterRestoreSeconds: Double?
    }

    func kill(at t: Double) async throws -> Run {
        let state = scratch + "/kill-\(t)"
        let incident = "seizure-kill-\(UUID().uuidString.prefix(8).lowercased())"
        let worker = try Worker.start(config: config, state: state, baseURL: lab.baseURL, tenantKey: lab.tenantKey, incident: incident, bench: self)
        let verdict = try worker.verdict()
        try await Task.sleep(until: ContinuousClock.now + .seconds(max(0, t - Date().timeIntervalSince(verdict))))
        Glibc.kill(worker.process.processIdentifier, SIGKILL)
        worker.process.waitUntilExit()
        let server = try await serverSegments(incident)
        // The queue the killed process left: each item whole and sealed, or gone.
        let queue = try EvidenceQueue(stateDirectory: StateDirectory(path: state), vault: try Vault(stateDirectory: StateDirectory(path: state)))
        let left = try queue.items()
        let intact = left.allSatisfy { (try? queue.verify($0)) != nil }
        func recorded(_ kind: String) -> Double {
            // From the recording's first sample to t: its start is segment 0's, wherever it is.
            let first = (server.filter { $0.kind == kind }.map(\.startedAt) + left.filter { $0.kind.rawValue == kind }.compactMap { $0.segment?.startedAt.timeIntervalSince1970 })
                .min().map { $0 - verdict.timeIntervalSince1970 } ?? 0
            return min(Double(seconds), max(0, t - first))
        }
        return run("kill", at: t, server: server, recorded: (recorded("AUDIO"), recorded("VIDEO")), allowedLoss: 2 * Double(segmentSeconds)) {
            $0.sealedLeft = left.count
            $0.sealedIntact = intact
        }
    }

    func cut(at t: Double) async throws -> Run {
        let relay = try CutRelay(targetPort: lab.baseURL.port ?? 80)
        defer { relay.stop() }
        let state = scratch + "/cut-\(t)"
        let incident = "seizure-cut-\(UUID().uuidString.prefix(8).lowercased())"
        let worker = try Worker.start(config: config, state: state, baseURL: URL(string: "http://127.0.0.1:\(relay.port)")!,
                                      tenantKey: lab.tenantKey, incident: incident, bench: self)
        let verdict = try worker.verdict()
        try await Task.sleep(until: ContinuousClock.now + .seconds(max(0, t - Date().timeIntervalSince(verdict))))
        relay.cut()
        try await Task.sleep(for: .milliseconds(Int(cutSeconds * 1000)))
        relay.restore()
        let restored = Date()
        // The worker records to the end and uploads until its queue is empty.
        let exited = await Worker.wait(worker.process, within: .seconds(seconds + 180))
        if !exited { Glibc.kill(worker.process.processIdentifier, SIGKILL) }
        let server = try await serverSegments(incident)
        let last = server.map(\.confirmedAt).max()
        return run("cut", at: t, server: server, recorded: (Double(seconds), Double(seconds)), allowedLoss: 0.01) {
            $0.cutSeconds = cutSeconds
            $0.connectionsEnded = relay.reset
            $0.connectionsRefused = relay.refused
            // From when everything could be there — the link back and the recording over —
            // to when it was.
            let possible = max(restored.timeIntervalSince1970, verdict.timeIntervalSince1970 + Double(seconds))
            $0.allConfirmedAfterRestoreSeconds = last.map { max(0, $0 - possible) }
            if !exited { $0.withinBound = false }
        }
    }

    private func run(_ fault: String, at t: Double, server: [Segment], recorded: (audio: Double, video: Double), allowedLoss: Double,
                     _ details: (inout Run) -> Void) -> Run {
        func confirmed(_ kind: String) -> Double { server.filter { $0.kind == kind }.map(\.seconds).reduce(0, +) }
        let (audio, video) = (confirmed("AUDIO"), confirmed("VIDEO"))
        let lostAudio = max(0, recorded.audio - audio), lostVideo = max(0, recorded.video - video)
        var run = Run(fault: fault, atSeconds: t, audioRecorded: recorded.audio, audioConfirmed: audio, videoRecorded: recorded.video,
                      videoConfirmed: video, lostAudio: lostAudio, lostVideo: lostVideo, allowedLoss: allowedLoss,
                      withinBound: lostAudio <= allowedLoss && lostVideo <= allowedLoss)
        details(&run)
        if run.sealedIntact == false { run.withinBound = false }
        return run
    }

    struct Segment {
        var kind: String
        var startedAt: Double
        var seconds: Double
        var confirmedAt: Double
    }

    /// The incident's segments the server confirmed (finalized), with their places.
    private func serverSegments(_ incident: String) async throws -> [Segment] {
        let client = TransrifyClient(baseURL: lab.baseURL, tenantKey: lab.tenantKey)
        return try await client.labState().evidence.filter { $0.incidentId == incident }.compactMap { stored in
            guard let segment = stored.segment, let confirmed = stored.finalizedAtMs else { return nil }
            return Segment(kind: stored.kind, startedAt: Double(segment.startedAtMs) / 1000, seconds: Double(segment.durationMs) / 1000,
                           confirmedAt: Double(confirmed) / 1000)
        }
    }

    /// The worker process (`fieldhal-bench seizure-worker`) and the verdict it reports.
    struct Worker {
        var process: Process
        var output: FileHandle

        static func start(config: String?, state: String, baseURL: URL, tenantKey: String, incident: String, bench: SeizureFaults) throws -> Worker {
            try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let process = Process()
            process.executableURL = URL(fileURLWithPath: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0])
            process.arguments = ["seizure-worker", "--state-dir", state, "--lab", baseURL.absoluteString, "--tenant-key", tenantKey,
                                 "--incident", incident, "--seconds", "\(bench.seconds)", "--segment-seconds", "\(bench.segmentSeconds)",
                                 "--width", "\(bench.video.width)", "--height", "\(bench.video.height)", "--fps", "\(bench.video.framesPerSecond)"]
                + (bench.config.map { ["--config", $0] } ?? [])
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = FileHandle.nullDevice
            try process.run()
            return Worker(process: process, output: pipe.fileHandleForReading)
        }

        /// The verdict's time, from the worker's first line ("verdict <Unix ms>").
        func verdict() throws -> Date {
            let text = (LabProcess.readLine(output) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
            guard text.hasPrefix("verdict "), let ms = Double(text.dropFirst(8)) else {
                process.terminate()
                throw FieldHALError(.protocolError, subject: "bench seizure", detail: "the worker began with \"\(text)\", not its verdict",
                                    advice: "run fieldhal-bench seizure-worker by hand to see why it fails")
            }
            return Date(timeIntervalSince1970: ms / 1000)
        }

        static func wait(_ process: Process, within limit: Duration) async -> Bool {
            let deadline = ContinuousClock.now + limit
            while process.isRunning, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(50)) }
            return !process.isRunning
        }
    }
}

/// The capture `bench seizure` kills or cuts off: limited mode's capture in segments, the
/// uploads beside it, then uploads until the queue is empty (as the daemon's background
/// work would, the link permitting). Says its verdict's time first, flushed.
struct SeizureWorker: FieldHALSubcommand {
    static let configuration = CommandConfiguration(commandName: "seizure-worker", abstract: "The capture bench seizure kills (internal).", shouldDisplay: false)
    static var fakeKitUnlessConfigured: Bool { true }
    @OptionGroup var global: GlobalOptions
    @Option var lab: String
    @Option var tenantKey: String
    @Option var incident: String
    @Option var seconds = 20
    @Option var segmentSeconds = 4
    @Option var width = 640
    @Option var height = 480
    @Option var fps = 30

    func execute(_ environment: Environment) async throws {
        guard let url = URL(string: lab) else { throw FieldHALError(.invalidArgument, subject: "seizure-worker", detail: "--lab \(lab) is not a URL") }
        let kit = try await environment.loadEvidenceKit()
        let state = environment.stateDirectory
        let queue = try EvidenceQueue(stateDirectory: state, vault: try Vault(stateDirectory: state))
        let uploader = EvidenceUploader(client: TransrifyClient(baseURL: url, tenantKey: tenantKey), queue: queue)
        var capture = EvidenceCapture(queue: queue, kit: kit)
        capture.silent = true
        capture.audioDuration = .seconds(seconds)
        capture.video = VideoRequest(duration: .seconds(seconds), width: width, height: height, framesPerSecond: fps)
        capture.segmentLength = .seconds(segmentSeconds)
        let verdict = Int64(Date().timeIntervalSince1970 * 1000)
        FileHandle.standardOutput.write(Data("verdict \(verdict)\n".utf8))
        _ = await capture.captureIncident(incident, note: "bench seizure", uploadingWith: uploader)
        // Until the queue is empty: a link that is down now may come back.
        let deadline = ContinuousClock.now + .seconds(150)
        while ContinuousClock.now < deadline, !((try? queue.items())?.filter { $0.incidentId == incident }.isEmpty ?? true) {
            await uploader.uploadUntilDone(within: .seconds(5))
            try await Task.sleep(for: .milliseconds(200))
        }
        await kit.close()
    }
}
