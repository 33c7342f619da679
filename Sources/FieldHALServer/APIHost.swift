import FieldHAL
import FieldHALAPI
import FieldHALSystem
import Foundation
import Synchronization

/// What the API serves from: who may do what, how the kit loaded, and the devices the API
/// keeps open. The daemon composes one and calls `reload` on SIGHUP.
///
/// It holds open the location provider (one watch for every client, `SharedLocation`), the
/// NFC chip (reader and tag emulator taking turns, `NFCTurns`), the haptics, the speaker, the
/// camera and the microphone, which the daemon's own flows use too: the alert loop's position
/// and feedback, the duress tag's offer, the NFC acknowledgement of an alert and the duress
/// capture; and the fingerprint sensor, which the lock's fingerprint unlock uses.
public final class APIHost: Sendable {
    /// What the daemon is: for `GET /v1/status`.
    public struct Identity: Sendable {
        public var version: String
        public var pid: Int32
        public var startedAt: Date
        public var configurationFile: String

        public init(version: String, pid: Int32, startedAt: Date, configurationFile: String) {
            self.version = version
            self.pid = pid
            self.startedAt = startedAt
            self.configurationFile = configurationFile
        }
    }

    /// Loads the kit the way the daemon does: all of it (`nil`) or some devices.
    public typealias KitLoader = @Sendable (_ only: Set<DeviceKey>?) async -> Kit

    private struct State {
        var identity: Identity
        var authorisation: APIAuthorisation
        var capabilities: APICapabilities
        var held: Kit?
        /// Why a held device's backend is down while it is (a plugin process failed and is
        /// being started again: `SupervisedDevice`). What the API reports shows the device
        /// unavailable for it; the held kit, and so the flows and the requests, still reach
        /// the device, whose next request may be what starts its plugin again.
        var down: [DeviceKey: String] = [:]
        /// The supervised devices followed, each under a number: a change heard from one
        /// no longer followed (replaced by a reload or a replug) is dropped.
        var following: [DeviceKey: Int] = [:]
        var subscriptions: [DeviceKey: Subscription] = [:]
        var followed = 0
    }

    private let state: Mutex<State>
    /// One change of the held devices at a time: a reload, a device gone, a device back.
    private let changes = SerialGate()
    private let flowsSlot = Mutex<(any APIFlows)?>(nil)
    private let webTokensSlot = Mutex<(any APIWebTokenBook)?>(nil)
    private let metricsSlot = Mutex(KitMetrics())
    /// What `/metrics` counts and reads (issue 46); the daemon sets it from `[metrics]`.
    public var metrics: KitMetrics {
        get { metricsSlot.withLock { $0 } }
        set { metricsSlot.withLock { $0 = newValue } }
    }

    /// The web door's tokens, as the daemon keeps them (nil: the routes say the book is not
    /// open, and the door admits nobody).
    public var webTokens: (any APIWebTokenBook)? {
        get { webTokensSlot.withLock { $0 } }
        set { webTokensSlot.withLock { $0 = newValue } }
    }

    /// What answers the flow routes (the lock, the evidence queue): the daemon's.
    public var flows: (any APIFlows)? {
        get { flowsSlot.withLock { $0 } }
        set { flowsSlot.withLock { $0 = newValue } }
    }
    private let capabilityChanges = Broadcaster<CapabilityStatus>(bufferLimit: 64)
    /// The flows' events (alerts announced, the lock's changes), as the daemon publishes them.
    private let flowChanges = Broadcaster<APIEvent>(bufferLimit: 64)
    /// Devices used through the API, for the streams that asked for `use` events.
    private let deviceUses = Broadcaster<DeviceUse>(bufferLimit: 64)
    /// The devices recording for an API client now: a second recording at once on the same
    /// device is refused `busy` (api/openapi.yaml), not queued behind the first; another
    /// device of the kind records meanwhile.
    private let recording = Mutex<Set<DeviceKey>>([])

    /// Runs `body` as the one API recording on `device`, or throws `busy`.
    public func recordingAlone<T: Sendable>(on device: DeviceKey, _ body: () async throws -> T) async throws -> T {
        guard recording.withLock({ $0.insert(device).inserted }) else {
            let subject = device.name == KitConfiguration.defaultDeviceName ? device.capability.rawValue : "\(device.capability) \(device.name)"
            throw FieldHALError(.busy, subject: subject, detail: "a recording asked for through the API is in progress",
                                advice: device.capability == .camera ? "wait for it to end; a still asked for meanwhile is one of its frames"
                                                                     : "wait for it to end, then ask again")
        }
        defer { _ = recording.withLock { $0.remove(device) } }
        return try await body()
    }

    /// The NFC chips other than the default one, by device name, each taken in turns like the
    /// default (`nfc`): a reader and an emulator of the same name are one chip.
    private let namedNFC = Mutex<[String: NFCTurns]>([:])
    /// Every client's fixes, from whichever provider is loaded: watchers outlive reloads.
    private let sharedLocation: SharedLocation
    /// The receivers other than the default one, by device name, each one watch shared by
    /// every client like the default's; made when a client first follows one.
    private let namedLocations = Mutex<[String: SharedLocation]>([:])
    /// Tags API clients read, and tags found and lost while clients follow tag events: what
    /// the MQTT bridge publishes with `[mqtt] tags` (never the kit's own reads).
    private let tagSightings: Broadcaster<TagSighting>

    /// The tags clients read or see come and go from now on.
    public func sightings() -> AsyncThrowingStream<TagSighting, any Error> { tagSightings.subscribe() }

    /// A tag a client read: counted, and told to the sightings' followers.
    func sighted(read tag: NFCTag, device: String) {
        metrics.tagRead(device: device)
        tagSightings.yield(TagSighting(event: .read, device: device, tag: tag))
    }

    /// Tags found and lost on the readers other than the default one, by device name.
    private let namedTags = Mutex<[String: TagPresence]>([:])
    /// The NFC chip, shared by turns; its devices are replaced on reload.
    public let nfc: NFCTurns
    /// Tags found and lost, looked for only while someone follows `tag` events.
    public let tags: TagPresence

    private init(_ state: State, kit: Kit) {
        self.state = Mutex(state)
        sharedLocation = SharedLocation(try? kit.location())
        nfc = NFCTurns(reader: try? kit.nfcReader(), emulator: try? kit.nfcEmulator())
        let sightings = Broadcaster<TagSighting>(bufferLimit: 64), defaultReader = LockedValue<@Sendable () -> String>({ KitConfiguration.defaultDeviceName })
        tagSightings = sightings
        // The default watch follows whichever reader is the default: named as it is now.
        tags = TagPresence(nfc) { change in sightings.yield(TagSighting(change, device: defaultReader.value())) }
        defaultReader.withLock { $0 = { [weak self] in self?.status(of: .nfcReader)?.name ?? KitConfiguration.defaultDeviceName } }
        followHealth(of: kit, nil)
    }

    // MARK: - Supervised devices

    /// Follows the health of `kit`'s supervised devices among `keys` (nil: all of them),
    /// instead of whatever was followed under those keys before.
    private func followHealth(of kit: Kit, _ keys: Set<DeviceKey>?) {
        let old = state.withLock { state -> [Subscription] in
            let dropped = state.following.keys.filter { keys?.contains($0) ?? true }
            for key in dropped { state.following[key] = nil; state.down[key] = nil }
            return dropped.compactMap { state.subscriptions.removeValue(forKey: $0) }
        }
        for subscription in old { subscription.cancel() }
        for status in kit.devices {
            guard let name = status.name else { continue }
            let key = DeviceKey(status.capability, name)
            guard keys?.contains(key) ?? true, let device = kit.device(of: key) as? any SupervisedDevice else { continue }
            // Numbered before it is followed: a device that is down says so at once.
            let number = state.withLock { state in
                state.followed += 1
                state.following[key] = state.followed
                return state.followed
            }
            let subscription = device.followHealth { [weak self] reason in self?.heard(reason, of: key, following: number) }
            let kept = state.withLock { state -> Bool in
                guard state.following[key] == number else { return false }
                state.subscriptions[key] = subscription
                return true
            }
            if !kept { subscription.cancel() }
        }
    }

    /// A followed device's backend went down (`reason`) or serves again (nil): a
    /// `capability` event with the device's status as the API now reports it.
    private func heard(_ reason: String?, of key: DeviceKey, following number: Int) {
        let changed = state.withLock { state -> CapabilityStatus? in
            guard state.following[key] == number, state.down[key] != reason else { return nil }
            state.down[key] = reason
            return state.held?.status(of: key).map { Self.reported($0, down: state.down) }
        }
        if let changed { announce(changed) }
    }

    /// `status` as the API reports it: unavailable, and why, while its backend is down.
    private static func reported(_ status: CapabilityStatus, down: [DeviceKey: String]) -> CapabilityStatus {
        guard status.isAvailable, let name = status.name, let reason = down[DeviceKey(status.capability, name)] else { return status }
        var shown = status
        shown.state = .unavailable
        shown.reason = reason
        return shown
    }

    private static func reported(_ capabilities: APICapabilities, down: [DeviceKey: String]) -> APICapabilities {
        guard !down.isEmpty else { return capabilities }
        return APICapabilities(capabilities: capabilities.capabilities.map { reported($0, down: down) }, loadedAt: capabilities.loadedAt)
    }

    /// Probes the kit and opens what the API holds.
    public static func start(identity: Identity, authorisation: APIAuthorisation, load: KitLoader) async -> APIHost {
        let (capabilities, held) = await probe(load)
        return APIHost(State(identity: identity, authorisation: authorisation, capabilities: capabilities, held: held), kit: held)
    }

    /// A new configuration: new grants, the kit probed again, the location provider opened
    /// again. Clients watching fixes stay subscribed and get the new provider's fixes;
    /// capabilities whose state changed are sent as events.
    public func reload(identity: Identity, authorisation: APIAuthorisation, load: KitLoader) async {
        await changes.run { await reloadNow(identity: identity, authorisation: authorisation, load: load) }
    }

    private func reloadNow(identity: Identity, authorisation: APIAuthorisation, load: KitLoader) async {
        let (capabilities, held) = await APIHost.probe(load)
        let status = capabilities.capabilities.first { $0.capability == .location }
        await sharedLocation.replace(with: try? held.location(), reason: status?.reason ?? "location is not available")
        await replaceNamedLocations(from: held)
        nfc.replace(reader: try? held.nfcReader(), emulator: try? held.nfcEmulator())
        replaceNamedNFC(from: held)
        let (before, oldKit) = state.withLock { state in
            defer {
                state.identity = identity
                state.authorisation = authorisation
                state.capabilities = capabilities
                state.held = held
            }
            return (Self.reported(state.capabilities, down: state.down).capabilities, state.held)
        }
        followHealth(of: held, nil)
        await oldKit?.close()
        let reported = self.capabilities.capabilities
        for status in reported where !before.contains(status) {
            announce(status)
        }
        reloadsDone.yield(state.withLock { $0.held?.devices.count ?? 0 })
    }

    /// Told when a reload has opened the new configuration's devices (the count of them):
    /// what looks at `devices` looks again then (a device a reload added).
    public func reloads() -> AsyncThrowingStream<Int, any Error> { reloadsDone.subscribe() }
    private let reloadsDone = Broadcaster<Int>(bufferLimit: 4)

    /// A device's new state, to event followers and to the metrics (a device that went away
    /// or came back, a plugin that died or serves again).
    private func announce(_ status: CapabilityStatus) {
        capabilityChanges.yield(status)
        metrics.deviceChanged(status)
    }

    /// A device that went away (hotplug): it is closed and reported unavailable with `reason`
    /// until `attach` opens it again; the other devices, of its kind or not, carry on.
    /// Returns its new status, or nil when it was not available anyway.
    @discardableResult
    public func detach(_ device: DeviceKey, reason: String) async -> CapabilityStatus? {
        await changes.run {
            let removed = state.withLock { state -> (CapabilityProvider?, CapabilityStatus)? in
                guard let held = state.held, held.status(of: device)?.isAvailable == true else { return nil }
                let (kit, provider) = held.removing(device, reason: reason)
                state.held = kit
                state.capabilities = APICapabilities(capabilities: kit.statuses, loadedAt: state.capabilities.loadedAt)
                return (provider, kit.status(of: device)!)
            }
            guard let (provider, status) = removed else { return nil }
            if let kit = state.withLock({ $0.held }) { followHealth(of: kit, [device]) }
            await letGo(of: [device.capability], reason: reason)
            await provider?.device.close()
            announce(status)
            return status
        }
    }

    /// Devices that came (back): `load` opens just these, and each that opened replaces what
    /// the kit had for it. Returns their statuses, whether they opened or not.
    public func attach(_ devices: Set<DeviceKey>, load: KitLoader) async -> [CapabilityStatus] {
        guard !devices.isEmpty else { return [] }
        return await changes.run {
            let fresh = await load(devices)
            let opened = devices.filter { fresh.status(of: $0)?.isAvailable == true }
            let swapped = state.withLock { state -> (replaced: [CapabilityProvider], before: Kit)? in
                guard let held = state.held else { return nil }
                let (kit, replaced) = held.replacing(opened, from: fresh)
                state.held = kit
                state.capabilities = APICapabilities(capabilities: kit.statuses, loadedAt: state.capabilities.loadedAt)
                return (replaced, held)
            }
            guard let (replaced, before) = swapped else {
                await fresh.close()  // the daemon is stopping: nothing took these devices
                return []
            }
            await fresh.closing(allBut: opened)
            if let kit = state.withLock({ $0.held }) { followHealth(of: kit, opened) }
            await letGo(of: Set(opened.map(\.capability)), reason: nil)
            for provider in replaced { await provider.device.close() }
            for device in opened.sorted() {
                if let status = fresh.status(of: device), status != before.status(of: device) { announce(status) }
            }
            return devices.sorted().compactMap { fresh.status(of: $0) }
        }
    }

    /// The shared location watch and NFC chip follow the held kit's devices for `changed`.
    private func letGo(of changed: Set<Capability>, reason: String?) async {
        guard let held = state.withLock({ $0.held }) else { return }
        if changed.contains(.location) {
            await sharedLocation.replace(with: try? held.location(), reason: reason ?? "location is not available")
            await replaceNamedLocations(from: held, reason: reason)
        }
        if !changed.isDisjoint(with: [.nfcReader, .nfcEmulator]) {
            nfc.replace(reader: try? held.nfcReader(), emulator: try? held.nfcEmulator())
            replaceNamedNFC(from: held)
        }
    }

    /// The named chips follow the held kit: each gets the devices of its name now, or none.
    private func replaceNamedNFC(from held: Kit?) {
        for (name, chip) in namedNFC.withLock({ $0 }) {
            chip.replace(reader: try? held?.nfcReader(named: name), emulator: try? held?.nfcEmulator(named: name))
        }
    }

    /// The named receivers' watches follow the held kit: each gets its receiver now, or none
    /// (its followers hear why, as the default's do).
    private func replaceNamedLocations(from held: Kit?, reason: String? = nil) async {
        for (name, shared) in namedLocations.withLock({ $0 }) {
            let provider = try? held?.location(named: name)
            let why = reason ?? held?.status(of: .location, named: name)?.reason ?? "location \(name) is not available"
            await shared.replace(with: provider, reason: why)
        }
    }

    /// How one device stands in the held kit now.
    public func status(of device: DeviceKey) -> CapabilityStatus? {
        state.withLock { $0.held?.status(of: device) }
    }

    /// How `capability` stands in the held kit now.
    public func status(of capability: Capability) -> CapabilityStatus? {
        state.withLock { state in
            state.capabilities.capabilities.first { $0.capability == capability }.map { Self.reported($0, down: state.down) }
        }
    }

    private static func probe(_ load: KitLoader) async -> (APICapabilities, Kit) {
        // The daemon holds every device it has (`held`): what it reports is what it holds.
        let held = await load(nil)
        return (APICapabilities(capabilities: held.statuses, loadedAt: Date()), held)
    }

    public var identity: Identity { state.withLock { $0.identity } }
    public var authorisation: APIAuthorisation { state.withLock { $0.authorisation } }
    /// The capabilities as the API reports them (`GET /v1/status`): a device whose plugin is
    /// down shows unavailable, with why.
    public var capabilities: APICapabilities { state.withLock { Self.reported($0.capabilities, down: $0.down) } }

    /// The shared location watch, or the reason there is none.
    public func location() throws -> SharedLocation {
        _ = try locationProvider()
        return sharedLocation
    }

    /// The location provider loaded now, or the reason there is none.
    public func locationProvider() throws -> any LocationProvider {
        if let provider = sharedLocation.provider { return provider }
        let (status, file) = state.withLock { ($0.capabilities.capabilities.first { $0.capability == .location },
                                               $0.identity.configurationFile) }
        if status?.state == .notConfigured {
            throw FieldHALError(.notConfigured, subject: "location", detail: status?.reason ?? "not configured",
                                advice: "add a [\(Capability.location.rawValue)] section with plugin = \"gpsd\" (or \"fake\") to \(file), then reload the daemon")
        }
        throw FieldHALError(.unavailable, subject: "location", detail: status?.reason ?? "unavailable",
                            advice: "see `fieldhal status`; the daemon tries again when reloaded (SIGHUP)")
    }

    /// The location provider `name` names (nil: the default one, whose fixes every client
    /// shares through one watch).
    public func locationProvider(named name: String?) throws -> any LocationProvider {
        let kit = try heldKit()
        let key = try kit.key(.location, named: name)
        if key.name == kit.status(of: .location).name { return try locationProvider() }
        return try kit.location(named: key.name)
    }

    /// The shared watch of the receiver `name` names (nil: the default one) and its name, or
    /// why there is none: `noSuchDevice` for a name the kit lacks, `unavailable` for a
    /// receiver that is not open.
    public func location(named name: String?) throws -> (name: String, watch: SharedLocation) {
        let kit = try heldKit()
        let key = try kit.key(.location, named: name)
        if key.name == kit.status(of: .location).name { return (key.name, try location()) }
        let provider = try kit.location(named: key.name)
        let watch = namedLocations.withLock { watches in
            if let watch = watches[key.name] { return watch }
            let watch = SharedLocation(provider)
            watches[key.name] = watch
            return watch
        }
        return (key.name, watch)
    }

    /// The receivers' figures for the metrics: fixes heard by the shared watches (only while
    /// someone follows them: the metrics never watch a receiver themselves), the last one's
    /// age and accuracy while a watch runs.
    public func receiverReadings() -> [KitMetrics.Reading] {
        let defaultName = (try? heldKit())?.status(of: .location).name ?? "default"
        var watches = namedLocations.withLock { $0.map { ($0.key, $0.value) } }
        watches.append((defaultName, sharedLocation))
        var readings: [KitMetrics.Reading] = []
        for (name, watch) in watches.sorted(by: { $0.0 < $1.0 }) {
            let heard = watch.hearing, labels = [("device", name)]
            readings.append(.init("fieldhal_gps_fixes_total", help: "fixes the daemon's shared watch of a receiver heard (only while someone follows it)",
                                  type: "counter", labels: labels, value: Double(heard.fixes)))
            guard watch.isWatching, let last = heard.last, let at = heard.at else { continue }
            readings.append(.init("fieldhal_gps_fix_age_seconds", help: "seconds since the followed receiver's last report",
                                  labels: labels, value: at.duration(to: .now).seconds))
            if let accuracy = last.horizontalAccuracy, last.mode != .noFix {
                readings.append(.init("fieldhal_gps_horizontal_accuracy_metres", help: "the followed receiver's last fix's horizontal accuracy",
                                      labels: labels, value: accuracy))
            }
        }
        return readings
    }

    /// The tag presence watch of the reader `name` names (nil: the default one) and its
    /// name, or why there is none.
    public func tagPresence(named name: String?) throws -> (name: String, watch: TagPresence) {
        let kit = try heldKit()
        let key = try kit.key(.nfcReader, named: name)
        if key.name == kit.status(of: .nfcReader).name { return (key.name, try tagPresence()) }
        let chip = try nfc(named: key.name)
        guard chip.hasReader else {
            throw FieldHALError(.unavailable, subject: "\(Capability.nfcReader) \(key.name)",
                                detail: kit.status(of: key)?.reason ?? "the reader is not open",
                                advice: "see `fieldhal devices`; it is opened again when it is plugged back in or the daemon is reloaded")
        }
        return (key.name, namedTags.withLock { watches in
            if let watch = watches[key.name] { return watch }
            let watch = TagPresence(chip) { [tagSightings, name = key.name] change in tagSightings.yield(TagSighting(change, device: name)) }
            watches[key.name] = watch
            return watch
        })
    }

    /// The NFC chip `name` names (nil: the default one), taken in turns.
    public func nfc(named name: String?) throws -> NFCTurns {
        guard let name else { return nfc }
        let kit = try heldKit()
        let isReader = kit.status(of: .nfcReader, named: name) != nil
        let isEmulator = kit.status(of: .nfcEmulator, named: name) != nil
        guard isReader || isEmulator else {
            _ = try kit.key(.nfcReader, named: name)  // throws the error that lists the kit's readers
            return nfc
        }
        if name == kit.status(of: .nfcReader).name || name == kit.status(of: .nfcEmulator).name { return nfc }
        return namedNFC.withLock { chips in
            if let chip = chips[name] { return chip }
            let chip = NFCTurns(reader: try? kit.nfcReader(named: name), emulator: try? kit.nfcEmulator(named: name))
            chips[name] = chip
            return chip
        }
    }

    /// The readers an alert's acknowledgement reads (role `ack`), each on its chip in turns,
    /// the default first; the default chip's when the kit names no reader at all (it then
    /// says so when asked).
    public func ackReaders(for label: String) -> [any NFCReader] {
        guard let kit = try? heldKit() else { return [] }
        let names = kit.names(of: .nfcReader, withRole: .ack)
        if kit.names(of: .nfcReader).isEmpty { return [nfc.reader(for: label)] }
        return names.compactMap { name in try? nfc(named: name).reader(for: label) }
    }

    /// The chip that offers the duress tag: the emulator with the `duress-tag` role (by
    /// default the default one), or nil when none has it or its chip has no emulator.
    public func duressTagChip() -> NFCTurns? {
        guard let kit = try? heldKit(), let name = kit.names(of: .nfcEmulator, withRole: .duressTag).first,
              let chip = try? nfc(named: name), chip.hasEmulator else { return nil }
        return chip
    }

    /// Every configured device of the kit the daemon holds, with its state: `GET /v1/devices`.
    public var devices: [CapabilityStatus] {
        state.withLock { state in (state.held?.devices ?? []).map { Self.reported($0, down: state.down) } }
    }

    /// `GET /v1/health`: every configured device, there or not, and nothing else.
    public var health: APIHealth {
        APIHealth(version: identity.version, devices: devices.compactMap { status in
            guard status.state != .notConfigured else { return nil }
            return APIHealth.Device(capability: status.capability, name: status.name ?? "default", available: status.state == .available)
        })
    }

    /// The key of the device `name` names (nil: the default one), or `noSuchDevice`.
    public func device(_ capability: Capability, named name: String?) throws -> DeviceKey {
        try heldKit().key(capability, named: name)
    }

    /// The haptics and the speaker the daemon holds. Their plugins play one pattern or clip
    /// at a time on the device's own thread, so callers simply take turns there.
    public func haptics(named name: String? = nil) throws -> any HapticsEngine { try heldKit().haptics(named: name) }
    public func speaker(named name: String? = nil) throws -> any Speaker { try heldKit().speaker(named: name) }

    /// The cameras and the microphones the daemon holds: its duress capture records on them,
    /// and a still asked for during a recording is taken from the recording's stream.
    public func camera(named name: String? = nil) throws -> any Camera { try heldKit().camera(named: name) }
    public func microphone(named name: String? = nil) throws -> any Microphone { try heldKit().microphone(named: name) }

    /// The cameras and microphones the daemon's duress capture records (role `evidence`),
    /// the default first.
    public func evidenceCameras() -> [any Camera] { (try? heldKit().evidenceCameras()) ?? [] }
    public func evidenceMicrophones() -> [any Microphone] { (try? heldKit().evidenceMicrophones()) ?? [] }

    /// The fingerprint sensor: fprintd claims it per scan or enrollment, so holding it open
    /// keeps nobody else out.
    public func biometrics(named name: String? = nil) throws -> any BiometricAuthenticator { try heldKit().biometrics(named: name) }
    /// Every open fingerprint sensor, for the lock, which takes a finger on any of them.
    public func fingerprintSensors() -> [any BiometricAuthenticator] { (try? heldKit().fingerprintSensors()) ?? [] }

    func heldKit() throws -> Kit {
        guard let kit = state.withLock({ $0.held }) else {
            throw FieldHALError(.unavailable, subject: "daemon", detail: "the daemon is stopping")
        }
        return kit
    }

    /// Hands a flow's event to every event stream that asked for its type.
    public func publish(_ event: APIEvent) {
        flowChanges.yield(event)
    }

    /// The flows' events from now on.
    public func flowEvents() -> AsyncThrowingStream<APIEvent, any Error> {
        flowChanges.subscribe()
    }

    /// Runs `work` on a device for an API client and says it as a `use` event: what the
    /// device answered (`answer` writes it in) or how it failed, and how long it took.
    public func use<T>(_ request: DeviceUse.Request, on device: String, asked: String? = nil, _ work: () async throws -> T,
                       answer: (inout DeviceUse, T) -> Void = { _, _ in }) async throws -> T {
        let started = ContinuousClock.now
        func said() -> DeviceUse {
            DeviceUse(request, device: device, asked: asked, milliseconds: Int((ContinuousClock.now - started).wholeMilliseconds))
        }
        do {
            let value = try await work()
            var use = said()
            answer(&use, value)
            deviceUses.yield(use)
            metrics.used(use)
            return value
        } catch {
            var use = said()
            use.failure = error as? FieldHALError ?? FieldHALError(.io, subject: "\(request.capability) \(device)", detail: "\(error)")
            deviceUses.yield(use)
            metrics.used(use)
            throw error
        }
    }

    /// The cameras' live previews, one capture per camera for all its viewers.
    let previews = CameraPreviews()

    /// The event streams' sessions, found again by `Last-Event-ID` on either door.
    let eventSessions = EventSessions()

    /// Web tokens revoked (their ids), so that a revoked page's open event streams end too.
    private let revokedTokens = Broadcaster<String>(bufferLimit: 16)

    func tokenRevoked(_ id: String) { revokedTokens.yield(id) }

    /// The ids of tokens revoked from now on.
    func revocations() -> AsyncThrowingStream<String, any Error> { revokedTokens.subscribe() }

    /// Devices used through the API from now on.
    public func useEvents() -> AsyncThrowingStream<DeviceUse, any Error> {
        deviceUses.subscribe()
    }

    /// Capability states as they change, from now on.
    public func capabilityEvents() -> AsyncThrowingStream<CapabilityStatus, any Error> {
        capabilityChanges.subscribe()
    }

    /// Closes what the API holds and ends every event stream.
    public func close() async {
        let (kit, subscriptions) = state.withLock { state in
            defer {
                state.held = nil
                state.following = [:]
                state.subscriptions = [:]
                state.down = [:]
            }
            return (state.held, Array(state.subscriptions.values))
        }
        for subscription in subscriptions { subscription.cancel() }
        await sharedLocation.close()
        await tags.close()
        for watch in namedLocations.withLock({ $0.values }) { await watch.close() }
        for watch in namedTags.withLock({ $0.values }) { await watch.close() }
        nfc.replace(reader: nil, emulator: nil)
        replaceNamedNFC(from: nil)
        await kit?.close()
        capabilityChanges.finish()
        flowChanges.finish()
        deviceUses.finish()
    }
}

/// A tag a client read, or one found or lost while clients follow tag events.
public struct TagSighting: Sendable, Equatable {
    public enum Event: String, Sendable {
        case read, found, lost
    }

    public var event: Event
    public var device: String
    public var tag: NFCTag

    public init(event: Event, device: String, tag: NFCTag) {
        self.event = event
        self.device = device
        self.tag = tag
    }

    init(_ change: TagPresence.Change, device: String) {
        switch change {
        case .found(let tag): self.init(event: .found, device: device, tag: tag)
        case .lost(let tag): self.init(event: .lost, device: device, tag: tag)
        }
    }
}
