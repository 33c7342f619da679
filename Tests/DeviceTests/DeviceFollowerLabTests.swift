import FieldHAL
import FieldHALHotplug
import FieldHALPlugins
import FieldHALServer
import Foundation
import TestSupport
import Testing

/// Hotplug in the kernel lab (no udevd: the kernel's own events): the daemon's device
/// follower with the real plugins against devices that really go and come — vivid unbound
/// from its driver and bound again, snd-aloop's and snd-dummy's sound cards likewise, a uinput
/// force-feedback device destroyed and made again. Each change must reach the API's capability events within 2 s, and the device
/// must work again afterwards. The last test runs `fieldhal run` itself and reads its
/// journal lines.
@Suite("hotplug: configured devices followed as they go and come (kernel lab)",
       .enabled(if: KernelLab.isGuest && HotplugMonitor.isAvailable), .serialized, .timeLimit(.minutes(3)))
struct DeviceFollowerLabTests {
    /// An API host on the built-in plugins for `configuration`, a follower on the kernel's
    /// events, and the capability events it sends.
    final class Rig: Sendable {
        let host: APIHost
        let monitor: HotplugMonitor
        let following: Task<Void, Never>
        let events = LockedValue<[(CapabilityStatus, ContinuousClock.Instant)]>([])
        let listener: Task<Void, Never>

        init(_ configurationText: String) async throws {
            let registry = BuiltinPlugins.registry
            let configuration = try KitConfiguration.parse(configurationText, file: "hotplug.toml", directory: "/tmp", registry: registry)
            let context = KernelLab.context
            let load: APIHost.KitLoader = { only in await Kit.load(configuration, registry: registry, context: context, devices: only) }
            host = await APIHost.start(identity: .init(version: "test", pid: getpid(), startedAt: Date(), configurationFile: "hotplug.toml"),
                                       authorisation: APIAuthorisation(configurationFile: "hotplug.toml"), load: load)
            let changes = host.capabilityEvents()
            let events = events
            listener = Task {
                do { for try await status in changes { events.withLock { $0.append((status, .now)) } } } catch {}
            }
            monitor = try HotplugMonitor()
            let follower = DeviceFollower(host: host, locate: { await registry.presence(in: configuration, context: context) }, load: load)
            let started = LockedValue(false)
            let monitor = monitor
            following = Task { await follower.follow(monitor.events, started: { started.withLock { $0 = true } }) { _ in } }
            for _ in 0..<200 where !started.value { try await Task.sleep(for: .milliseconds(10)) }
        }

        /// How long after `since` the capability's event with `state` came; nil if not within
        /// 30 s. The follower has no rescan: nil is a missed event. How soon it comes is a
        /// figure of systemd-check's hotplug run (udevd's share and FieldHAL's), not a bound here.
        func waitFor(_ capability: Capability, _ state: CapabilityStatus.State, since: ContinuousClock.Instant) async -> Duration? {
            for _ in 0..<1500 {
                if let hit = events.withLock({ $0.first { $0.0.capability == capability && $0.0.state == state && $0.1 >= since } }) {
                    return hit.1 - since
                }
                try? await Task.sleep(for: .milliseconds(20))
            }
            return nil
        }

        /// Unbinds `device` from its platform `driver` and binds it again: how long after each
        /// the capability's event came (nil: not within 30 s).
        func unplugAndPlugBack(_ capability: Capability, driver: String, device: String) async throws -> (gone: Duration?, back: Duration?) {
            let unplugged = ContinuousClock.now
            try KernelLab.writeSysfs("/sys/bus/platform/drivers/\(driver)/unbind", device)
            let gone = await waitFor(capability, .unavailable, since: unplugged)
            let pluggedIn = ContinuousClock.now
            try KernelLab.writeSysfs("/sys/bus/platform/drivers/\(driver)/bind", device)
            let back = await waitFor(capability, .available, since: pluggedIn)
            #expect(gone != nil, "unavailable after \(String(describing: gone))")
            #expect(back != nil, "available again after \(String(describing: back))")
            return (gone, back)
        }

        func close() async {
            following.cancel()
            await following.value
            monitor.stop()
            await host.close()
            listener.cancel()
        }
    }

    @Test func aCameraUnboundAndBoundAgainIsUnavailableThenBackWithinTwoSeconds() async throws {
        let node = try KernelLab.vividCaptureNode(instance: 0)
        let rig = try await Rig("[camera]\nplugin = \"v4l2\"\ndevice = \"\(node)\"\n")
        #expect(rig.host.status(of: .camera)?.isAvailable == true)

        let (gone, back) = try await rig.unplugAndPlugBack(.camera, driver: "vivid", device: "vivid.0")
        #expect(rig.events.value.first?.0.reason?.contains("\(node) went away") == true, "\(rig.events.value.map(\.0))")
        // The camera the API holds now is the new one, and it works.
        let photo = try await rig.host.camera().captureStill(PhotoRequest(width: 320, height: 180, warmUpFrames: 0))
        #expect(photo.jpeg.count > 1000)
        print("hotplug: vivid unbound → camera unavailable in \(gone ?? .zero); bound → available in \(back ?? .zero)")
        await rig.close()
    }

    @Test func aForceFeedbackDeviceDestroyedAndMadeAgainIsFollowed() async throws {
        // The configuration names the node the first device got; the kernel gives the next
        // one the lowest free number, the same node, as a replugged motor would get.
        let first = try await UinputPeer()
        let node = first.node
        let rig = try await Rig("[haptics]\nplugin = \"evdev\"\ndevice = \"\(node)\"\n")
        #expect(rig.host.status(of: .haptics)?.isAvailable == true)

        let destroyed = ContinuousClock.now
        try await first.stop()
        let gone = await rig.waitFor(.haptics, .unavailable, since: destroyed)
        #expect(gone != nil, "unavailable after \(String(describing: gone))")
        await #expect(throws: FieldHALError.self) { try await rig.host.haptics().play(.success) }

        let made = ContinuousClock.now
        let second = try await UinputPeer()
        // The peer (Python, under emulation) takes a while to start; the device exists by the
        // time it says so, so the follower's time counts from then, or from its event if earlier.
        let startup = ContinuousClock.now - made
        try #require(second.node == node, "the new device got \(second.node), not \(node): another test made input devices meanwhile")
        let back = await rig.waitFor(.haptics, .available, since: made).map { max(.zero, $0 - startup) }
        #expect(back != nil, "available again \(String(describing: back)) after the peer was ready (it took \(startup) to start)")
        try await rig.host.haptics().play(.success)
        #expect(try await second.waitFor("upload").contains { $0.name == "upload" }, "the pattern reached the new device")
        print("hotplug: uinput device destroyed → haptics unavailable in \(gone ?? .zero); made again → available in \(back ?? .zero)")
        try await second.stop()
        await rig.close()
    }

    /// snd-aloop's and snd-dummy's cards, each named by its id.
    enum SoundCard: String, CaseIterable, Sendable {
        case loopback = "Loopback", dummy = "Dummy"
        var driver: String { self == .loopback ? "snd_aloop" : "snd_dummy" }
        /// A capture device of the card (snd-aloop's device 1 captures what device 0 plays).
        var pcm: String { "plughw:CARD=\(rawValue),DEV=\(self == .loopback ? 1 : 0)" }
    }

    @Test(arguments: SoundCard.allCases)
    func aSoundCardUnboundAndBoundAgainIsFollowedByItsCardId(_ card: SoundCard) async throws {
        // The card's control node is what the kernel's events name.
        let rig = try await Rig("[microphone]\nplugin = \"alsa\"\npcm = \"\(card.pcm)\"\n")
        #expect(rig.host.status(of: .microphone)?.isAvailable == true)
        let (gone, back) = try await rig.unplugAndPlugBack(.microphone, driver: card.driver, device: "\(card.driver).0")
        #expect(rig.events.value.first?.0.reason?.contains("/dev/snd/controlC") == true, "\(rig.events.value.map(\.0))")
        let path = KernelLab.scratch("after-replug.wav")
        let recording = try await rig.host.microphone().record(RecordingRequest(duration: .milliseconds(300), sampleRate: 48_000, channels: 2), to: path)
        #expect(recording.frames >= 12_000, "\(recording)")
        print("hotplug: \(card.driver) unbound → microphone unavailable in \(gone ?? .zero); bound → available in \(back ?? .zero)")
        await rig.close()
    }

    @Test func theDaemonSaysSoInItsJournalAndServesTheCameraAgain() async throws {
        let node = try KernelLab.vividCaptureNode(instance: 0)
        let config = KernelLab.scratch("hotplug-daemon.toml")
        let state = CLI.freshStateDirectory()
        try "[camera]\nplugin = \"v4l2\"\ndevice = \"\(node)\"\n".write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(["--config", config, "--state-dir", state])
        #expect(await daemon.waitForLine(containing: "following devices as they come and go (the kernel's events)", timeout: .seconds(60)) != nil,
                "\(daemon.output)")

        try KernelLab.writeSysfs("/sys/bus/platform/drivers/vivid/unbind", "vivid.0")
        let gone = await daemon.waitForLine(containing: "camera: unavailable: \(node) went away", timeout: .seconds(5))
        let status = try await CLI.run(["status", "--config", config, "--state-dir", state])
        try KernelLab.writeSysfs("/sys/bus/platform/drivers/vivid/bind", "vivid.0")
        let back = await daemon.waitForLine(containing: "camera: \(node) is back (v4l2 plugin); available", timeout: .seconds(5))
        #expect(gone != nil && back != nil, "\(daemon.output)")
        #expect(status.stdout.contains("went away"), "status while unplugged: \(status.stdout) \(status.stderr)")

        // Served by the daemon's camera, opened again.
        let still = KernelLab.scratch("after-replug.jpg")
        let snap = try await CLI.run(["camera", "snap", "--config", config, "--state-dir", state, "-o", still, "--width", "320", "--height", "180"])
        #expect(snap.status == 0, "\(snap.stderr)")
        let stopped = await daemon.stop()
        #expect(stopped.status == 0)
    }
}
