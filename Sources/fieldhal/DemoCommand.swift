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

/// `fieldhal demo`: the Transrify story end to end on the kit (the built-in fake kit by
/// default) against a lab server it starts on a free loopback port, told from both sides.
struct DemoCommand: FieldHALSubcommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Run the Transrify flows end to end against a private lab server, and narrate them.",
        discussion: """
        Starts fieldhal-labserver (from beside this executable) on 127.0.0.1 with a demo tenant, \
        then: a normal sign-in; a duress sign-in that shows exactly the same; the silent duress \
        alert; evidence captured through the kit, sealed in the queue and uploaded; the server \
        confirming every size and SHA-256. Exit 0 when every check held. Nothing outside a \
        scratch directory is touched (the kit's state directory is not used). Without a \
        configuration it runs on the built-in fake kit, its camera and microphone in real time.

        The evidence is told as it happens, seconds after the duress verdict: the note and \
        the last known location first, then audio and video in segments (--segment-seconds), \
        each sealed and on the server while the next one records, and last the manifest \
        listing them all; then the lab's check of the chain and the manifest.
        """)
    /// The demo is about the fake kit: it asks for it itself.
    static var fakeKitUnlessConfigured: Bool { true }
    @OptionGroup var global: GlobalOptions
    @Option(help: "Seconds of audio evidence (1–60).") var audioSeconds = 3
    @Option(help: "Seconds of video evidence (1–60).") var videoSeconds = 3
    @Option(help: "Seconds in each segment of audio and video (1–60; the kit's default is 4).") var segmentSeconds = 1

    func execute(_ environment: Environment) async throws {
        let scratch = try ScratchDirectory.make("fieldhal-demo")
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let lab = try LabProcess.start(directory: scratch + "/lab")
        defer { lab.stop() }
        let say = Narrator()
        say.line("FieldHAL demo: the Transrify flows on \(environment.configuration.settings["kit"]?.string("name") ?? environment.configuration.file), against a lab server at \(lab.baseURL)")
        say.side("lab", "tenant \(lab.tenantKey); user \(lab.customerRef) (PIN \(lab.pin), duress PIN \(lab.duressPin))")

        let state = StateDirectory(path: scratch + "/state")
        let vault = try Vault(stateDirectory: state)
        try TenantKeyStore(vault: vault).save(lab.tenantKey)
        let client = TransrifyClient(baseURL: lab.baseURL, tenantKey: lab.tenantKey)
        let sessions = SessionStore(vault: vault)
        let kit = try await environment.loadEvidenceKit()
        defer { Task { await kit.close() } }
        let flow = SignInFlow(client: client, location: try? kit.location(), sessions: sessions, device: Environment.deviceInfo)

        var shown: [String] = []
        var queued: [EvidenceItem] = []
        for (step, (title, pin)) in [("normal", lab.pin), ("duress", lab.duressPin)].enumerated() {
            say.line("\n\(step + 1). Sign-in with the \(title) PIN")
            let record = try await flow.signIn(customerRef: lab.customerRef, pin: pin)
            let screen = SessionReport(record).text
            shown.append(screen.replacingOccurrences(of: "…" + record.sessionIdSuffix, with: "…XXXX"))
            for line in screen.split(separator: "\n") { say.side("device", String(line)) }
            // What `signin` starts in the background, run here in the open.
            let queue = try EvidenceQueue(stateDirectory: state, vault: vault)
            let captured = LockedValue<[EvidenceItem]>([])
            var after = AfterSignIn(client: client, sessions: sessions, device: Environment.deviceInfo)
            after.limitedMode = { record in
                var capture = EvidenceCapture(queue: queue, kit: kit)
                capture.audioDuration = .seconds(max(1, min(audioSeconds, 60)))
                capture.video = VideoRequest(duration: .seconds(max(1, min(videoSeconds, 60))), width: 320, height: 240, framesPerSecond: 10)
                capture.segmentLength = .seconds(max(1, min(segmentSeconds, 60)))
                // Told as it happens, in seconds since the verdict: sealed on the kit, then
                // confirmed by the lab while the recording goes on.
                let verdict = ContinuousClock.now
                let since: @Sendable () -> String = { String(format: "+%4.1f s", (ContinuousClock.now - verdict).seconds) }
                capture.queued = { item in say.side("kit", "\(since()) sealed \(Self.name(of: item)), \(item.size) bytes, SHA-256 \(item.sha256.prefix(16))…") }
                var uploader = EvidenceUploader(client: client, queue: queue)
                uploader.confirmed = { item, _ in say.side("lab", "\(since()) confirmed \(Self.name(of: item)): presign → PUT → finalize") }
                let items = await capture.captureDuressEvidence(for: record, uploadingWith: uploader)
                captured.withLock { $0 = items }
            }
            await after.run()
            queued += captured.withLock { $0 }
            let server = try await client.labState()
            let session = server.sessions.first { $0.sessionId == record.sessionId }
            say.side("lab", "session …\(record.sessionIdSuffix): \(session?.mode ?? "missing")")
            if let alert = server.alerts.first(where: { $0.alertId == (try? sessions.load())??.alertId }) {
                let place = alert.geo.map { String(format: "%.5f, %.5f", $0.lat, $0.lon) } ?? "no location"
                say.side("lab", "silent DURESS alert \(alert.alertId.prefix(8))… for \(alert.customerRef) at \(place)")
            } else {
                say.side("lab", "no alert")
            }
        }

        say.line("\n3. What each side ends up with")
        let identical = shown.count == 2 && shown[0] == shown[1]
        say.side("device", identical ? "both sign-ins showed the same two lines (the session suffix aside)" : "THE SIGN-INS DIFFERED")
        let server = try await client.labState()
        var confirmed = 0
        for item in queued {
            let match = server.evidence.first { $0.sha256 == item.sha256 && $0.size == item.size }
            if match != nil { confirmed += 1 }
            say.side("lab", "\(item.kind.rawValue) \(item.size) bytes SHA-256 \(item.sha256.prefix(16))… \(match != nil ? "confirmed" : "MISSING")")
        }
        for recording in server.recordings ?? [] {
            let state = recording.isComplete ? "complete, its chain whole" : recording.problems.joined(separator: "; ")
            say.side("lab", "\(recording.kind) recording: \(recording.segments) of \(recording.listed.map(String.init) ?? "?") segments, \(String(format: "%.1f", recording.seconds)) s — \(state)")
        }
        let manifestsComplete = (server.manifests ?? []).allSatisfy(\.isComplete) && !(server.manifests ?? []).isEmpty
        for manifest in server.manifests ?? [] {
            say.side("lab", "manifest: \(manifest.arrived) of \(manifest.listed) items arrived\(manifest.problems.isEmpty ? "" : " — " + manifest.problems.joined(separator: "; "))")
        }
        let passed = identical && !queued.isEmpty && confirmed == queued.count && server.alerts.count == 1 && manifestsComplete
            && (server.recordings ?? []).allSatisfy(\.isComplete)
        say.line(passed
            ? "\nDone: the device showed the same thing twice; the lab has the alert and all \(confirmed) pieces of evidence, SHA-256 checked."
            : "\nFAILED: see the lines above.")
        if !passed { throw ExitCode(1) }
    }
}

extension DemoCommand {
    /// An item as the story names it: its kind, its place in a recording, what failed, or the manifest.
    static func name(of item: EvidenceItem) -> String {
        if let failed = item.failedKind { return "TEXT: \(failed.rawValue) could not be captured" }
        if item.contentType == EvidenceManifest.contentType { return "the manifest (TEXT)" }
        if let segment = item.segment { return "\(item.kind.rawValue) segment \(segment.sequence) (\(String(format: "%.1f", segment.durationSeconds)) s)" }
        return item.kind.rawValue
    }
}

/// Prints the story, one side per line.
struct Narrator {
    // Written line by line, unbuffered: the story is told while it happens, also into a
    // pipe, and lines from the capture's tasks never mix.
    func line(_ text: String) { FileHandle.standardOutput.write(Data((text + "\n").utf8)) }

    func side(_ side: String, _ text: String) { line("  [\(side)]".padding(toLength: 11, withPad: " ", startingAt: 0) + text) }
}
