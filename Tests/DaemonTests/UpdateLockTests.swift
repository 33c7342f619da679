import FieldHAL
import FieldHALLogind
import Logging
@testable import FieldHALDaemon
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The update lock (issue 46): held for `background_run_s` after each sign-in, on the
/// daemon's clock, whatever the verdict; an updater's exclusive `flock` waits meanwhile.
@Suite("Update lock", .serialized, .timeLimit(.minutes(2)))
struct UpdateLockTests {
    /// Whether an updater could take the lock now (`flock --exclusive --nonblock`).
    static func free(_ path: String) -> Bool {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        return flock(descriptor, LOCK_EX | LOCK_NB) == 0
    }

    /// Waits (up to 10 s) for the daemon's loop to come to `wanted`.
    static func comes(_ wanted: Bool, _ path: String) async -> Bool {
        await eventually { free(path) == wanted }
    }

    @Test func aSignInHoldsUpdatesForTheBackgroundWindowAndOverlappingWindowsJoin() async throws {
        let clock = ManualKitClock()
        let kit = try await DaemonServiceTests.Running.start(clock: clock,
                                                             configuration: "[gps]\nplugin = \"fake\"\n[transrify]\nbackground_run_s = 600\n")
        defer { Task { try? await kit.stop() } }
        let path = kit.state + "/update.lock"
        #expect(FileManager.default.fileExists(atPath: path), "the daemon makes it at start")
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == 0o600, "no other user may take it: \(String(mode ?? 0, radix: 8))")
        #expect(Self.free(path), "nothing held before a sign-in")

        let start = clock.now
        kit.daemon.afterAuthentication(.signIn)
        #expect(await Self.comes(false, path), "held after a sign-in")
        #expect(await eventually { clock.deadlines.contains(start.addingTimeInterval(600)) }, "the first window waits on the daemon's clock")
        clock.advance(by: .seconds(300))
        kit.daemon.afterAuthentication(.signIn)
        #expect(await eventually { clock.deadlines.contains(start.addingTimeInterval(900)) }, "the second window waits too")
        clock.advance(by: .seconds(301))
        #expect(await eventually { !clock.deadlines.contains(start.addingTimeInterval(600)) }, "the first window has ended")
        #expect(!Self.free(path), "the second window still holds it after the first has ended")
        clock.advance(by: .seconds(300))
        #expect(await Self.comes(true, path), "let go once the last window ends")
    }

    /// logind's shutdown inhibitor is taken and let go with the lock: dbusmock's logind on a
    /// private system bus lists it (what `systemd-inhibit --list` shows) while a window is
    /// open, and drops it when the window ends and the descriptor is closed.
    @Test func logindsShutdownInhibitorIsHeldWithTheLock() async throws {
        let lab = try await FprintdLab.start()
        defer { lab.stop() }
        try await offPool { try lab.startLogind() }
        @Sendable func inhibitors() -> String {
            (try? lab.gdbus(["call", "--system", "-d", "org.freedesktop.login1", "-o", "/org/freedesktop/login1",
                             "-m", "org.freedesktop.login1.Manager.ListInhibitors"])) ?? "gdbus failed"
        }
        let place = NSTemporaryDirectory() + "fieldhal-inhibit-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: place, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: place) }
        let inhibitor = ShutdownInhibitor(logger: Logger(label: "test"), busAddress: lab.busAddress)
        let lock = try UpdateLock(path: place + "/update.lock", inhibitor: inhibitor)
        let clock = ManualKitClock()
        let window = Task { await lock.hold(for: .seconds(600), on: clock) }
        #expect(await eventually { inhibitors().contains("'shutdown', 'FieldHAL'") && inhibitors().contains("'block'") }, "\(inhibitors())")
        #expect(inhibitor.isHeld && !Self.free(place + "/update.lock"))
        #expect(await eventually { !clock.deadlines.isEmpty })
        clock.advance(by: .seconds(600))
        await window.value
        #expect(await eventually { !inhibitors().contains("FieldHAL") }, "let go with the lock: \(inhibitors())")
        #expect(!inhibitor.isHeld && Self.free(place + "/update.lock"))
    }

    @Test func aLinkInItsPlaceIsRefusedNotFollowed() throws {
        let place = NSTemporaryDirectory() + "fieldhal-update-lock-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: place, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: place) }
        try "theirs".write(toFile: place + "/target", atomically: true, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: place + "/update.lock", withDestinationPath: place + "/target")
        #expect(throws: FieldHALError.self) { _ = try UpdateLock(path: place + "/update.lock") }
        #expect(try String(contentsOfFile: place + "/target", encoding: .utf8) == "theirs")
    }
}
