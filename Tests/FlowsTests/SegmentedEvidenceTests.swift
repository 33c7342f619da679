import FakePlugin
import FieldHAL
import FieldHALProcess
@testable import FieldHALFlows
import Foundation
import Synchronization
import Testing
import TestSupport
import Transrify
import TransrifyLabServer

/// Issue 19, first step: audio and video recorded at the same time in segments, each sealed
/// into the queue as it closes (from memory: never in plaintext on disk), chained by SHA-256,
/// and uploaded while the next one records; the lab server checks the chain.
@Suite(.timeLimit(.minutes(2)))
struct SegmentedEvidenceTests {
    /// The fake kit's camera, microphone and GPS, in process (real-time devices).
    func fakeDevices(_ state: String) async throws -> (any Camera, any Microphone, any LocationProvider) {
        let context = PluginContext(configDirectory: state, stateDirectory: state)
        guard case .camera(let camera) = try await FakePlugin.descriptor.open(.camera, PluginParameters([:]), context),
              case .microphone(let microphone) = try await FakePlugin.descriptor.open(.microphone, PluginParameters([:]), context),
              case .location(let location) = try await FakePlugin.descriptor.open(.location, Self.track, context) else {
            throw CLIError("the fake kit lacks a device")
        }
        return (camera, microphone, location)
    }

    /// A receiver with a fix from the start, a point every 300 ms.
    static let track = PluginParameters([
        "track": .array([.table(["lat": .float(52.52), "lon": .float(13.405), "acc": .float(5)]),
                         .table(["lat": .float(52.521), "lon": .float(13.406), "acc": .float(5)])]),
        "interval_ms": .integer(300),
    ])

    @Test func audioAndVideoGoIntoTheQueueInChainedSegmentsWhileTheyRecord() async throws {
        let state = scratchDirectory("segments")
        defer { try? FileManager.default.removeItem(atPath: state) }
        let queue = try openQueue(state)
        let (camera, microphone, location) = try await fakeDevices(state)
        var capture = EvidenceCapture(queue: queue, camera: camera, microphone: microphone, location: location)
        capture.segmentLength = .seconds(1)
        capture.audioDuration = .milliseconds(3000)
        capture.video = VideoRequest(duration: .milliseconds(2500), width: 160, height: 120, framesPerSecond: 10)
        // When each item was queued, on the clock the segments' first frames are stamped with:
        // the checks below order events, they bound no latency (a busy machine is slow, not wrong).
        let arrivals = Mutex<[(EvidenceItem, Date)]>([])
        capture.queued = { item in arrivals.withLock { $0.append((item, Date())) } }
        // A scan of the state directory, again and again while the recording goes on.
        let scanning = PlaintextScan.watch(state, every: .milliseconds(100))
        let items = await capture.captureInSegments(incidentId: "incident-1", note: "a note", segmentLength: .seconds(1))
        scanning.cancel()
        #expect(await scanning.value.isEmpty, "plaintext evidence on disk")
        #expect(PlaintextScan.files(under: state).isEmpty)

        let kinds = items.map(\.kind)
        #expect(kinds.filter { $0 == .audio }.count == 3 && kinds.filter { $0 == .video }.count == 3, "\(kinds)")
        #expect(kinds.filter { $0 == .text }.count == 2 && kinds.filter { $0 == .photo }.count == 1, "the note and the manifest")
        // The manifest comes last and lists every item before it, segments with their place.
        let manifestItem = try #require(items.last)
        #expect(manifestItem.contentType == EvidenceManifest.contentType && manifestItem.kind == .text)
        let manifestPath = state + "/check-manifest.json"
        try queue.decrypt(manifestItem, to: manifestPath)
        let manifest = try JSONDecoder().decode(EvidenceManifest.self, from: Data(contentsOf: URL(fileURLWithPath: manifestPath)))
        try FileManager.default.removeItem(atPath: manifestPath)
        #expect(manifest.incidentId == "incident-1")
        #expect(manifest.items.map(\.sha256) == items.dropLast().map(\.sha256))
        #expect(manifest.items.compactMap(\.segment).count == 6 && manifest.items.compactMap(\.segment?.sequence).sorted() == [0, 0, 1, 1, 2, 2])
        #expect(kinds.filter { $0 == .nearby }.count == 2, "the cached fix at once, then a live one")
        #expect(items.allSatisfy { $0.failedKind == nil }, "\(items.filter { $0.failedKind != nil })")

        let times = arrivals.withLock { $0 }
        // TEXT and the cached NEARBY were queued before any device started.
        #expect(times.prefix(2).map(\.0.kind) == [.text, .nearby])
        let frames = items.compactMap { $0.segment?.startedAt }
        let firstFrame = try #require(frames.min())
        #expect(times[1].1 <= firstFrame, "the first two items came after the first frame, by \(times[1].1.timeIntervalSince(firstFrame)) s")
        for kind in [EvidenceKind.audio, .video] {
            let segments = items.filter { $0.kind == kind }
            #expect(segments.map { $0.segment?.sequence } == [0, 1, 2])
            #expect(Set(segments.compactMap { $0.segment?.recording }).count == 1, "one recording per kind")
            #expect(segments.first?.segment?.previousSHA256 == nil)
            for (previous, next) in zip(segments, segments.dropFirst()) {
                #expect(next.segment?.previousSHA256 == previous.sha256, "the chain links \(kind) \(next.segment?.sequence ?? -1)")
            }
            // The first segment was in the queue while the recording went on: before the last
            // segment's last frame.
            let first = try #require(times.first { $0.0.id == segments.first?.id })
            let last = try #require(segments.last?.segment)
            let recordingEnded = last.startedAt.addingTimeInterval(last.durationSeconds)
            #expect(first.1 < recordingEnded, "\(kind) segment 0 queued \(first.1.timeIntervalSince(recordingEnded)) s after the recording's end")
            // Each segment is a whole file of its own, which ffprobe reads to its length.
            for segment in segments {
                let out = state + "/check-\(segment.id)." + (kind == .audio ? "wav" : "avi")
                try queue.decrypt(segment, to: out)
                let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: out)))
                let probe = try await ToolProcess.run("/usr/bin/ffprobe", ["-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", out],
                                                      subject: "ffprobe", timeout: .seconds(30))
                try? FileManager.default.removeItem(atPath: out)
                let probed = Double(probe.standardOutput.first?.trimmingCharacters(in: .whitespaces) ?? "") ?? -1
                #expect(probe.status == 0 && abs(probed - (segment.segment?.durationSeconds ?? 0)) < 0.15,
                        "ffprobe: \(kind) segment \(segment.segment?.sequence ?? -1) lasts \(probed) s of \(segment.segment?.durationSeconds ?? 0) (\(probe.standardError))")
                #expect(bytes.prefix(4).elementsEqual("RIFF".utf8) && bytes[8..<12].elementsEqual((kind == .audio ? "WAVE" : "AVI ").utf8))
                let riffSize = Int(bytes[4]) | Int(bytes[5]) << 8 | Int(bytes[6]) << 16 | Int(bytes[7]) << 24
                #expect(riffSize + 8 == bytes.count, "\(kind) segment \(segment.segment?.sequence ?? -1): RIFF size \(riffSize + 8) of \(bytes.count)")
            }
        }
        let audio = items.filter { $0.kind == .audio }.compactMap { $0.segment?.durationSeconds }
        #expect(audio.map { ($0 * 10).rounded() } == [10, 10, 10], "\(audio)")
        let video = items.filter { $0.kind == .video }.compactMap { $0.segment?.durationSeconds }
        #expect(video.map { ($0 * 10).rounded() } == [10, 10, 5], "\(video)")
        // Audio and video at the same time, not one after the other: each began before the
        // other's last segment did.
        let segmentsOf = { (kind: EvidenceKind) in items.filter { $0.kind == kind }.compactMap(\.segment) }
        for (one, other) in [(EvidenceKind.audio, EvidenceKind.video), (.video, .audio)] {
            let began = try #require(segmentsOf(one).first?.startedAt)
            let otherLast = try #require(segmentsOf(other).last?.startedAt)
            #expect(began < otherLast, "\(one) began \(began.timeIntervalSince(otherLast)) s after \(other)'s last segment")
        }

        await camera.close()
        await microphone.close()
        await location.close()
    }

    /// A kit with three cameras, one opted out (`roles = []`): the capture records the two
    /// evidence cameras at once, each its own chain under its own recording id, and the
    /// manifest lists both; the opted-out camera records nothing.
    @Test func everyEvidenceCameraRecordsItsOwnChain() async throws {
        let state = scratchDirectory("cameras")
        defer { try? FileManager.default.removeItem(atPath: state) }
        let configuration = try KitConfiguration.parse("""
            [camera.front]
            plugin = "fake"
            realtime = true
            [camera.rear]
            plugin = "fake"
            realtime = true
            [camera.dash]
            plugin = "fake"
            realtime = true
            roles = []
            [microphone]
            plugin = "fake"
            """, file: "three-cameras.toml", directory: state, registry: PluginRegistry([FakePlugin.descriptor]))
        let kit = await Kit.load(configuration, registry: PluginRegistry([FakePlugin.descriptor]),
                                 context: PluginContext(configDirectory: state, stateDirectory: state))
        let devices = AfterAuthenticationWork.CaptureDevices(evidenceOf: kit)
        #expect(devices.camera != nil && devices.moreCameras.count == 1 && devices.microphone != nil && devices.moreMicrophones.isEmpty)
        var capture = EvidenceCapture(queue: try openQueue(state), camera: devices.camera, microphone: devices.microphone, location: nil)
        capture.moreCameras = devices.moreCameras
        capture.audioDuration = .milliseconds(1500)
        capture.video = VideoRequest(duration: .milliseconds(1500), width: 160, height: 120, framesPerSecond: 10)
        let items = await capture.captureInSegments(incidentId: "incident-2", note: "two cameras", segmentLength: .seconds(1))
        let videos = items.filter { $0.kind == .video }
        let recordings = Dictionary(grouping: videos) { $0.segment?.recording ?? "" }
        #expect(recordings.count == 2, "two video recordings: \(videos.map { $0.segment?.recording ?? "-" })")
        for (_, segments) in recordings {
            #expect(segments.map { $0.segment?.sequence } == [0, 1])
            #expect(segments.last?.segment?.previousSHA256 == segments.first?.sha256)
        }
        #expect(items.filter { $0.kind == .audio }.count == 2)
        #expect(items.allSatisfy { $0.failedKind == nil }, "\(items.filter { $0.failedKind != nil })")
        let manifest = try #require(items.last)
        let path = state + "/manifest.json"
        try capture.queue.decrypt(manifest, to: path)
        let listed = try JSONDecoder().decode(EvidenceManifest.self, from: Data(contentsOf: URL(fileURLWithPath: path)))
        #expect(listed.items.filter { $0.kind == .video }.count == 4, "both chains in the manifest")
        #expect(listed.items.map(\.sha256) == items.dropLast().map(\.sha256))
        await kit.close()
    }

    /// The scan the tests above rely on finds what the old pipeline left: a recording in a
    /// scratch file, as the fake devices write it.
    @Test func thePlaintextScanFindsARecordingOnDisk() async throws {
        let state = scratchDirectory("scan")
        try FileManager.default.createDirectory(atPath: state + "/evidence", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: state) }
        let (camera, microphone, location) = try await fakeDevices(state)
        #expect(PlaintextScan.files(under: state).isEmpty)
        _ = try await microphone.record(RecordingRequest(duration: .milliseconds(100)), to: state + "/evidence/.capture-1.wav")
        _ = try await camera.recordVideo(VideoRequest(duration: .milliseconds(200), width: 32, height: 32, framesPerSecond: 10), to: state + "/.capture-2.avi")
        #expect(PlaintextScan.files(under: state).sorted() == [".capture-2.avi", "evidence/.capture-1.wav"])
        await camera.close()
        await microphone.close()
        await location.close()
    }

    @Test func aSignOutEndsTheRecordingAtTheNextSegment() async throws {
        let state = scratchDirectory("signout")
        defer { try? FileManager.default.removeItem(atPath: state) }
        let queue = try openQueue(state)
        let (camera, microphone, location) = try await fakeDevices(state)
        var capture = EvidenceCapture(queue: queue, camera: nil, microphone: microphone, location: location)
        capture.audioDuration = .seconds(30)
        capture.liveFixWait = .milliseconds(100)
        // Signed out once the first segment has closed, during the second: the recording ends
        // at the second's end, whole, and no third starts. (Asked every 0.25 s: seen by
        // 1.25 s into the recording.) Counted from the first segment, not from a clock
        // started before the capture: on a loaded machine the microphone starts late.
        let closed = LockedValue(0)
        capture.segmentRecorded = { kind, _, _ in if kind == .audio { closed.withLock { $0 += 1 } } }
        capture.keepRecording = { closed.value == 0 }
        let items = await capture.captureInSegments(incidentId: "incident-2", note: "n", segmentLength: .seconds(1))
        let audio = items.filter { $0.kind == .audio }
        #expect(audio.count == 2)
        #expect(audio.allSatisfy { abs(($0.segment?.durationSeconds ?? 0) - 1) < 0.01 }, "each segment whole: \(audio.map { $0.segment?.durationSeconds ?? 0 })")
        // (Two segments of a 30 s recording: it stopped at the sign-out; no clock needed.)
        // No camera: the error item says so, and the rest went on.
        #expect(items.contains { $0.failedKind == .video } && items.contains { $0.failedKind == .photo })
        await camera.close()
        await microphone.close()
        await location.close()
    }

    /// The kit stopped mid-recording (the capture's task cancelled): the recordings end
    /// with no error item, since a stop is not a failure of the device, whichever way the
    /// device tells it (the fake's clock, like a V4L2 or ALSA wait and a plugin process,
    /// throws `FieldHALError` `cancelled`, not `CancellationError`).
    @Test func aStoppedCaptureRecordsNoFailureForItsOwnStop() async throws {
        let state = scratchDirectory("stopped")
        defer { try? FileManager.default.removeItem(atPath: state) }
        let queue = try openQueue(state)
        let (camera, microphone, location) = try await fakeDevices(state)
        var capture = EvidenceCapture(queue: queue, camera: camera, microphone: microphone, location: location)
        capture.audioDuration = .seconds(30)
        capture.video = VideoRequest(duration: .seconds(30), width: 160, height: 120, framesPerSecond: 10)
        capture.liveFixWait = .milliseconds(100)
        let closed = LockedValue<Set<EvidenceKind>>([])
        capture.segmentRecorded = { kind, _, _ in closed.withLock { _ = $0.insert(kind) } }
        let running = Task { [capture] in await capture.captureInSegments(incidentId: "incident-3", note: "n", segmentLength: .seconds(1)) }
        let deadline = ContinuousClock.now + .seconds(20)
        while closed.value.count < 2, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(closed.value == [.audio, .video], "a segment of each kind before the stop")
        running.cancel()
        let items = await running.value
        #expect(items.contains { $0.kind == .audio } && items.contains { $0.kind == .video }, "the segments before the stop: \(items.map(\.kind))")
        #expect(!items.contains { $0.failedKind != nil }, "an error item for the kit's own stop: \(items.filter { $0.failedKind != nil })")
        await camera.close()
        await microphone.close()
        await location.close()
    }

    func evidence(_ sequence: Int, sha: String, previous: String?, recording: String = "r") -> LabState.Evidence {
        LabState.Evidence(evidenceId: "e\(sequence)\(sha)", incidentId: "i", kind: "AUDIO", key: "k\(sequence)\(sha)", size: 1, sha256: sha, finalizeCalls: 1,
                          segment: EvidenceSegment(recording: recording, sequence: sequence, startedAtMs: 0, durationMs: 1000, previousSha256: previous))
    }

    @Test func theLabServersChainCheckFindsAMissingARepeatedAndAnAlteredSegment() {
        let whole = [evidence(2, sha: "c", previous: "b"), evidence(0, sha: "a", previous: nil), evidence(1, sha: "b", previous: "a")]
        #expect(LabState.recordings(of: whole) == [.init(recording: "r", incidentId: "i", kind: "AUDIO", segments: 3, seconds: 3, problems: [])],
                "arrival order does not matter")
        let missing = [evidence(0, sha: "a", previous: nil), evidence(2, sha: "c", previous: "b")]
        #expect(LabState.recordings(of: missing).first?.problems == ["segment 1 is missing"])
        let repeated = whole + [evidence(1, sha: "x", previous: "a")]
        #expect(LabState.recordings(of: repeated).first?.problems == ["segment 1 arrived twice"])
        let altered = [evidence(0, sha: "a", previous: nil), evidence(1, sha: "B", previous: "a"), evidence(2, sha: "c", previous: "b")]
        #expect(LabState.recordings(of: altered).first?.problems == ["segment 2 does not follow segment 1 (its SHA-256 is not the one named)"])
        let headless = [evidence(0, sha: "a", previous: "z")]
        #expect(LabState.recordings(of: headless).first?.problems.count == 1, "a first segment names no predecessor")
    }

    /// The chain cannot show the last segments missing (a kit taken after segment 1 looks like
    /// a recording of two); the closing manifest can, and it names a lost photo too.
    @Test func theManifestShowsWhatTheChainCannot() {
        let photo = LabState.Evidence(evidenceId: "p", incidentId: "i", kind: "PHOTO", key: "kp", size: 9, sha256: "f0", finalizeCalls: 1)
        let listed = (0..<4).map { evidence($0, sha: ["a", "b", "c", "d"][$0], previous: $0 == 0 ? nil : ["a", "b", "c"][$0 - 1]) }
        let manifest = EvidenceManifest(incidentId: "i", closedAtMs: 0, items: [EvidenceManifest.Item(kind: .photo, size: 9, sha256: "F0")]
                                        + listed.map { EvidenceManifest.Item(kind: .audio, size: 1, sha256: $0.sha256, segment: $0.segment) })
        // Two segments arrived, in a whole chain: complete without the manifest's word.
        let arrived = Array(listed.prefix(2))
        #expect(LabState.recordings(of: arrived).first?.problems == [] && LabState.recordings(of: arrived).first?.listed == nil)
        let checked = LabState.recordings(of: arrived, manifests: [manifest])
        #expect(checked.first?.problems == ["segments 2–3 are missing (the manifest lists 4)"] && checked.first?.listed == 4)
        #expect(checked.first?.isComplete == false)
        let incident = LabState.manifests([("m", "i", manifest)], of: arrived)
        #expect(incident == [LabState.Manifest(incidentId: "i", evidenceId: "m", listed: 5, arrived: 2, problems: [
            "the PHOTO item f0… has not arrived",
            "AUDIO segment 2 of recording r has not arrived", "AUDIO segment 3 of recording r has not arrived",
        ])])
        // Everything there (the SHA-256 compared without regard to case): complete.
        #expect(LabState.manifests([("m", "i", manifest)], of: listed + [photo]).first?.isComplete == true)
        #expect(LabState.recordings(of: listed, manifests: [manifest]).first?.isComplete == true)
        // Silence records the same bytes every second: a segment is found by its place too.
        let silent = (0..<3).map { evidence($0, sha: "s", previous: $0 == 0 ? nil : "s") }
        let silence = EvidenceManifest(incidentId: "i", closedAtMs: 0, items: silent.map { EvidenceManifest.Item(kind: .audio, size: 1, sha256: "s", segment: $0.segment) })
        #expect(LabState.manifests([("m", "i", silence)], of: Array(silent.prefix(2))).first?.problems == ["AUDIO segment 2 of recording r has not arrived"])
        // A manifest the server could not read, or one naming another incident, says so.
        #expect(LabState.manifests([("m", "i", nil)], of: listed).first?.problems == ["the manifest is not a readable EvidenceManifest"])
        var elsewhere = manifest
        elsewhere.incidentId = "j"
        #expect(LabState.manifests([("m", "i", elsewhere)], of: listed + [photo]).first?.problems == ["the manifest names incident j, not its own"])
    }

    @Test func segmentsReachTheLabServerWithTheirChainIntact() async throws {
        let state = scratchDirectory("upload")
        defer { try? FileManager.default.removeItem(atPath: state) }
        var configuration = LabServer.Configuration(directory: scratchDirectory("lab"))
        configuration.port = 0
        let server = try LabServer(configuration)
        try server.addTenant(key: EvidenceQueueTests.tenantKey, name: "Flows")
        let lab = try await server.start()
        defer { Task { await lab.stop() } }
        let queue = try openQueue(state)
        let (camera, microphone, location) = try await fakeDevices(state)
        var capture = EvidenceCapture(queue: queue, camera: camera, microphone: microphone, location: location)
        capture.audioDuration = .milliseconds(2500)
        capture.video = VideoRequest(duration: .seconds(2), width: 160, height: 120, framesPerSecond: 10)
        capture.liveFixWait = .milliseconds(100)
        let uploader = EvidenceQueueTests().uploader(queue, lab)
        _ = await capture.captureInSegments(incidentId: "incident-3", note: "n", segmentLength: .seconds(1))
        let report = try await uploader.flush()
        #expect(report.deferred.isEmpty, "\(report.deferred)")
        let labState = try server.state(tenantKey: EvidenceQueueTests.tenantKey)
        let recordings = try #require(labState.recordings)
        #expect(recordings.map(\.kind).sorted() == ["AUDIO", "VIDEO"])
        #expect(recordings.allSatisfy { $0.problems.isEmpty }, "\(recordings)")
        #expect(recordings.first { $0.kind == "AUDIO" }?.segments == 3 && recordings.first { $0.kind == "VIDEO" }?.segments == 2)
        #expect(abs((recordings.first { $0.kind == "AUDIO" }?.seconds ?? 0) - 2.5) < 0.05)
        // The manifest arrived last and the lab found everything it lists.
        #expect(recordings.allSatisfy { $0.isComplete }, "\(recordings)")
        let manifests = try #require(labState.manifests)
        #expect(manifests.count == 1 && manifests.first?.isComplete == true && manifests.first?.listed == labState.evidence.count - 1, "\(manifests)")

        // `fieldhal-labserver export`: one file per recording, which ffprobe reads to its
        // whole length and ffmpeg decodes without an error.
        let out = scratchDirectory("export")
        defer { try? FileManager.default.removeItem(atPath: out) }
        let labDirectory = configuration.directory
        let export = try await offPool {
            try CLI.runBlocking(["export", "--directory", labDirectory, "--incident", "incident-3", "--output", out, "--json"],
                                executable: CLI.products.appendingPathComponent("fieldhal-labserver"))
        }
        #expect(export.status == 0, "\(export)")
        let files = try export.stdout.split(separator: "\n").map { try JSONDecoder().decode(RecordingExport.Exported.self, from: Data($0.utf8)) }
        #expect(files.map(\.kind).sorted() == ["AUDIO", "VIDEO"] && files.allSatisfy { $0.problems.isEmpty }, "\(files)")
        for file in files {
            #expect(file.path == out + "/incident-3-" + (file.kind == "AUDIO" ? "audio.wav" : "video.avi"))
            let probe = try await ToolProcess.run("/usr/bin/ffprobe", ["-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", file.path],
                                                  subject: "ffprobe", timeout: .seconds(30))
            let probed = Double(probe.standardOutput.first?.trimmingCharacters(in: .whitespaces) ?? "") ?? -1
            #expect(probe.status == 0 && abs(probed - (file.kind == "AUDIO" ? 2.5 : 2.0)) < 0.15, "ffprobe: \(file.kind) \(probed) s (\(probe.standardError))")
            let decode = try await ToolProcess.run("/usr/bin/ffmpeg", ["-v", "error", "-i", file.path, "-f", "null", "-"], subject: "ffmpeg", timeout: .seconds(30))
            #expect(decode.status == 0 && decode.standardError.isEmpty, "ffmpeg: \(decode.standardError)")
        }
        let unknown = try await offPool {
            try CLI.runBlocking(["export", "--directory", labDirectory, "--incident", "no-such", "--output", out],
                                executable: CLI.products.appendingPathComponent("fieldhal-labserver"))
        }
        #expect(unknown.status == 66 && unknown.stderr.contains("no evidence of incident no-such"), "\(unknown)")
        await camera.close()
        await microphone.close()
        await location.close()
    }
}
