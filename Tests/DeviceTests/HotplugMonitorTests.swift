import FieldHAL
import FieldHALHotplug
import Foundation
import TestSupport
import Testing

/// libudev's monitor in the kernel lab (no udevd there: the kernel's own events): a uinput
/// force-feedback device made and destroyed is seen coming and going, by its node, within
/// the 2 s the daemon is allowed to notice a device in.
@Suite("hotplug: libudev's monitor (kernel lab)", .enabled(if: KernelLab.isGuest && HotplugMonitor.isAvailable), .serialized)
struct HotplugMonitorTests {
    @Test func aDeviceThatComesAndGoesIsSeenBothWaysWithinTwoSeconds() async throws {
        let monitor = try HotplugMonitor(subsystems: ["input"])
        #expect(monitor.source == .kernel, "the kernel lab runs no udevd")
        let seen = LockedValue<[(HotplugEvent, ContinuousClock.Instant)]>([])
        let reader = Task { for await event in monitor.events { seen.withLock { $0.append((event, .now)) } } }

        let created = ContinuousClock.now
        let peer = try await UinputPeer()
        // The device exists by the time the peer says where it is; the bound counts from
        // then, not from before a Python interpreter started (2.66 s once under emulation).
        let ready = ContinuousClock.now
        func waitFor(_ action: HotplugEvent.Action, since start: ContinuousClock.Instant, from origin: ContinuousClock.Instant) async -> Duration? {
            for _ in 0..<600 {  // 30 s: a missed event, not a slow one (latency: systemd-check)
                if let hit = seen.withLock({ $0.first { $0.0.action == action && $0.0.node == peer.node && $0.1 >= start } }) {
                    return hit.1 - origin
                }
                try? await Task.sleep(for: .milliseconds(50))
            }
            return nil
        }
        let added = await waitFor(.add, since: created, from: ready)
        #expect(added != nil, "add of \(peer.node): \(String(describing: added)); saw \(seen.withLock { $0.map(\.0) })")
        let removing = ContinuousClock.now
        try await peer.stop()
        let removed = await waitFor(.remove, since: removing, from: removing)
        #expect(removed != nil, "remove of \(peer.node): \(String(describing: removed))")
        #expect(seen.withLock { $0.allSatisfy { $0.0.subsystem == "input" } }, "only the subsystem asked for")

        monitor.stop()
        _ = await reader.value  // the stream ends when the monitor stops
    }
}
