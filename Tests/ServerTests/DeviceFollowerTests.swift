import FakePlugin
import FieldHAL
import FieldHALHotplug
import FieldHALServer
import Foundation
import TestSupport
import Testing

/// The daemon's following of devices, decided on the fake kit with udev's events and the
/// devices' whereabouts scripted: what goes is detached (its capability unavailable, an
/// event), what comes back is opened again, what is not concerned is left alone. The same
/// follower against the kernel's real events and devices: `DeviceFollowerLabTests`.
@Suite("devices followed as they come and go")
struct DeviceFollowerTests {
    /// A fake kit with a camera and haptics, and where their devices are (scripted).
    struct Rig {
        let host: APIHost
        let whereabouts = LockedValue<[DeviceKey: DevicePresence]>([
            Rig.camera: DevicePresence(subsystems: ["video4linux"], node: "/dev/video0"),
            DeviceKey(.haptics, "default"): DevicePresence(subsystems: ["input"], node: "/dev/input/event3"),
        ])
        static let camera = DeviceKey(.camera, "default")
        static let front = DeviceKey(.camera, "front"), rear = DeviceKey(.camera, "rear")
        let opens = LockedValue<[Set<DeviceKey>]>([])
        /// Opening fails while this is set (udev not done with the node yet).
        let refuse = LockedValue(false)
        let follower: DeviceFollower
        let events: AsyncStream<HotplugEvent>
        let udev: AsyncStream<HotplugEvent>.Continuation
        let changes = LockedValue<[DeviceFollower.Change]>([])

        /// `twoCameras`: `[camera.front]` on /dev/video0 and `[camera.rear]` on /dev/video2
        /// instead of one `[camera]`.
        init(twoCameras: Bool = false) async throws {
            if twoCameras {
                whereabouts.withLock {
                    $0[Rig.camera] = nil
                    $0[Rig.front] = DevicePresence(subsystems: ["video4linux"], node: "/dev/video0")
                    $0[Rig.rear] = DevicePresence(subsystems: ["video4linux"], node: "/dev/video2")
                }
            }
            // The fake plugin, refusing the camera while `refuse` is set.
            let refuse = refuse
            var flaky = FakePlugin.descriptor
            let open = flaky.open
            flaky.open = { capability, parameters, context in
                if capability == .camera, refuse.value {
                    throw FieldHALError(.permissionDenied, subject: "camera", detail: "permission denied (udev has not set the node's group yet)")
                }
                return try await open(capability, parameters, context)
            }
            let registry = PluginRegistry([flaky])
            let cameras = twoCameras ? "[camera.front]\nplugin = \"fake\"\n[camera.rear]\nplugin = \"fake\"" : "[camera]\nplugin = \"fake\""
            let configuration = try KitConfiguration.parse("""
                \(cameras)
                [haptics]
                plugin = "fake"
                [gps]
                plugin = "fake"
                """, file: "follow.toml", directory: "/tmp", registry: registry)
            let context = PluginContext(configDirectory: "/tmp", stateDirectory: "/tmp")
            let opens = opens, whereabouts = whereabouts
            let load: APIHost.KitLoader = { only in
                if let only { opens.withLock { $0.append(only) } }
                return await Kit.load(configuration, registry: registry, context: context, devices: only)
            }
            host = await APIHost.start(identity: .init(version: "test", pid: getpid(), startedAt: Date(), configurationFile: "follow.toml"),
                                       authorisation: APIAuthorisation(configurationFile: "follow.toml"), load: load)
            opens.withLock { $0 = [] }
            follower = DeviceFollower(host: host, locate: { whereabouts.value }, load: load,
                                      settle: .milliseconds(20), retryEvery: .milliseconds(50), retryFor: .milliseconds(300))
            (events, udev) = AsyncStream.makeStream(of: HotplugEvent.self)
        }

        /// Starts following, once the follower has noted where the devices are.
        func follow() async throws -> Task<Void, Never> {
            let started = LockedValue(false)
            let task = Task { [self] in
                await follower.follow(events, started: { started.withLock { $0 = true } }) { change in changes.withLock { $0.append(change) } }
            }
            try await waitFor("the follower to start") { started.value }
            return task
        }

        /// The camera unplugged: its node gone, udev's remove, and the capability unavailable.
        func unplugCamera() async throws {
            whereabouts.withLock { $0[Rig.camera]?.node = nil }
            udev.yield(HotplugEvent(action: .remove, subsystem: "video4linux", node: "/dev/video0"))
            try await waitFor("the camera unavailable") { state(.camera) == .unavailable }
        }

        func stop(_ following: Task<Void, Never>) async {
            following.cancel()
            await following.value
            await host.close()
        }

        func state(_ capability: Capability) -> CapabilityStatus.State? { host.status(of: capability)?.state }

        /// Waits for an event, with a bound that only guards against a hang: 5 s was exceeded
        /// by a retry schedule on a machine running 180 tests at once.
        func waitFor(_ what: String, _ condition: @escaping @Sendable () -> Bool) async throws {
            let deadline = ContinuousClock.now + .seconds(30)
            while !condition() {
                guard ContinuousClock.now < deadline else { Issue.record("timed out waiting for \(what)"); return }
                try await Task.sleep(for: .milliseconds(10))
            }
        }
    }

    @Test func aDeviceThatGoesIsUnavailableAndOpenedAgainWhenItComesBack() async throws {
        let rig = try await Rig()
        let capabilityEvents = rig.host.capabilityEvents()
        let seen = LockedValue<[CapabilityStatus]>([])
        let listener = Task { for try await status in capabilityEvents { seen.withLock { $0.append(status) } } }
        let following = try await rig.follow()
        #expect(rig.state(.camera) == .available)

        // Unplugged: udev removes the node and the configured link resolves to nothing.
        try await rig.unplugCamera()
        #expect(rig.host.status(of: .camera)?.reason?.contains("/dev/video0 went away") == true)
        #expect(throws: FieldHALError.self) { try rig.host.camera() }
        #expect(rig.state(.haptics) == .available, "another capability carries on")

        // Back, on another node: opened again.
        rig.whereabouts.withLock { $0[Rig.camera]?.node = "/dev/video2" }
        rig.udev.yield(HotplugEvent(action: .add, subsystem: "video4linux", node: "/dev/video2"))
        try await rig.waitFor("the camera available again") { rig.state(.camera) == .available }
        _ = try rig.host.camera()
        #expect(rig.opens.value == [[Rig.camera]], "only the camera was opened again")
        try await rig.waitFor("two capability events") { seen.value.count >= 2 }
        #expect(seen.value.map(\.state) == [.unavailable, .available])
        try await rig.waitFor("both changes reported") { rig.changes.value.count >= 2 }
        #expect(rig.changes.value.map(\.node) == ["/dev/video0", "/dev/video2"])

        following.cancel()
        await following.value
        listener.cancel()
        await rig.host.close()
    }

    /// One camera of two unplugged: only it is unavailable, the other goes on recording, and
    /// when it comes back it alone is opened again, never the camera the daemon holds.
    @Test func oneCameraOfTwoGoesAndComesBackAlone() async throws {
        let rig = try await Rig(twoCameras: true)
        let following = try await rig.follow()
        #expect(rig.host.status(of: Rig.front)?.isAvailable == true && rig.host.status(of: Rig.rear)?.isAvailable == true)
        let rearCamera = try rig.host.camera(named: "rear")

        rig.whereabouts.withLock { $0[Rig.front]?.node = nil }
        rig.udev.yield(HotplugEvent(action: .remove, subsystem: "video4linux", node: "/dev/video0"))
        try await rig.waitFor("the front camera unavailable") { rig.host.status(of: Rig.front)?.state == .unavailable }
        #expect(rig.host.status(of: Rig.rear)?.isAvailable == true, "the rear camera carries on")
        #expect(throws: FieldHALError.self) { try rig.host.camera(named: "front") }
        let still = try await rig.host.camera(named: "rear").captureStill(PhotoRequest(width: 64, height: 48))
        #expect(still.width == 64)
        try await rig.waitFor("the change reported") { !rig.changes.value.isEmpty }
        #expect(rig.changes.value.first?.status.name == "front" && rig.changes.value.first?.status.subject == "camera front")

        rig.whereabouts.withLock { $0[Rig.front]?.node = "/dev/video4" }
        rig.udev.yield(HotplugEvent(action: .add, subsystem: "video4linux", node: "/dev/video4"))
        try await rig.waitFor("the front camera back") { rig.host.status(of: Rig.front)?.isAvailable == true }
        #expect(rig.opens.value == [[Rig.front]], "only the front camera was opened again: \(rig.opens.value)")
        #expect(try rig.host.camera(named: "rear") as AnyObject === rearCamera as AnyObject, "the rear camera is the one held before")
        await rig.stop(following)
    }

    @Test func aReplugWithinOneBatchReopensTheDeviceOnItsNode() async throws {
        let rig = try await Rig()
        let following = try await rig.follow()
        let before = try rig.host.camera()
        // The same node removed and added again: the old descriptor is dead, so it is reopened.
        rig.udev.yield(HotplugEvent(action: .remove, subsystem: "video4linux", node: "/dev/video0"))
        rig.udev.yield(HotplugEvent(action: .add, subsystem: "video4linux", node: "/dev/video0"))
        try await rig.waitFor("the camera reopened") { rig.opens.value == [[Rig.camera]] && rig.state(.camera) == .available }
        #expect(try rig.host.camera() as AnyObject !== before as AnyObject, "a new device, not the dead one")
        await rig.stop(following)
    }

    @Test func eventsThatConcernNoConfiguredDeviceChangeNothing() async throws {
        let rig = try await Rig()
        let following = try await rig.follow()
        // Another camera and a keyboard come and go; the configured ones stay where they are.
        rig.udev.yield(HotplugEvent(action: .add, subsystem: "video4linux", node: "/dev/video4"))
        rig.udev.yield(HotplugEvent(action: .remove, subsystem: "input", node: "/dev/input/event9"))
        rig.udev.yield(HotplugEvent(action: .add, subsystem: "sound", node: "/dev/snd/controlC3"))
        try await Task.sleep(for: .milliseconds(300))
        #expect(rig.opens.value.isEmpty)
        #expect(rig.changes.value.isEmpty)
        #expect(rig.state(.camera) == .available && rig.state(.haptics) == .available && rig.state(.location) == .available)
        await rig.stop(following)
    }

    @Test func aDeviceThatAppearsButWillNotOpenIsTriedAgainThenReported() async throws {
        let rig = try await Rig()
        let following = try await rig.follow()
        try await rig.unplugCamera()

        // It comes back, but opening fails for a while (permissions not yet set): tried again until it opens.
        rig.refuse.withLock { $0 = true }
        rig.whereabouts.withLock { $0[Rig.camera]?.node = "/dev/video0" }
        rig.udev.yield(HotplugEvent(action: .add, subsystem: "video4linux", node: "/dev/video0"))
        try await rig.waitFor("two attempts") { rig.opens.value.count >= 2 }
        rig.refuse.withLock { $0 = false }
        try await rig.waitFor("the camera available") { rig.state(.camera) == .available }

        // Comes and will not open at all: said once, with the plugin's reason, and left unavailable.
        try await rig.unplugCamera()
        rig.refuse.withLock { $0 = true }
        rig.whereabouts.withLock { $0[Rig.camera]?.node = "/dev/video0" }
        rig.udev.yield(HotplugEvent(action: .add, subsystem: "video4linux", node: "/dev/video0"))
        // The detach's own report may arrive after the test moved on: look for this one among all.
        let appeared: @Sendable () -> DeviceFollower.Change? = {
            rig.changes.value.first { $0.status.reason?.contains("appeared but did not open") == true }
        }
        try await rig.waitFor("the failure reported") { appeared() != nil }
        let change = try #require(appeared(), "\(rig.changes.value)")
        #expect(change.status.state == .unavailable)
        #expect(change.status.reason?.contains("permission denied") == true, "\(change.status.reason ?? "")")
        #expect(rig.state(.camera) == .unavailable)
        await rig.stop(following)
    }
}
