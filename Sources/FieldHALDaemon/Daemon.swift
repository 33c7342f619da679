import FieldHAL
import FieldHALAPI
import FieldHALCommandLine
import FieldHALComposition
import FieldHALFlows
import FieldHALHotplug
import FieldHALLock
import FieldHALLogind
import FieldHALMQTT
import FieldHALServer
import FieldHALSystem
import Foundation
import Logging
import ServiceLifecycle
import Transrify
import UnixSignals

/// The daemon's loops, all reading the current configuration (replaced on SIGHUP). Each is a
/// service of the run's `ServiceGroup` (`services(host:hangUps:)`), after the one that owns
/// the devices: SIGTERM stops them in reverse order, the devices last.
///
/// Nothing here logs anything that depends on the session's mode: uploads and the sealed
/// session are handled silently, so the journal of a duressed kit reads like any other's.
public final class Daemon: Sendable {
    /// The configuration in force, and how many times it was loaded: loops that keep
    /// devices open reopen them when the generation changes.
    let configuration: LockedValue<(environment: Environment, generation: Int)>
    let options: GlobalOptions
    let logger: Logger
    let uploadInterval: Duration
    let verifyInterval: Duration
    /// The time the services keep: their waits, the lock's relock, the duress tag's window.
    /// The system's in a running daemon; a test's `ManualKitClock` moves them at will.
    public let clock: any KitClock
    let startedAt = Date()
    /// How alerts arrive now, for `fieldhal daemon status`.
    let alertTransport = LockedValue("not signed in")
    /// Sign-ins and unlocks made through the API (`fieldhal signin`, `lock unlock` and
    /// `lock settings` go through it), their work done one at a time.
    let signIns = AsyncStream.makeStream(of: Authentication.self)

    enum Authentication: Sendable {
        case signIn, unlock
    }
    /// Windows of the update lock to open, one after each sign-in or unlock (`UpdateLock`).
    let updateHolds = AsyncStream.makeStream(of: Duration.self)
    /// Duress tag offers (limited mode) for the tag service: one at a time, a newer one
    /// replaces the one on offer.
    let tagOffers = AsyncStream.makeStream(of: AfterAuthenticationWork.TagOffer.self)
    /// The devices the daemon holds for everyone (the shared location watch and NFC chip)
    /// and the API's state: made when the daemon starts, before anything uses them.
    let api = LockedValue<APIHost?>(nil)
    let authorisation: APIAuthorisation
    /// `[web]`: where the web door listens, or nil (no door). Read when the daemon starts;
    /// a reload does not move it.
    let webDoor: WebDoorSettings?
    /// `[metrics]`: the loopback port Prometheus scrapes, when configured.
    let metricsDoor: MetricsSettings?
    /// `[mqtt]`: the fleet's broker, when configured; and the bridge to it once it runs.
    let broker: MQTTSettings?
    let fleetBridge = LockedValue<FleetBridge?>(nil)
    /// udev's (or the kernel's) device events, listened to from before the devices open, so
    /// that a device going away while they open is not missed. nil: not followed.
    let hotplug = LockedValue<HotplugMonitor?>(nil)
    /// Each reload of the configuration, for the loops that wait on it.
    let reloads = Broadcaster<Int>(bufferLimit: 1)
    /// The run's services, stopped together when the kit's data is erased under them.
    public let group = LockedValue<ServiceGroup?>(nil)
    public let erased = LockedValue(false)

    /// The lock's wipe setting erased the kit's data: the sessions, keys and vault the daemon
    /// holds went with it, so it stops (after the answer that says so) and its unit starts
    /// it again on the empty state. Evidence still to upload was kept and goes on uploading.
    func restartAfterErase() {
        guard !erased.withLock({ seen in defer { seen = true }; return seen }) else { return }
        logger.notice("the kit's data was erased after the last wrong PIN its lock allows; stopping to start afresh")
        let group = self.group.value
        Task { await group?.triggerGracefulShutdown() }
    }

    public init(options: GlobalOptions, logger: Logger, uploadInterval: Duration, verifyInterval: Duration,
                clock: any KitClock = SystemKitClock()) throws {
        self.options = options
        self.clock = clock
        var environment = try Environment(options)
        environment.clock = clock  // as `environment()` makes it; self is not ready yet
        authorisation = try environment.apiAuthorisation()
        webDoor = try WebDoorSettings(settings: environment.configuration.settings["web"], file: environment.configuration.file)
        metricsDoor = try MetricsSettings(settings: environment.configuration.settings["metrics"], file: environment.configuration.file)
        broker = try MQTTSettings(settings: environment.configuration.settings["mqtt"], file: environment.configuration.file)
        self.configuration = LockedValue((environment, 0))
        self.logger = logger
        self.uploadInterval = uploadInterval
        self.verifyInterval = verifyInterval
    }

    /// Opens what the daemon holds for everyone (the API's host: the shared receiver, NFC
    /// chip, camera, …) and says it is running.
    public func openDevices() async -> APIHost {
        // The same thread names before and after HTTP requests: the HTTP client's from the start.
        await HTTPSession.prepare()
        EvidenceSealer.prepare()
        if HotplugMonitor.isAvailable {
            do {
                let monitor = try HotplugMonitor()
                hotplug.withLock { $0 = monitor }
            } catch {
                logger.warning("devices are not followed as they come and go: \(CommandFailure(error).description)")
            }
        }
        let environment = current
        let host = await APIHost.start(identity: environment.apiIdentity(startedAt: startedAt), authorisation: authorisation) { only in
            await environment.loadKit(devices: only)
        }
        host.flows = DaemonFlows(daemon: self)
        host.metrics = KitMetrics(includesProcess: metricsDoor?.includesProcess ?? false)
        host.metrics.read { [weak host] in host?.receiverReadings() ?? [] }
        do {
            host.webTokens = try DaemonWebTokens(stateDirectory: environment.stateDirectory)
        } catch {
            logger.error("web tokens: \(CommandFailure(error).description) — no page gets through the web door until it is fixed")
        }
        api.withLock { $0 = host }
        logger.info("fieldhal \(FieldHALVersion.current) running; state \(environment.stateDirectory.path)")
        if let obsolete = DaemonSettings.obsolete(in: environment.configuration) { logger.warning("\(obsolete)") }
        return host
    }

    /// The run's services, in start order; SIGTERM stops them in reverse: the duress tag's
    /// offer first (the emulation ends), the API before the devices it serves, the devices
    /// last. A loop that ends on its own (the API failing to serve) leaves the rest running.
    public func services(host: APIHost, hangUps: UnixSignalsSequence) -> [ServiceGroupConfiguration.ServiceConfiguration] {
        let loops: [DaemonLoop] = [
            DaemonLoop("api") { await self.serveAPI(host) },
            DaemonLoop("web door") { await self.serveWebDoor(host) },
            DaemonLoop("metrics") { await self.serveMetrics(host) },
            DaemonLoop("mqtt") { await self.bridgeToBroker(host) },
            DaemonLoop("update lock") { await self.holdUpdateLock() },
            DaemonLoop("reload") { await self.reloadOnHangUp(hangUps) },
            DaemonLoop("hotplug") { await self.followDevices(host) },
            DaemonLoop("alerts") { await self.watchAlerts() },
            DaemonLoop("evidence uploads") { await self.uploadEvidence() },
            DaemonLoop("session checks") { await self.verifySession() },
            DaemonLoop("lock") { await self.watchLock() },
            DaemonLoop("work after sign-ins") { await self.workAfterSignIns() },
            DaemonLoop("duress tag") { await self.offerDuressTags() },
        ]
        let owner = DeviceOwner(host: host) { [api] in api.withLock { $0 = nil } }
        return [.init(service: owner, successTerminationBehavior: .ignore)]
            + loops.map { .init(service: $0, successTerminationBehavior: .ignore) }
    }

    /// The daemon's NFC chip as the duress tag's background turn, and as a reader for an
    /// alert's acknowledgement (which goes first).
    private var sharedTag: (any NFCTagEmulator)? {
        // No [nfc_emulator], or none with the duress-tag role: nothing to offer.
        guard let chip = api.value?.duressTagChip() else { return nil }
        return chip.emulator(for: "the kit's tag offer", priority: .background)
    }
    /// What the work after a sign-in uses: the daemon's own devices.
    private var shared: SharedDevices {
        let host = api.value
        let cameras = host?.evidenceCameras() ?? [], microphones = host?.evidenceMicrophones() ?? []
        return SharedDevices(tag: sharedTag, capture: .init(camera: cameras.first, microphone: microphones.first, location: try? host?.locationProvider(),
                                                            moreCameras: Array(cameras.dropFirst()), moreMicrophones: Array(microphones.dropFirst())))
    }
    /// The fingerprint sensors the daemon holds, as one that takes a finger on any (or,
    /// while it reloads, the ones opened for `body`).
    func withSensor<T>(_ body: (any BiometricAuthenticator) async throws -> T) async throws -> T {
        if let sensor = AnySensor.of(api.value?.fingerprintSensors() ?? []) { return try await body(sensor) }
        return try await current.withKit(for: .biometrics) { kit in try await body(try AnySensor.of(kit.fingerprintSensors()) ?? kit.biometrics()) }
    }

    /// The first tag on any reader with the `ack` role (each its chip's turn).
    var sharedReader: (any NFCReader)? {
        guard let host = api.value else { return nil }
        return FirstTagReader.of(host.ackReaders(for: "an alert acknowledgement by NFC"))
            ?? NoReader(reason: "no reader has the ack role (roles = [\"ack\"] in an [nfc] section)")
    }

    private func offerTag(_ offer: @escaping AfterAuthenticationWork.TagOffer) {
        tagOffers.continuation.yield(offer)
    }

    public var current: Environment { configuration.withLock { $0.environment } }

    /// The configuration read again, on the daemon's clock.
    private func environment() throws -> Environment {
        var environment = try Environment(options)
        environment.clock = clock
        return environment
    }

    private func reloadOnHangUp(_ hangUps: UnixSignalsSequence) async {
        for await _ in hangUps {
            do {
                let fresh = try environment()
                let authorisation = try fresh.apiAuthorisation()
                // A broken [mqtt] refuses the reload, as a broken grant does: the bridge keeps going.
                _ = try MQTTSettings(settings: fresh.configuration.settings["mqtt"], file: fresh.configuration.file)
                configuration.withLock { $0 = (fresh, $0.generation + 1) }
                reloads.yield(0)
                logger.info("configuration reloaded")
                if let host = api.value {
                    await host.reload(identity: fresh.apiIdentity(startedAt: startedAt), authorisation: authorisation) { only in
                        await fresh.loadKit(devices: only)
                    }
                }
            } catch {
                logger.error("configuration not reloaded, the old one stays: \(CommandFailure(error).description)")
            }
        }
    }

    /// Configured devices as they come and go (udev's events, or the kernel's without udevd):
    /// one that goes away makes its capability unavailable, one that comes back is opened
    /// again; each change a journal line and a `capability` event. Matched by what the
    /// configuration names, as the current configuration names it (a reload is followed).
    private func followDevices(_ host: APIHost) async {
        guard let monitor = hotplug.value else { return }
        defer { monitor.stop() }
        let follower = DeviceFollower(host: host, locate: { await self.current.devicePresence() },
                                      load: { only in await self.current.loadKit(devices: only) })
        await follower.follow(monitor.events, started: { [logger] in
            logger.info("following devices as they come and go (\(monitor.source == .udev ? "udev's" : "the kernel's") events)")
        }) { [logger] change in
            let status = change.status
            if status.isAvailable {
                logger.notice("\(status.subject): \(change.node ?? status.device ?? "its device") is back (\(status.plugin ?? "?") plugin); available")
            } else {
                logger.warning("\(status.subject): unavailable: \(status.reason ?? "unknown")")
            }
        }
    }

    /// Req 25, 26, 29, 35: while signed in, the alert subscription (WebSocket channel or
    /// polling); a banner in the journal per new alert, the haptic "warning" and the soft
    /// sound. It is made again when the session changes or SIGHUP brings a new configuration.
    private func watchAlerts() async {
        var lastProblem: String?
        while !Task.isCancelled {
            let subscriptions = changeSubscriptions()  // before the look: no change is missed
            let (generation, environment) = configuration.withLock { ($0.generation, $0.environment) }
            guard let session = try? environment.sessionStore().load() else {
                alertTransport.withLock { $0 = "not signed in" }
                await nextChange(subscriptions)
                continue
            }
            do {
                // The daemon's own receiver, haptics and speaker (see APIHost): as they are
                // after a reload, not as they were when the session began.
                let subscription = try environment.alertSubscription(session: session) { [api] in
                    await (try? api.value?.locationProvider())?.geolocation()
                }
                lastProblem = nil
                await withTaskGroup(of: Void.self) { group in
                    group.addTask { await subscription.run { event in await self.report(event) } }
                    await waitWhileCurrent(session: session, generation: generation)
                    group.cancelAll()
                }
            } catch {
                let problem = CommandFailure(error).description
                if problem != lastProblem { logger.warning("alerts: \(problem)") }
                lastProblem = problem
                await waitWhileCurrent(session: session, generation: generation, atMost: .seconds(15))
            }
        }
    }

    /// How long a loop waiting for the session to change goes without looking: changes made
    /// in this process wake it at once (`SessionStore.changes`), another process's (a
    /// command run on the state directory without the daemon) within this.
    static let sessionLookInterval: Duration = .seconds(15)

    /// What a loop waits on: the session's changes in this process and the reloads, each
    /// subscribed before the loop looks at the state, so that no change between the look
    /// and the wait is missed. Made anew for every wait: a stream whose waiting task was
    /// cancelled is over.
    private func changeSubscriptions() -> (sessions: AsyncThrowingStream<Int, any Error>, reloads: AsyncThrowingStream<Int, any Error>) {
        (SessionStore.changes.subscribe(), reloads.subscribe())
    }

    /// Until the session changes in this process, the configuration is reloaded,
    /// `sessionLookInterval` has passed or `deadline` has come (or the task is cancelled).
    private func nextChange(_ subscriptions: (sessions: AsyncThrowingStream<Int, any Error>, reloads: AsyncThrowingStream<Int, any Error>),
                            before deadline: Date = .distantFuture) async {
        await firstOf([subscriptions.sessions, subscriptions.reloads],
                      until: min(deadline, clock.now.addingTimeInterval(Self.sessionLookInterval.seconds)))
    }

    /// Until any of `streams` yields or ends, `deadline` comes on the daemon's clock, or the
    /// task is cancelled.
    private func firstOf(_ streams: [AsyncThrowingStream<Int, any Error>], until deadline: Date) async {
        await withTaskGroup(of: Void.self) { [clock] race in
            for stream in streams { race.addTask { _ = try? await stream.first { _ in true } } }
            race.addTask { try? await clock.sleep(until: deadline) }
            await race.next()
            race.cancelAll()
        }
    }

    /// Returns when the session or the configuration changes (or after `atMost`, or on cancel).
    private func waitWhileCurrent(session: SessionRecord, generation: Int, atMost limit: Duration = .seconds(86_400 * 365)) async {
        let deadline = clock.now.addingTimeInterval(limit.seconds)
        while !Task.isCancelled, clock.now < deadline {
            let subscriptions = changeSubscriptions()
            let (nowGeneration, environment) = configuration.withLock { ($0.generation, $0.environment) }
            // Not the alert id: it arrives after a duress sign-in only, and a restart then
            // would show (a second "alerts: …" line). The watcher knows its user's alerts by
            // customer reference from the start.
            guard nowGeneration == generation, let now = try? environment.sessionStore().load(),
                  now.sessionId == session.sessionId else { return }
            await nextChange(subscriptions, before: deadline)
        }
    }

    private let alertProblem = LockedValue<String?>(nil)

    private func report(_ event: AlertSubscription.Event) async {
        switch event {
        case .announce(let banner):
            logger.notice("\(banner.text) [alert \(banner.alert.alertId)]")
            let host = api.value
            host?.publish(.alert(APIAlert(banner)))
            await AlertFeedback.announce(haptics: try? host?.haptics(), speaker: try? host?.speaker())
        case .transport(.webSocket, _):
            alertTransport.withLock { $0 = "over the WebSocket channel" }
            alertProblem.withLock { $0 = nil }
            logger.info("alerts: over the WebSocket channel")
        case .transport(.polling, let reason):
            let why = reason.map { " (\($0))" } ?? ""
            alertTransport.withLock { $0 = "polling every \(current.alertPollSeconds) s" }
            logger.info("alerts: polling every \(current.alertPollSeconds) s\(why)")
        case .problem(let problem):
            if alertProblem.withLock({ last in defer { last = problem }; return last != problem }) { logger.warning("alerts: \(problem)") }
        }
    }

    /// The hardware API on its Unix socket (issue 20). A failure to serve is logged and the
    /// daemon's other work carries on (with the devices it holds).
    private func serveAPI(_ host: APIHost) async {
        let path = current.apiSocketPath
        do {
            var server = APIServer(socketPath: path, host: host, scratchBase: PrivateScratch.base(stateDirectory: current.stateDirectory.path))
            if ProcessInfo.processInfo.environment["FIELDHAL_MEASURE_EVENTS_VIA_NIO"] != nil { server.writesEventsDirectly = false }
            try await server.run { self.logger.info("api: serving on \(path)") }
        } catch where !Task.isCancelled {
            logger.error("api \(path): \(CommandFailure(error).description) — the API is off until the daemon restarts")
        } catch {}
    }

    /// The web door (`[web]`), when configured: the same host and routes as the socket's.
    private func serveWebDoor(_ host: APIHost) async {
        guard let webDoor else { return }
        let place = "\(webDoor.address.contains(":") ? "[\(webDoor.address)]" : webDoor.address):\(webDoor.port)"
        do {
            let api = APIServer(socketPath: current.apiSocketPath, host: host, scratchBase: PrivateScratch.base(stateDirectory: current.stateDirectory.path))
            try await WebDoorServer(settings: webDoor, api: api).run { self.logger.info("web door: serving on http://\(place)") }
        } catch where !Task.isCancelled {
            logger.error("web door \(place): \(CommandFailure(error).description) — the web door is closed until the daemon restarts")
        } catch {}
    }

    /// `/metrics` for Prometheus (`[metrics]`), when configured.
    private func serveMetrics(_ host: APIHost) async {
        guard let metricsDoor else { return }
        let place = "\(metricsDoor.address.contains(":") ? "[\(metricsDoor.address)]" : metricsDoor.address):\(metricsDoor.port)"
        do {
            try await MetricsDoor(settings: metricsDoor, host: host).run { self.logger.info("metrics: serving on http://\(place)/metrics") }
        } catch where !Task.isCancelled {
            logger.error("metrics \(place): \(CommandFailure(error).description) — no metrics until the daemon restarts")
        } catch {}
    }

    /// The update lock beside the API's socket, held for each window asked for (`UpdateLock`).
    /// Without it (a directory the daemon may not write) updates are simply not held back.
    private func holdUpdateLock() async {
        let path = URL(fileURLWithPath: current.apiSocketPath).deletingLastPathComponent().appendingPathComponent("update.lock").path
        let lock: UpdateLock
        // logind's shutdown inhibitor beside the file, where there is a system bus to ask.
        let inhibitor = ShutdownInhibitor.systemBusExists ? ShutdownInhibitor(logger: logger) : nil
        inhibitor?.probe()
        do {
            lock = try UpdateLock(path: path, inhibitor: inhibitor)
        } catch {
            logger.warning("update lock: \(CommandFailure(error).description) — updates are not held back while evidence is made")
            for await _ in updateHolds.stream {}
            return
        }
        await withDiscardingTaskGroup { group in
            for await window in updateHolds.stream {
                group.addTask { await lock.hold(for: window, on: self.clock) }
            }
        }
    }

    /// Hands the work after a sign-in or an unlock to the loop that does it. After an
    /// unlock only while signed in to Transrify (a duress PIN then raises the silent alert):
    /// whether a session exists does not depend on the PIN just typed, so the choice shows
    /// nothing.
    func afterAuthentication(_ what: Authentication) {
        if what == .unlock, ((try? current.sessionStore().load()) ?? nil) == nil { return }
        updateHolds.continuation.yield(current.backgroundRunLifetime)
        signIns.continuation.yield(what)
    }

    /// The work after each sign-in (the alert in limited mode, evidence, the duress tag),
    /// silently, as the detached `after-signin` would; the tag's offer goes on beside the
    /// next sign-ins. SIGTERM cancels it all: the evidence queue keeps what is not uploaded.
    private func workAfterSignIns() async {
        for await command in signIns.stream {
            guard let work = try? current.afterAuthenticationWork(shared: shared) else { continue }
            if command == .unlock {
                try? await work.afterUnlock { self.offerTag($0) }
            } else {
                await work.afterSignIn { self.offerTag($0) }
            }
        }
    }

    /// The duress tag's offers, one at a time: a newer one ends the one on offer. Each runs
    /// as a child of this loop, so SIGTERM ends the emulation with it.
    private func offerDuressTags() async {
        if let resumed = resumedDuressTag() { offerTag(resumed) }
        await withDiscardingTaskGroup { group in
            var current: AsyncStream<Void>.Continuation?
            for await offer in tagOffers.stream {
                current?.finish()
                let (superseded, supersede) = AsyncStream.makeStream(of: Void.self)
                current = supersede
                group.addTask {
                    // The offer, until it ends or the next one supersedes it.
                    await withTaskGroup(of: Void.self) { race in
                        race.addTask { await offer() }
                        race.addTask { for await _ in superseded {} }
                        await race.next()
                        race.cancelAll()
                    }
                }
            }
            current?.finish()
        }
    }

    /// A daemon (re)started while its kit is in limited mode offers the duress tag again for
    /// what is left of `nfc_emulation_s` since the sign-in: a restart must not end it.
    private func resumedDuressTag() -> AfterAuthenticationWork.TagOffer? {
        let environment = current
        guard environment.nfcEnabled, let record = try? environment.sessionStore().load(), record.limitedMode,
              let alertId = record.alertId else { return nil }
        let window = Double(environment.configuration.settings["transrify"]?.integer("nfc_emulation_s") ?? 1800)
        let left = window - clock.now.timeIntervalSince(record.signedInAt)
        guard left >= 1, let tag = sharedTag else { return nil }
        return { await DuressTagOffer.run(alertId: alertId, for: .seconds(left), on: tag) }
    }

    /// Evidence waiting from earlier runs goes out; the queue is opened per flush so that
    /// `signin`'s background run and `evidence capture` can use it in between. Silent.
    private func uploadEvidence() async {
        while !Task.isCancelled {
            let environment = current
            if let queue = try? EvidenceQueue(stateDirectory: environment.stateDirectory, vault: try environment.vault()),
               let items = try? queue.items(), !items.isEmpty, let client = try? environment.transrifyClient() {
                _ = try? await EvidenceUploader(client: client, queue: queue).flush()
            }
            try? await clock.sleep(for: uploadInterval)
        }
    }

    /// Req 18: periodically; invalid → signed out, network error → kept.
    private func verifySession() async {
        while !Task.isCancelled {
            try? await clock.sleep(for: verifyInterval)
            let environment = current
            guard let client = try? environment.transrifyClient(), let sessions = try? environment.sessionStore() else { continue }
            if case .cleared? = try? await SessionVerifier(client: client, sessions: sessions).verify() {
                logger.info("the session is no longer valid; signed out")
            }
        }
    }

    /// The longest the lock's watch goes without looking: a change made without the daemon
    /// (a command on the state directory while none answers) is seen within this.
    static let lockLookInterval: Duration = .seconds(60)

    /// The lock relocks by itself when idle (it is computed on read); this notes the moment.
    /// It looks when the lock says it will relock, when the API changed it, and at least
    /// every `lockLookInterval` — not every 5 s, which read and verified the whole audit log
    /// each time.
    private func watchLock() async {
        while !Task.isCancelled {
            let changes = lockChanges.subscribe()  // before the look: no change is missed
            let relocksAt = noteLock(polled: true)
            // Just past the relock: the lock computes it on read.
            let look = clock.now.addingTimeInterval(Self.lockLookInterval.seconds)
            await firstOf([changes], until: relocksAt.map { min(look, $0.addingTimeInterval(0.05)) } ?? look)
        }
    }

    /// Each change of the lock made through the API, for the watch to look again.
    let lockChanges = Broadcaster<Int>(bufferLimit: 1)

    private struct LockSeen: Equatable {
        var configured: Bool
        var locked: Bool
    }
    private let lockSeen = LockedValue<LockSeen?>(nil)

    /// Publishes the lock's state on the event stream when it changed since last seen: at
    /// once after a change made through the API, at an idle relock (logged), within
    /// `lockLookInterval` of a change made without the daemon. Returns when the lock will
    /// relock if left idle.
    @discardableResult
    func noteLock(polled: Bool = false) -> Date? {
        if !polled { lockChanges.yield(0) }
        guard let status = try? current.lockService().status() else { return nil }
        let now = LockSeen(configured: status.configured, locked: status.locked)
        let before = lockSeen.withLock { seen in defer { seen = now }; return seen }
        if let before, before != now {
            if polled, now.configured, before.configured, !before.locked, now.locked { logger.info("locked (idle)") }
            api.value?.publish(.lock(APILockStatus(status, stateDirectory: current.stateDirectory)))
        }
        return status.relocksAt
    }
}

/// One of the daemon's loops as a service: it runs until it ends by itself or the group's
/// graceful shutdown (SIGTERM) cancels it.
struct DaemonLoop: Service {
    let name: String
    let body: @Sendable () async -> Void

    init(_ name: String, _ body: @escaping @Sendable () async -> Void) {
        self.name = name
        self.body = body
    }

    /// A loop with nothing to do (no `[web]`, no `[mqtt]`), or one that ended on its own,
    /// waits for its turn to stop: a service that finished while the group was stopping the
    /// ones after it was "finished unexpectedly" to swift-service-lifecycle, and a SIGTERM
    /// just after the start made the daemon exit 1 (DaemonCLITests, once in CI).
    func run() async throws {
        await cancelWhenGracefulShutdown { await body() }
        try? await gracefulShutdown()
    }
}

/// Owns the devices the daemon shares (`APIHost`) for the whole run. First in the group, so
/// it is the last to stop: every loop and the API have let go of the devices by then.
struct DeviceOwner: Service {
    let host: APIHost
    let forget: @Sendable () -> Void

    func run() async throws {
        try? await gracefulShutdown()
        forget()
        await host.close()
    }
}
