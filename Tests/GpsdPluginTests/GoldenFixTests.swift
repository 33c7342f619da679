#if GPS
import FieldHAL
import FieldHALAPI
import FieldHALPluginHost
import Foundation
import GpsdPlugin
import TestSupport
import Testing

/// Golden files, as gpsd keeps `test/daemon/*.log` beside `*.log.chk`: each receiver log in
/// `Logs/` is replayed by gpsfake into a real gpsd, followed by the gpsd backend (in process
/// and through the plugin protocol), and the fix events the API would send for one pass of
/// the log — each second's fix as the receiver's epoch left it, as `GET /v1/events?types=fix`
/// writes it — must be `Golden/NAME.fixes`, byte for byte. `FIELDHAL_GOLDEN=update swift
/// test --filter GoldenFixTests` writes them from what is read now, for review in the diff.
@Suite(.timeLimit(.minutes(3)))
struct GoldenFixTests {
    static let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    /// The logs whose receiver has a fix throughout. `no-fix.nmea` has none: gpsd's no-fix
    /// reports carry no time of the receiver's, so they are stamped when read. `late-fix.nmea`
    /// gains its fix mid-log, and whether gpsd reports one for the second before depends on
    /// when its sentences arrive (a loaded machine saw a fix at 12:00:06 with a 2297.7 m
    /// vertical error): not golden material either; `fixGainedLateIsReportedLive` covers it.
    static let logs = ["fix-2d", "moving-3d"]
    static let context = PluginContext(configDirectory: "/tmp", stateDirectory: "/tmp")

    enum Way: String, CaseIterable, CustomTestStringConvertible {
        case inProcess = "in process"
        case outOfProcess = "out of process"
        var testDescription: String { rawValue }
    }

    /// One whole pass of a looping log: the fixes with a position between the first two
    /// times the receiver's clock goes back to the log's start (a pass begun before the
    /// watch is skipped), each second's last fix — gpsd reports an epoch after each of its
    /// sentences, and the last report holds all of them.
    static func onePass(_ gps: any LocationProvider) async throws -> [Fix] {
        // Followed by a handler on the receiver's thread, so that a busy test process drops
        // none (a stream would keep only its newest fixes).
        let seen = LockedValue<(restarts: Int, previous: Date?, pass: [Fix])>((0, nil, []))
        let (done, finish) = AsyncStream<Void>.makeStream()
        let subscription = gps.follow({ fix in
            guard fix.hasPosition else { return }
            let whole = seen.withLock { state -> Bool in
                guard state.restarts < 2 else { return false }
                if let previous = state.previous, fix.time < previous { state.restarts += 1 }
                state.previous = fix.time
                if state.restarts == 1 { state.pass.append(fix) }
                return state.restarts == 2
            }
            if whole { finish.finish() }
        }, end: { _ in finish.finish() })
        defer { subscription.cancel() }
        try await withDeadline(.seconds(60), subject: "test", waitingFor: "one pass of the log") {
            for await _ in done {}
        }
        let pass = seen.withLock { $0 }
        try #require(pass.restarts == 2, "the receiver's stream ended before a whole pass")
        var lastOfEach: [Fix] = []
        for fix in pass.pass {
            if lastOfEach.last?.time == fix.time { lastOfEach[lastOfEach.count - 1] = fix } else { lastOfEach.append(fix) }
        }
        return lastOfEach
    }

    @Test(arguments: logs, Way.allCases) func aReceiverLogGivesTheFixEventsItsGoldenFileSays(log: String, way: Way) async throws {
        let gpsd = try await GPSFake.start(log: GPSFake.logPath(log + ".nmea"))
        defer { gpsd.kill() }
        var plugin = try #require(GpsdPlugin.descriptor)
        if way == .outOfProcess {
            plugin = try PluginManifest.load(try await ExternalBuiltin.install("gpsd", as: "gpsd-golden")).descriptor()
        }
        guard case .location(let gps) = try await plugin.open(.location, PluginParameters(["port": .integer(gpsd.port)]),
                                                              Self.context) else {
            throw GPSFakeError("the gpsd plugin did not open a location provider")
        }
        let fixes = try await Self.onePass(gps)
        await gps.close()
        let said = try fixes.map { try $0.apiJSON(device: "default") + "\n" }.joined()
        let golden = Self.here.appendingPathComponent("Golden/\(log).fixes").path
        if ProcessInfo.processInfo.environment["FIELDHAL_GOLDEN"] == "update" {
            if way == .inProcess { try said.write(toFile: golden, atomically: true, encoding: .utf8) }
            return
        }
        let expected = try String(contentsOfFile: golden, encoding: .utf8)
        #expect(said == expected, "\(log) \(way): read\n\(said)\nwhere \(golden) says\n\(expected)")
    }
}
#endif
