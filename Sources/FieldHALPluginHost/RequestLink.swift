import FieldHAL
import FieldHALPluginProtocol
import Foundation
import Logging

/// A plugin process serving capabilities that work by request (the NFC reader, the tag
/// emulator, haptics, biometrics, the camera, microphone and speaker): started when the kit
/// opens the first of them and, after it fails, started again by the next request once the
/// backoff has passed (0.5 s after a failure, doubling to 30 s while starts keep failing),
/// with every device it served opened again. A plugin of protocol 1.6 or later serves every
/// such device a kit opens from it in this one process, several of a capability among them,
/// each named by a handle the host chooses (`Device`); one of 1.2 to 1.5 serves one device
/// per capability in a process (an NFC chip's reader and emulator share its device, as in
/// process); an older one gets a process per capability.
///
/// A capability opened again with the same section while it is open — a daemon's reload
/// opens the new kit before it closes the old one — shares the device the plugin already
/// holds (counted: it is closed with the last holder), as in-process backends share a
/// device by its name. Opening it a second time in another process would find an exclusive
/// device (a serial NFC reader) busy.
///
/// A request never waits long on a plugin that is down: within 2 s of the next start it
/// waits for that start; later it gets the failure at once (typed, naming the plugin, with
/// the tail of its stderr) and the time of the next start.
///
/// A receiver (1.6) is a device whose stream runs whether anyone asks (`watch`): a process
/// serving one is started again by the link itself once the backoff has passed, until it
/// serves again, and every stream is asked for again in the new process. The receiver hears
/// each failure as a lost source meanwhile. (A location plugin of 1.5 or older runs a process
/// of its own per receiver: `ExternalLocation.Link`.)
final class RequestLink: Sendable {
    let manifest: PluginManifest
    let logger: Logger
    private let state = LockedValue(State())
    /// Where a stream's notifications go: its number in the serving process to its feed.
    private let routes = LockedValue(Routes())
    /// Why the process is down while it is after serving, for its devices' `followHealth`.
    private let health = PluginHealth()

    /// How long past a request's own bound the host waits for the plugin's answer before it
    /// calls the plugin hung (the plugin answers a `timeout` itself at the bound).
    static let grace = Duration.seconds(5)
    /// The longest remaining backoff a request waits through rather than failing at once.
    static let patience = Duration.seconds(2)

    private struct State {
        var session: PluginSession?
        /// Each session started gets a number; only the end of the current one counts.
        var generation = 0
        var current: Int?
        var starting: Task<PluginSession, any Error>?
        var failure: FieldHALError?
        var delay = Duration.milliseconds(500)
        var retryAt: ContinuousClock.Instant?
        var failedStarts = 0
        var closed = false
        /// The devices this process serves, with their sections' parameters: opened
        /// again, in this order, by every start after a failure.
        var opened: [(Device, JSONValue)] = []
        /// Those opened or being opened, with their sections and how many hold each.
        var claimed: [Device: Claim] = [:]
        /// The handles given so far (1.6): each new device's is the next number.
        var handles = 0
        /// The devices whose stream is kept running, in the order they were first watched:
        /// watched again by every start, and while there is one the link starts itself.
        var watched: [(device: Device, method: String, feed: any StreamFeed)] = []
        /// The link starting its process again by itself (`revive`).
        var reviving: Task<Void, Never>?
    }

    /// The streams of one process (`session`, a generation): a notification of another
    /// process's stream is late and dropped.
    private struct Routes {
        var session = 0
        var streams: [Int64: any StreamFeed] = [:]
        /// Notifications of a stream whose number the host has not read yet: a plugin may
        /// send its first fix right behind its `gps.watch` answer, before the task that
        /// asked has run. Bounded: a stream never asked for is dropped from the oldest.
        var early: [(stream: Int64, method: String, parameters: JSONValue)] = []
    }

    /// At most this many early notifications are kept.
    private static let earlyLimit = 64

    /// A device on a link: its capability and, since 1.6, the handle the host named it by
    /// in `open` and names it by in every request after.
    struct Device: Hashable, Sendable {
        var capability: Capability
        var handle: String?

        var description: String { handle ?? capability.rawValue }
    }

    /// What a device's open answered: the plugin's name for it and its identity.
    struct Opened: Sendable {
        var name: String
        var identity: DeviceIdentity?
    }

    /// One device's open on this link and its holders (kits' devices).
    private struct Claim {
        var parameters: JSONValue
        var holders: Int
        /// The open every holder waits for.
        var opening: Task<Opened, any Error>?
    }

    init(manifest: PluginManifest, logger: Logger) {
        self.manifest = manifest
        self.logger = logger
    }

    /// Whether a plugin serves several capabilities in one process (protocol 1.2's `close`).
    static func shares(_ manifest: PluginManifest) -> Bool {
        manifest.protocolVersion >= PluginProtocol.Version(major: 1, minor: 2)
    }

    /// Whether a plugin serves several devices of a capability in one process, each named
    /// (protocol 1.6).
    static func namesDevices(_ manifest: PluginManifest) -> Bool {
        manifest.protocolVersion >= PluginProtocol.namedDevices
    }

    /// A link whose plugin runs with `capability` open, and the device's name for the kit
    /// (`NAME (plugin PLUGIN)`); or the error that says why not (the kit then reports the
    /// capability unavailable with it). The plugin's process for this kit is joined when
    /// it shares one and does not serve `capability` yet; else a process is started.
    static func started(_ manifest: PluginManifest, _ capability: Capability, _ parameters: PluginParameters,
                        in links: RequestLinks, logger: Logger) async throws -> (Hold, String) {
        let section = JSONValue(parameters.values)
        let (link, device, opening) = links.claim(capability, section) { RequestLink(manifest: manifest, logger: logger) }
        let hold = Hold(link: link, device: device)
        do {
            let opened = try await cancellably(opening)
            hold.identity = opened.identity
            return (hold, "\(opened.name) (plugin \(manifest.name))")
        } catch {
            await hold.release()
            throw error
        }
    }

    /// Claims `capability` with `section` on this link: a new claim (its open starts now),
    /// or one more holder of the same open. Nil when the link is closed, or (before 1.6)
    /// holds the capability with another section, or does not share and serves something
    /// already.
    fileprivate func claim(_ capability: Capability, _ section: JSONValue, new: Bool) -> (Device, Task<Opened, any Error>)? {
        state.withLock { state in
            guard !state.closed else { return nil }
            // The same section is the same device: one more holder (a reload's new kit).
            if let (device, claim) = state.claimed.first(where: { $0.key.capability == capability && $0.value.parameters == section }),
               let opening = claim.opening {
                state.claimed[device]?.holders += 1
                return (device, opening)
            }
            let device: Device
            if Self.namesDevices(manifest) {
                state.handles += 1
                device = Device(capability: capability, handle: "\(capability.rawValue)-\(state.handles)")
            } else {
                guard !state.claimed.keys.contains(where: { $0.capability == capability }), new || Self.shares(manifest) else { return nil }
                device = Device(capability: capability, handle: nil)
            }
            let opening = Task { [self] in try await attach(device, section) }
            state.claimed[device] = Claim(parameters: section, holders: 1, opening: opening)
            return (device, opening)
        }
    }

    /// What a kit's device holds of a link: its requests go through it, and `release` (once,
    /// whatever calls it again) lets go of the capability.
    final class Hold: Sendable {
        let link: RequestLink
        let device: Device
        private let released = LockedValue(false)
        private let known = LockedValue<DeviceIdentity?>(nil)

        fileprivate init(link: RequestLink, device: Device) {
            self.link = link
            self.device = device
        }

        var manifest: PluginManifest { link.manifest }
        var capability: Capability { device.capability }

        /// The identity the plugin's `open` answered with (1.6), if any.
        var identity: DeviceIdentity? {
            get { known.value }
            set { known.withLock { $0 = newValue } }
        }

        func call(_ method: String, _ parameters: JSONValue, timeout: Duration,
                  progress: (@Sendable (JSONValue) -> Void)? = nil) async throws -> JSONValue {
            try await link.call(method, PluginProtocol.naming(parameters, device: device.handle), timeout: timeout, progress: progress)
        }

        func call(_ method: String, _ parameters: JSONValue, descriptors: [OwnedDescriptor], timeout: Duration,
                  progress: PluginSession.Progress? = nil, holding: (any Sendable)? = nil) async throws -> PluginSession.Answer {
            try await link.call(method, PluginProtocol.naming(parameters, device: device.handle), descriptors: descriptors, timeout: timeout,
                                progress: progress, holding: holding)
        }

        /// Starts the device's stream (`method`, `gps.watch`) and keeps it running for as long
        /// as the device is held: its notifications go to the feed `make` gives (one feed for
        /// all the device's holders), and after every restart it is asked for again. The
        /// first `method` must succeed.
        func watch<Feed: StreamFeed>(_ method: String, feed make: () -> Feed) async throws -> Feed {
            try await link.watch(device, method, feed: make)
        }

        /// How the process stands (`SupervisedDevice`): every device on it shares its failures.
        func followHealth(_ handler: @escaping @Sendable (String?) -> Void) -> Subscription {
            link.followHealth(handler)
        }

        /// A notification to the plugin, if it is running (none is started for it).
        func notify(_ method: String, _ parameters: JSONValue = .object([:])) {
            link.notify(method, PluginProtocol.naming(parameters, device: device.handle))
        }

        func release() async {
            guard released.withLock({ state in defer { state = true }; return !state }) else { return }
            await link.detach(device)
        }
    }

    /// Opens a claimed device in the serving process (starting it when it is down).
    private func attach(_ device: Device, _ parameters: JSONValue) async throws -> Opened {
        while true {
            let session = try await serving()
            let answer = try await session.call("open", Self.openParameters(device, parameters), timeout: .seconds(10))
            let opened = Opened(name: answer["device"]?.string ?? manifest.name,
                                identity: try PluginProtocol.identity(from: answer["identity"], plugin: manifest.name))
            // A restart between the open and now would not have opened it: open it again there.
            // Every holder may have let go meanwhile: then the plugin closes it again.
            let (kept, unwanted) = state.withLock { state -> (Bool, Bool) in
                guard state.session === session, session.ended == nil else { return (false, false) }
                guard state.claimed[device] != nil else { return (false, true) }
                state.opened.append((device, parameters))
                return (true, false)
            }
            if unwanted {
                _ = try? await session.call("close", Self.closeParameters(device), timeout: .seconds(5))
                throw FieldHALError.cancelled("plugin \(manifest.name)")
            }
            if kept { return opened }
        }
    }

    /// A holder of `device` let go: with the last holder the plugin releases it (`close`);
    /// with the link's last device the process stops.
    private func detach(_ device: Device) async {
        let (held, last, session, feed) = state.withLock { state -> (Bool, Bool, PluginSession?, (any StreamFeed)?) in
            guard var claim = state.claimed[device] else { return (false, false, nil, nil) }
            claim.holders -= 1
            guard claim.holders == 0 else {
                state.claimed[device] = claim
                return (false, false, nil, nil)
            }
            state.claimed[device] = nil
            // Only a device the plugin opened is there to release.
            let wasOpen = state.opened.contains { $0.0 == device }
            state.opened.removeAll { $0.0 == device }
            let feed = state.watched.first { $0.device == device }?.feed
            state.watched.removeAll { $0.device == device }
            if state.claimed.isEmpty { state.closed = true }
            return (true, state.claimed.isEmpty, wasOpen ? state.session : nil, feed)
        }
        guard held else { return }
        if let feed {
            routes.withLock { $0.streams = $0.streams.filter { $0.value !== feed } }
            feed.finish()
        }
        if last {
            await close()
        } else if let session, session.ended == nil {
            _ = try? await session.call("close", Self.closeParameters(device), timeout: .seconds(5))
        }
    }

    private static func openParameters(_ device: Device, _ parameters: JSONValue) -> JSONValue {
        PluginProtocol.naming(.object(["capability": .string(device.capability.rawValue), "parameters": parameters]), device: device.handle)
    }

    private static func closeParameters(_ device: Device) -> JSONValue {
        PluginProtocol.naming(.object(["capability": .string(device.capability.rawValue)]), device: device.handle)
    }

    fileprivate var isClosed: Bool { state.withLock { $0.closed } }

    /// What this process serves, for the journal: `nfc, nfc_emulator` (1.6: `nfc-1, nfc-2`).
    private var serves: String {
        let names = state.withLock { $0.claimed.keys.map(\.description).sorted() }
        return names.isEmpty ? "nothing" : names.joined(separator: ", ")
    }

    /// Sends a request to the plugin, starting it first when it is down. The plugin has
    /// `timeout` (at most a day) plus the grace to answer.
    func call(_ method: String, _ parameters: JSONValue, timeout: Duration,
              progress: (@Sendable (JSONValue) -> Void)? = nil) async throws -> JSONValue {
        let session = try await serving()
        return try await session.call(method, parameters, timeout: min(timeout, PluginProtocol.longestWait) + Self.grace, progress: progress)
    }

    /// `call` with descriptors beside the request, answered with those beside the answer.
    /// `holding` stays alive until the plugin has answered (see `PluginSession.call`).
    func call(_ method: String, _ parameters: JSONValue, descriptors: [OwnedDescriptor], timeout: Duration,
              progress: PluginSession.Progress? = nil, holding: (any Sendable)? = nil) async throws -> PluginSession.Answer {
        let session = try await serving()
        return try await session.call(method, parameters, descriptors: descriptors, timeout: min(timeout, PluginProtocol.longestWait) + Self.grace,
                                      progress: progress, holding: holding)
    }

    /// A notification to the running plugin; dropped when none runs (what it would tell
    /// concerns a request that ended with the process).
    func notify(_ method: String, _ parameters: JSONValue) {
        state.withLock { $0.session }?.notify(method, parameters)
    }

    private func close() async {
        let (session, starting, reviving) = state.withLock { state in
            state.closed = true
            defer { state.session = nil; state.starting = nil }
            return (state.session, state.starting, state.reviving)
        }
        reviving?.cancel()
        starting?.cancel()
        if let started = try? await starting?.value { await started.stop() }
        await reviving?.value
        await session?.stop()
    }

    fileprivate func followHealth(_ handler: @escaping @Sendable (String?) -> Void) -> Subscription {
        health.follow(handler)
    }

    // MARK: - Streams

    /// `Hold.watch`: the first holder's `method` starts the stream; a later holder (a
    /// reload's new kit) shares its feed.
    fileprivate func watch<Feed: StreamFeed>(_ device: Device, _ method: String, feed make: () -> Feed) async throws -> Feed {
        let (feed, first) = state.withLock { state -> (Feed, Bool) in
            if let feed = state.watched.first(where: { $0.device == device })?.feed as? Feed { return (feed, false) }
            let feed = make()
            // Listed before it is asked for: a restart from here on asks for it itself.
            state.watched.append((device, method, feed))
            return (feed, true)
        }
        guard first else { return feed }
        do {
            while true {
                let session = try await serving()
                guard let number = state.withLock({ $0.session === session ? $0.current : nil }) else { continue }
                let stream = try await stream(of: device, method, from: session)
                // A process started since has asked for it itself; `follow` ignores this one.
                follow(stream, with: feed, session: number)
                return feed
            }
        } catch {
            state.withLock { $0.watched.removeAll { $0.device == device } }
            throw error
        }
    }

    /// Asks `session` for `device`'s stream; its number. The plugin has 5 s to answer.
    private func stream(of device: Device, _ method: String, from session: PluginSession) async throws -> Int64 {
        let answer = try await session.call(method, PluginProtocol.naming(.object([:]), device: device.handle), timeout: .seconds(5))
        guard let stream = answer["stream"]?.integer else {
            throw FieldHALError(.protocolError, subject: "plugin \(manifest.name)",
                                detail: "its \(method) answer has no \"stream\" number", advice: "docs/plugin-protocol.md")
        }
        return stream
    }

    /// From now on the notifications of `stream` in process `number` go to `feed`, those
    /// that came early first.
    private func follow(_ stream: Int64, with feed: any StreamFeed, session number: Int) {
        routes.withLock { routes in
            guard routes.session == number else { return }
            routes.streams[stream] = feed
            // Under the lock, so that no later notification overtakes these.
            for early in routes.early where early.stream == stream { feed.notified(early.method, early.parameters) }
            routes.early.removeAll { $0.stream == stream }
        }
    }

    /// A notification from process `number`: to the feed of the stream it names.
    private func route(_ method: String, _ parameters: JSONValue, session number: Int) {
        guard let stream = parameters["stream"]?.integer else { return }
        routes.withLock { routes in
            guard routes.session == number else { return }
            if let feed = routes.streams[stream] {
                feed.notified(method, parameters)
                return
            }
            if routes.early.count == Self.earlyLimit { routes.early.removeFirst() }
            routes.early.append((stream, method, parameters))
        }
    }

    /// A link with a stream to keep running starts its process again itself, each time the
    /// backoff has passed, until it serves again or is closed. One loop at a time.
    private func revive() {
        state.withLock { now in
            guard now.reviving == nil, !now.closed else { return }
            now.reviving = Task { [self] in
                while !Task.isCancelled {
                    // Ends (and says so under the lock, so that a failure from here on starts
                    // another loop) once the process serves or nothing needs it.
                    let wait = state.withLock { state -> Duration? in
                        let serving = state.session.map { $0.ended == nil } ?? false
                        if state.closed || state.watched.isEmpty || serving {
                            state.reviving = nil
                            return nil
                        }
                        return state.retryAt.map { max(.zero, $0 - .now) } ?? .zero
                    }
                    guard let wait else { return }
                    if wait > .zero { try? await Task.sleep(for: wait) }
                    guard !Task.isCancelled else { return }
                    _ = try? await serving()
                }
            }
        }
    }

    // MARK: - Starting

    /// A started plugin with every capability it served open again.
    private func connect() async throws -> PluginSession {
        let (number, opened, watched) = state.withLock { state in
            state.generation += 1
            state.current = state.generation
            return (state.generation, state.opened, state.watched)
        }
        routes.withLock { $0 = Routes(session: number) }
        let session = try await PluginSession.start(manifest, onNotification: { [weak self] method, parameters in
            self?.route(method, parameters, session: number)
        }, onEnd: { [weak self] error in
            self?.ended(error, session: number)
        })
        do {
            for (device, parameters) in opened {
                _ = try await session.call("open", Self.openParameters(device, parameters), timeout: .seconds(10))
            }
            for (device, method, feed) in watched {
                follow(try await stream(of: device, method, from: session), with: feed, session: number)
            }
            return session
        } catch {
            await session.stop()
            throw error
        }
    }

    /// The session failed while it served: the next request starts another after the backoff.
    /// Heard from the session (`onEnd`) or noticed first by a request (a session resumes its
    /// callers before it calls `onEnd`): whichever comes first retires it, once.
    private func ended(_ error: FieldHALError, session number: Int) {
        guard let delay = state.withLock({ Self.retire(error, session: number, in: &$0) }) else { return }
        retired(error, delay)
    }

    private static func retire(_ error: FieldHALError, session number: Int, in state: inout State) -> Duration? {
        guard state.current == number, !state.closed else { return nil }
        state.session = nil
        state.current = nil
        state.failure = error
        state.retryAt = .now + state.delay
        return state.delay
    }

    /// The serving process failed: said in the journal and to the streams' feeds; a link
    /// with streams starts it again itself.
    private func retired(_ error: FieldHALError, _ delay: Duration) {
        let feeds = state.withLock { $0.watched.map(\.feed) }
        guard !feeds.isEmpty else {
            let said = "\(error) — FieldHAL starts it again at the next \(serves) request from \(delay.secondsDescription) on"
            logger.error("\(said)")
            health.say(said)
            return
        }
        let said = "\(error) — starting it again in \(delay.secondsDescription)"
        logger.error("\(said)")
        health.say(said)
        for feed in feeds { feed.failed(error) }
        revive()
    }

    private enum Step {
        case ready(PluginSession)
        case join(Task<PluginSession, any Error>)
        case wait(Duration)
        case fail(FieldHALError)
        case retired(FieldHALError, Duration)
    }

    /// The serving session: the current one, the one being started, or a new one.
    private func serving() async throws -> PluginSession {
        while true {
            let step = state.withLock { state -> Step in
                if state.closed { return .fail(.cancelled("plugin \(manifest.name)")) }
                if let session = state.session {
                    guard let error = session.ended else { return .ready(session) }
                    if let number = state.current, let delay = Self.retire(error, session: number, in: &state) { return .retired(error, delay) }
                }
                if let starting = state.starting { return .join(starting) }
                if let retryAt = state.retryAt, retryAt > .now {
                    let left = retryAt - .now
                    if left <= Self.patience { return .wait(left) }
                    let failure = state.failure ?? FieldHALError(.unavailable, subject: "plugin \(manifest.name)", detail: "is down")
                    return .fail(FieldHALError(failure.kind, subject: failure.subject, detail: failure.detail,
                                               advice: "FieldHAL starts the plugin again in \(left.secondsDescription)"))
                }
                let task = Task { [self] in try await restart() }
                state.starting = task
                return .join(task)
            }
            switch step {
            case .ready(let session): return session
            case .fail(let error): throw error
            case .retired(let error, let delay): retired(error, delay)
            case .wait(let left):
                do { try await Task.sleep(for: left) } catch { throw FieldHALError.cancelled("plugin \(manifest.name)") }
            case .join(let task):
                let session = try await Self.cancellably(task)
                if session.ended == nil { return session }
            }
        }
    }

    /// One start after a failure; its outcome goes to the state and the journal.
    private func restart() async throws -> PluginSession {
        // The first start of a link is not a recovery: its failure is the open's to report.
        let recovering = state.withLock { $0.failure != nil || $0.failedStarts > 0 }
        do {
            let session = try await connect()
            let attempts = state.withLock { state -> Int in
                defer {
                    state.failedStarts = 0
                    state.delay = .milliseconds(500)
                    state.failure = nil
                    state.retryAt = nil
                    state.starting = nil
                }
                state.session = session
                return state.failedStarts + 1
            }
            if recovering, !state.value.closed {
                logger.notice("plugin \(manifest.name) serves \(serves) again (\(attempts == 1 ? "restarted" : "after \(attempts) attempts"))")
                health.say(nil)
            }
            return session
        } catch {
            let failure = (error as? FieldHALError) ?? FieldHALError(.unavailable, subject: "plugin \(manifest.name)", detail: "\(error)")
            let (attempts, next) = state.withLock { state -> (Int, Duration) in
                state.failedStarts += 1
                state.delay = min(state.delay * 2, .seconds(30))
                state.failure = failure
                state.retryAt = .now + state.delay
                state.starting = nil
                return (state.failedStarts, state.delay)
            }
            let feeds = state.withLock { $0.closed ? [] : $0.watched.map(\.feed) }
            if recovering, !state.value.closed {
                let said = "\(failure) — restart \(attempts) failed; the next \(feeds.isEmpty ? "at a request from \(next.secondsDescription) on" : "in \(next.secondsDescription)")"
                logger.warning("\(said)")
                health.say(said)
                for feed in feeds { feed.failed(failure) }
            }
            throw failure
        }
    }

    /// Waits for `task` unless the caller is cancelled first (the start goes on for others).
    fileprivate static func cancellably<Value: Sendable>(_ task: Task<Value, any Error>) async throws -> Value {
        let waiter = LockedValue<CheckedContinuation<Value, any Error>?>(nil)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Value, any Error>) in
                waiter.withLock { $0 = continuation }
                if Task.isCancelled, let waiting = waiter.withLock({ $0.take() }) {
                    waiting.resume(throwing: FieldHALError.cancelled("a plugin's start"))
                    return
                }
                Task {
                    let result = await task.result
                    waiter.withLock { $0.take() }?.resume(with: result)
                }
            }
        } onCancel: {
            waiter.withLock { $0.take() }?.resume(throwing: FieldHALError.cancelled("a plugin's start"))
        }
    }
}

/// What a device's stream tells (a receiver's fixes, 1.6), fed by its link: the stream's
/// notifications as the plugin sends them, and each failure of the process while the link
/// starts it again.
protocol StreamFeed: AnyObject, Sendable {
    /// A notification naming the stream (`gps.fix`, `gps.lost`), on the session's thread.
    func notified(_ method: String, _ parameters: JSONValue)
    /// The process failed, or a start to replace it did.
    func failed(_ error: FieldHALError)
    /// The device is closed: nothing more comes.
    func finish()
}

/// A kit's device served by request from a plugin process: its name for the kit and its
/// hold on the link. Opening one claims its capability on a link (`RequestLink.started`);
/// closing it lets go, once.
protocol ExternalRequestDevice: SupervisedDevice {
    static var capability: Capability { get }
    var link: RequestLink.Hold { get }
    init(deviceName: String, link: RequestLink.Hold)
}

extension ExternalRequestDevice {
    /// What the plugin said of the device in its `open` answer (1.6).
    var identity: DeviceIdentity? { link.identity }

    func followHealth(_ handler: @escaping @Sendable (String?) -> Void) -> Subscription { link.followHealth(handler) }

    static func open(_ manifest: PluginManifest, _ parameters: PluginParameters, in links: RequestLinks, logger: Logger) async throws -> Self {
        let (link, device) = try await RequestLink.started(manifest, capability, parameters, in: links, logger: logger)
        return Self(deviceName: device, link: link)
    }

    func close() async { await link.release() }
}

/// The request-driven plugin processes of one external plugin, for every kit this process
/// loads: a kit's capabilities from a plugin that shares (protocol 1.2) meet in one process,
/// and a capability a second kit opens with the same section (a reload) shares the open
/// device. One per installed plugin (its manifest's file and version), whatever registry
/// names it: a reload reads the plugin directories again and makes new descriptors.
final class RequestLinks: Sendable {
    private let links = LockedValue<[RequestLink]>([])

    private static let installed = LockedValue<[String: RequestLinks]>([:])

    /// The links of the plugin `manifest` describes.
    static func shared(for manifest: PluginManifest) -> RequestLinks {
        installed.withLock { installed in
            let key = "\(manifest.file)\u{0}\(manifest.version)\u{0}\(manifest.executable)"
            if let links = installed[key] { return links }
            let links = RequestLinks()
            installed[key] = links
            return links
        }
    }

    /// A link on which `capability` with `section` is now claimed, and the open to wait
    /// for: the same open on a link that holds it with that section, a sharing link that
    /// does not serve it yet, or a new link (`make`). Links that closed are forgotten.
    fileprivate func claim(_ capability: Capability, _ section: JSONValue,
                           make: () -> RequestLink) -> (RequestLink, RequestLink.Device, Task<RequestLink.Opened, any Error>) {
        links.withLock { links in
            links.removeAll { $0.isClosed }
            for link in links {
                if let (device, opening) = link.claim(capability, section, new: false) { return (link, device, opening) }
            }
            let link = make()
            links.append(link)
            let (device, opening) = link.claim(capability, section, new: true)!
            return (link, device, opening)
        }
    }
}
