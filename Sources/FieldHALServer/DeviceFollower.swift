import FieldHAL
import FieldHALHotplug

/// Follows the configured devices as udev reports them coming and going, as gpsd and
/// ModemManager do: a device that goes away makes its capability unavailable with the
/// reason (its device closed, clients told by a `capability` event); one that comes (back)
/// is opened and its capability available again, within the 2 s a technician waits.
///
/// Devices are matched by what the configuration names (a by-id link, an ALSA card id, the
/// first device of its kind), as each plugin's `locate` resolves it to a node now, never by
/// a `/dev/videoN` number: udev's events name nodes, and a replugged camera may get another.
public final class DeviceFollower: Sendable {
    /// A device that went or came, as the daemon logs it.
    public struct Change: Sendable, Equatable {
        public var status: CapabilityStatus
        /// The node that went away, or the one the device came back on.
        public var node: String?
    }

    /// Where each followed device is now (the current configuration's).
    public typealias Locate = @Sendable () async -> [DeviceKey: DevicePresence]

    private let host: APIHost
    private let locate: Locate
    private let load: APIHost.KitLoader
    private let settle: Duration
    private let retryEvery: Duration
    private let retryFor: Duration

    /// - Parameters:
    ///   - settle: events within this of the first are handled together (a USB device's
    ///     nodes, a replug's remove and add).
    ///   - retryEvery, retryFor: a device that appeared but does not open yet (udev still
    ///     setting its permissions, a driver still starting) is tried again this often, this long.
    public init(host: APIHost, locate: @escaping Locate, load: @escaping APIHost.KitLoader,
                settle: Duration = .milliseconds(150), retryEvery: Duration = .milliseconds(250), retryFor: Duration = .seconds(3)) {
        self.host = host
        self.locate = locate
        self.load = load
        self.settle = settle
        self.retryEvery = retryEvery
        self.retryFor = retryFor
    }

    /// Handles `events` until they end or the caller is cancelled, reporting each change.
    /// `started` is called once where each followed device is has been noted: an event from
    /// then on is compared with it.
    public func follow(_ events: AsyncStream<HotplugEvent>, started: @Sendable () -> Void = {},
                       report: @escaping @Sendable (Change) -> Void) async {
        let pending = LockedValue<[HotplugEvent]>([])
        let (arrivals, arrived) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        var known = await locate()
        started()
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await event in events {
                    pending.withLock { $0.append(event) }
                    arrived.yield()
                }
                arrived.finish()
            }
            for await _ in arrivals {
                try? await Task.sleep(for: settle)
                let batch = pending.withLock { batch in
                    defer { batch.removeAll() }
                    return batch
                }
                if !batch.isEmpty { known = await handle(batch, known: known, report: report) }
            }
            group.cancelAll()
        }
    }

    /// One batch: what went is detached, what came (or came back) attached. Returns where
    /// the followed devices are now.
    func handle(_ batch: [HotplugEvent], known: [DeviceKey: DevicePresence],
                report: @Sendable (Change) -> Void) async -> [DeviceKey: DevicePresence] {
        let subsystems = Set(batch.map(\.subsystem))
        let removed = Set(batch.filter { $0.action == .remove }.compactMap(\.node))
        let now = await locate()
        var reopen: Set<DeviceKey> = []
        // Each device on its own: one camera of two unplugged leaves the other open.
        for (device, presence) in now.sorted(by: { $0.key < $1.key }) where !presence.subsystems.isDisjoint(with: subsystems) {
            guard let status = host.status(of: device), status.state != .notConfigured else { continue }
            let before = known[device]?.node
            // Gone: the configured device resolves to nothing now, or the node it was open on
            // was removed (a replug within the batch comes back on a new or the same node).
            let went = presence.node == nil || before.map(removed.contains) == true
            if status.isAvailable, went {
                let what = before ?? status.device ?? "its device"
                if let detached = await host.detach(device, reason: "\(what) went away; available again when it is plugged back in") {
                    report(Change(status: detached, node: before))
                }
            }
            if presence.node != nil, went || !status.isAvailable { reopen.insert(device) }
        }
        if !reopen.isEmpty { await attach(reopen, at: now, report: report) }
        return now
    }

    /// Opens `devices` again, retrying those that do not open yet for `retryFor`.
    private func attach(_ devices: Set<DeviceKey>, at presence: [DeviceKey: DevicePresence],
                        report: @Sendable (Change) -> Void) async {
        var left = devices
        let deadline = ContinuousClock.now + retryFor
        var lastFailure: [DeviceKey: CapabilityStatus] = [:]
        while !left.isEmpty, !Task.isCancelled {
            for status in await host.attach(left, load: load) {
                let device = DeviceKey(status.capability, status.name ?? "")
                if status.isAvailable {
                    left.remove(device)
                    report(Change(status: status, node: presence[device]?.node))
                } else {
                    lastFailure[device] = status
                }
            }
            guard !left.isEmpty, ContinuousClock.now + retryEvery < deadline else { break }
            try? await Task.sleep(for: retryEvery)
        }
        // Still not open: said once, with the plugin's reason; the next event tries again.
        for device in left.sorted() {
            if var status = lastFailure[device] {
                status.reason = "\(presence[device]?.node ?? "the device") appeared but did not open: \(status.reason ?? "unknown")"
                report(Change(status: status, node: presence[device]?.node))
            }
        }
    }
}
