import ArgumentParser
import FieldHAL
import FieldHALCommandLine
import FieldHALComposition
import FieldHALFlows
import FieldHALSystem
import FieldHALVault
import Foundation
import Transrify
#if canImport(Glibc)
import Glibc
#endif

/// `bench seizure`'s faults (issue 19): the capture in a process of its own, killed with
/// SIGKILL at t, or its link to the server cut at t and restored, or (issue 41) its
/// descriptors run out at t and come back. What the server has afterwards, against what
/// the kit had recorded, is what a seized kit leaves behind.
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
        /// Descriptors: the error items that reached the server (their words), and whether
        /// the incident's manifest did. A kind that lost recording without an error item is
        /// a silent gap, and out of bound.
        var errorItems: [String]?
        var manifestDelivered: Bool?
        /// Out of bound: how the worker ended and the last of what it said.
        var worker: String?
    }

    /// A worker started for `fault`, its verdict read, and the time now t after it.
    private func workerAt(_ t: Double, fault: String, baseURL: URL) async throws -> (Worker, Date, incident: String, state: String) {
        let state = scratch + "/\(fault)-\(t)"
        let incident = "seizure-\(fault)-\(UUID().uuidString.prefix(8).lowercased())"
        let worker = try Worker.start(config: config, state: state, baseURL: baseURL, tenantKey: lab.tenantKey, incident: incident, bench: self)
        let verdict = try worker.verdict()
        try await Task.sleep(until: ContinuousClock.now + .seconds(max(0, t - Date().timeIntervalSince(verdict))))
        return (worker, verdict, incident, state)
    }

    func kill(at t: Double) async throws -> Run {
        let (worker, verdict, incident, state) = try await workerAt(t, fault: "kill", baseURL: lab.baseURL)
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
        let (worker, verdict, incident, _) = try await workerAt(t, fault: "cut", baseURL: URL(string: "http://127.0.0.1:\(relay.port)")!)
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

    /// The worker's soft limit on descriptors lowered at t to its lowest free descriptor, or
    /// below the descriptors it holds back if lower (util-linux's `prlimit`), so that its
    /// next open fails with EMFILE, for `cutSeconds`; then given back. Recording stops where
    /// it could not go on, and must say so once it can.
    func descriptors(at t: Double) async throws -> Run {
        let (worker, _, incident, _) = try await workerAt(t, fault: "descriptors", baseURL: lab.baseURL)
        let pid = worker.process.processIdentifier
        let open = Set((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd"))?.compactMap { Int($0) } ?? [])
        // Below the lowest free descriptor, and below the ones the pipeline holds back (its
        // `/dev/null`s): neither a new open nor the reserve given back helps until the limit
        // comes back, so the last words must wait for it (CI met that layout by chance).
        let reserve = open.filter { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)")) == "/dev/null" && $0 > 2 }
        let lowestFree = min((0...).first { !open.contains($0) } ?? 0, reserve.min() ?? Int.max)
        let given: Int
        do {
            given = try await Self.prlimit(pid, nil)
            _ = try await Self.prlimit(pid, lowestFree)
        } catch let error as FieldHALError {
            throw FieldHALError(error.kind, subject: error.subject, detail: "\(error.detail) (\(worker.ending))", advice: error.advice)
        }
        try await Task.sleep(for: .milliseconds(Int(cutSeconds * 1000)))
        do {
            _ = try await Self.prlimit(pid, given)
        } catch {
            // The worker may be done before the limit comes back: its recording stopped at
            // the first open that failed, and the error items and the manifest went out on
            // the connection it had (CI, 2026-11-28 at 09a153a). Nothing to give back then;
            // a worker still running that prlimit cannot reach is the bench's failure.
            guard await Worker.wait(worker.process, within: .seconds(5)) else { throw FieldHALError(.unavailable, subject: "bench seizure", detail: "\(error) (\(worker.ending))") }
        }
        let exited = await Worker.wait(worker.process, within: .seconds(seconds + 180))
        if !exited { Glibc.kill(worker.process.processIdentifier, SIGKILL) }
        let server = try await serverSegments(incident)
        // The incident's TEXT items as the server holds them: the note, error items, the manifest.
        let client = TransrifyClient(baseURL: lab.baseURL, tenantKey: lab.tenantKey)
        let texts = try await client.labState().evidence.filter { $0.incidentId == incident && $0.kind == "TEXT" }
            .compactMap { FileManager.default.contents(atPath: lab.directory + "/objects/" + $0.key).map { String(decoding: $0, as: UTF8.self) } }
        let errors = texts.filter { $0.contains(" evidence not captured: ") }
        let manifest = texts.contains { $0.hasPrefix("{") && $0.contains("\"incidentId\":\"\(incident)\"") }
        return run("descriptors", at: t, server: server, recorded: (Double(seconds), Double(seconds)), allowedLoss: 0.01) {
            $0.cutSeconds = cutSeconds
            $0.errorItems = errors
            $0.manifestDelivered = manifest
            // Lost recording is allowed when an error item says so: never a silent gap.
            let said = { (kind: String) in errors.contains { $0.hasPrefix(kind + " evidence not captured") } }
            $0.withinBound = exited && manifest && ($0.lostAudio <= 0.01 || said("AUDIO")) && ($0.lostVideo <= 0.01 || said("VIDEO"))
            if !$0.withinBound { $0.worker = worker.ending }
        }
    }

    /// Sets `pid`'s soft limit on open files (nil: reads it); returns the soft limit it had.
    private static func prlimit(_ pid: Int32, _ soft: Int?) async throws -> Int {
        let read = try await tool(["--pid", "\(pid)", "--nofile", "--raw", "--noheadings", "--output", "SOFT"])
        guard read.status == 0, let had = Int(read.output.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw FieldHALError(.unavailable, subject: "bench seizure", detail: "prlimit could not read process \(pid)'s limits: \(read.output)",
                                advice: "install util-linux")
        }
        if let soft {
            let set = try await tool(["--pid", "\(pid)", "--nofile=\(soft):"])
            guard set.status == 0 else {
                throw FieldHALError(.unavailable, subject: "bench seizure", detail: "prlimit could not set process \(pid)'s limit: \(set.output)")
            }
        }
        return had
    }

    /// The thread `prlimit` is waited for on, off the cooperative pool.
    private static let tools = DeviceThread(name: "fieldhal-bench-tools")

    private static func tool(_ arguments: [String]) async throws -> (status: Int32, output: String) {
        try await tools.run {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
            process.arguments = arguments
            let output = Pipe()
            process.standardOutput = output
            process.standardError = output
            try process.run()
            let data = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (process.terminationStatus, String(decoding: data, as: UTF8.self))
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
        /// Where the worker's standard error goes (beside its state directory).
        var errors: String

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
            let errors = state + ".stderr"
            _ = FileManager.default.createFile(atPath: errors, contents: nil, attributes: [.posixPermissions: 0o600])
            process.standardError = FileHandle(forWritingAtPath: errors) ?? FileHandle.nullDevice
            try process.run()
            return Worker(process: process, output: pipe.fileHandleForReading, errors: errors)
        }

        /// How the worker ended, and the last of what it said, for a bench failure's detail.
        var ending: String {
            let said = (try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""
            let state = process.isRunning ? "still running" : "exited with status \(process.terminationStatus)"
            return "the worker \(state)" + (said.isEmpty ? "" : "; it said: " + said.suffix(600))
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
        // Until the queue is empty: a link that is down now may come back. A queue that
        // cannot be listed (out of descriptors) is not an empty one.
        let deadline = ContinuousClock.now + .seconds(150)
        while ContinuousClock.now < deadline, !((try? queue.items())?.filter { $0.incidentId == incident }.isEmpty ?? false) {
            await uploader.uploadUntilDone(within: .seconds(5))
            try await Task.sleep(for: .milliseconds(200))
        }
        await kit.close()
    }
}
