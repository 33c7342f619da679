import FieldHAL
import Foundation
import Transrify

/// The work after every sign-in and every unlock of the kit's lock, run by the daemon (on
/// the devices it holds) or by a detached background run (which opens its own): the same
/// steps and the same silence whatever the verdict. Only a sign-in in limited mode and a
/// duress unlock capture evidence and offer the duress tag; every run flushes the queue.
public struct AfterAuthenticationWork: Sendable {
    /// `[transrify]`'s settings for this work.
    public struct Settings: Sendable {
        /// Req 30: the duress tag is offered only with NFC enabled.
        public var nfcEnabled: Bool
        /// How long the duress tag is offered (`nfc_emulation_s`).
        public var tagWindow: Duration
        public var audio: Duration
        public var video: VideoRequest
        /// How long a detached run lives, exactly, whatever the verdict (`background_run_s`).
        public var detachedLifetime: Duration
        /// Audio and video in segments of this length, uploaded as each closes; nil: the
        /// whole-file pipeline (`evidence_segment_seconds = 0`).
        public var segment: Duration?

        public init(nfcEnabled: Bool, tagWindow: Duration, audio: Duration, video: VideoRequest, detachedLifetime: Duration,
                    segment: Duration? = .seconds(4)) {
            self.nfcEnabled = nfcEnabled
            self.tagWindow = tagWindow
            self.audio = audio
            self.video = video
            self.detachedLifetime = detachedLifetime
            self.segment = segment
        }
    }

    /// Devices for the work, and how to let them go when it is done (nothing, for the
    /// daemon's own).
    public struct Lease<Device: Sendable>: Sendable {
        public var device: Device
        public var release: @Sendable () async -> Void

        public init(_ device: Device, release: @escaping @Sendable () async -> Void = {}) {
            self.device = device
            self.release = release
        }
    }

    public struct CaptureDevices: Sendable {
        public var camera: (any Camera)?
        public var microphone: (any Microphone)?
        public var location: (any LocationProvider)?
        /// The kit's other evidence cameras and microphones, each recorded as well.
        public var moreCameras: [any Camera]
        public var moreMicrophones: [any Microphone]

        public init(camera: (any Camera)?, microphone: (any Microphone)?, location: (any LocationProvider)?,
                    moreCameras: [any Camera] = [], moreMicrophones: [any Microphone] = []) {
            self.camera = camera
            self.microphone = microphone
            self.location = location
            self.moreCameras = moreCameras
            self.moreMicrophones = moreMicrophones
        }

        /// A kit's evidence devices: every camera and microphone with the `evidence` role
        /// (the default first, its photo the capture's), and its location.
        public init(evidenceOf kit: Kit) {
            let cameras = kit.evidenceCameras(), microphones = kit.evidenceMicrophones()
            self.init(camera: cameras.first, microphone: microphones.first, location: try? kit.location(),
                      moreCameras: Array(cameras.dropFirst()), moreMicrophones: Array(microphones.dropFirst()))
        }
    }

    public var client: TransrifyClient
    public var sessions: SessionStore
    public var device: DeviceInfo
    public var settings: Settings
    /// The evidence queue, waited for: skipping the duress capture would lose evidence.
    public var queue: @Sendable () async -> EvidenceQueue?
    public var captureDevices: @Sendable () async -> Lease<CaptureDevices>
    public var tagEmulator: @Sendable () async -> Lease<(any NFCTagEmulator)?>
    /// The lock's pending duress uses, taken (the lock's state is written either way).
    public var takeDuressUses: @Sendable () throws -> [Date]

    public init(client: TransrifyClient, sessions: SessionStore, device: DeviceInfo, settings: Settings,
                queue: @escaping @Sendable () async -> EvidenceQueue?,
                captureDevices: @escaping @Sendable () async -> Lease<CaptureDevices>,
                tagEmulator: @escaping @Sendable () async -> Lease<(any NFCTagEmulator)?>,
                takeDuressUses: @escaping @Sendable () throws -> [Date]) {
        self.client = client
        self.sessions = sessions
        self.device = device
        self.settings = settings
        self.queue = queue
        self.captureDevices = captureDevices
        self.tagEmulator = tagEmulator
        self.takeDuressUses = takeDuressUses
    }

    /// The duress tag's offer, handed to whoever runs it (see `afterSignIn`).
    public typealias TagOffer = @Sendable () async -> Void

    /// `offerTag`: who runs the duress tag's offer (the daemon's tag service, which ends an
    /// older one); nil: this is a detached run, which lives exactly `detachedLifetime` — its
    /// uploads and the tag's offer end with it (the queue keeps what is left for the next
    /// run, the daemon or `evidence flush`). `capture`: false after an unlock with the PIN —
    /// a limited session is not re-captured at every unlock.
    public func afterSignIn(capture: Bool = true, offerTag: (@Sendable (@escaping TagOffer) -> Void)? = nil) async {
        var work = AfterSignIn(client: client, sessions: sessions, device: device)
        // Detached, the offer runs beside the work in this run's own task group.
        let (detachedOffers, detachedOffer) = AsyncStream.makeStream(of: TagOffer.self)
        if capture {
            work.limitedMode = { [self] record in
                await limitedMode(record) { offer in
                    if let offerTag { offerTag(offer) } else { detachedOffer.yield(offer) }
                }
            }
        }
        let steps: @Sendable () async -> Void = { [work, self] in
            await work.run()
            if let queue = await queue() {
                await EvidenceUploader(client: client, queue: queue).uploadUntilDone(within: settings.detachedLifetime)
            }
        }
        guard offerTag == nil else {
            detachedOffer.finish()
            await steps()
            return
        }
        // Detached: the work, the tag's offer and the clock run side by side; the clock alone
        // decides when the process ends.
        let lifetime = settings.detachedLifetime
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await steps()
                detachedOffer.finish()
            }
            group.addTask {
                for await offer in detachedOffers { await offer() }
            }
            try? await Task.sleep(for: lifetime)
            group.cancelAll()
        }
    }

    /// After every successful unlock (and settings change), whatever PIN was used: a duress
    /// use while a Transrify session exists puts the session in limited mode — the silent
    /// duress alert goes out and evidence is captured, as after a duress sign-in.
    public func afterUnlock(offerTag: (@Sendable (@escaping TagOffer) -> Void)? = nil) async throws {
        let duressUses = try takeDuressUses()
        // Only a duress use during this session counts: one from before it (the lock used
        // while signed out) is not this session's to act on.
        var duressNow = false
        if var record = try sessions.load(), duressUses.contains(where: { $0 >= record.signedInAt }) {
            duressNow = true
            if !record.limitedMode {
                record.limitedMode = true
                try sessions.save(record)
            }
        }
        // Every duress unlock captures anew (the alert goes out once per session); an unlock
        // with the PIN captures nothing, whatever the session's mode.
        await afterSignIn(capture: duressNow, offerTag: offerTag)
    }

    /// Limited mode's silent work (Req 21, 24, 32): the duress tag's offer (handed to
    /// `offer`, which runs it beside the capture), and every kind of evidence, queued as
    /// silent items.
    func limitedMode(_ record: SessionRecord, offer: @Sendable (@escaping TagOffer) -> Void) async {
        // Req 32: the duressed kit offers trf:duress:<alertId> as a tag while it captures.
        if settings.nfcEnabled, let alertId = record.alertId {
            let window = settings.tagWindow
            offer { [tagEmulator] in
                let lease = await tagEmulator()
                if let emulator = lease.device {  // no [nfc_emulator] in this kit: nothing to offer
                    await DuressTagOffer.run(alertId: alertId, for: window, on: emulator)
                }
                await lease.release()
            }
        }
        guard let queue = await queue() else { return }
        let lease = await captureDevices()
        var capture = EvidenceCapture(queue: queue, camera: lease.device.camera, microphone: lease.device.microphone,
                                      location: lease.device.location)
        capture.moreCameras = lease.device.moreCameras
        capture.moreMicrophones = lease.device.moreMicrophones
        capture.audioDuration = settings.audio
        capture.video = settings.video
        capture.silent = true
        capture.segmentLength = settings.segment
        capture.keepRecording = { [sessions] in (try? sessions.load())?.sessionId == record.sessionId }
        _ = await capture.captureDuressEvidence(for: record, uploadingWith: EvidenceUploader(client: client, queue: queue))
        await lease.release()
    }
}
