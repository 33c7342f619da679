#if GPS
import FieldHAL
import FieldHALPluginHost
import Foundation
import GpsdPlugin
import TestSupport
import Testing

/// The gpsd plugin against a real gpsd (started by gpsfake) replaying logs that
/// Logs/make-logs.py wrote; every expected value below is read from those logs. Every test
/// runs both ways: in process, and out of process as an external plugin (`fieldhal plugin
/// serve gpsd` behind a manifest, through the plugin protocol), which is what proves the
/// protocol carries everything the backend says.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct GpsdPluginTests {
    static let context = PluginContext(configDirectory: "/tmp", stateDirectory: "/tmp")

    enum Way: String, CaseIterable, CustomTestStringConvertible {
        case inProcess = "in process"
        case outOfProcess = "out of process"
        var testDescription: String { rawValue }
    }

    func open(port: Int, _ extra: [String: ConfigValue] = [:], way: Way) async throws -> any LocationProvider {
        var descriptor = try #require(GpsdPlugin.descriptor)
        if way == .outOfProcess {
            descriptor = try PluginManifest.load(try await ExternalBuiltin.install("gpsd", as: "gpsd-process")).descriptor()
        }
        var values: [String: ConfigValue] = ["port": .integer(port)]
        values.merge(extra) { $1 }
        guard case .location(let provider) = try await descriptor.open(.location, PluginParameters(values), Self.context) else {
            throw GPSFakeError("the gpsd plugin did not open a location provider")
        }
        return provider
    }

    func startGpsd(_ log: String, once: Bool = false, cycle: Double = 0.02, port: Int? = nil) async throws -> GPSFake {
        try await GPSFake.start(log: GPSFake.logPath(log), port: port, once: once, cycle: cycle)
    }

    /// Fixes from `watch()` until `done` says so, or the timeout passes (then a failure).
    func collect(_ gps: any LocationProvider, timeout: Duration = .seconds(20),
                 until done: @escaping @Sendable ([Fix]) -> Bool) async throws -> [Fix] {
        try await withDeadline(timeout, subject: "test", waitingFor: "the expected fixes") {
            var fixes: [Fix] = []
            for try await fix in gps.watch() {
                fixes.append(fix)
                if done(fixes) { return fixes }
            }
            return fixes
        }
    }

    static let logDate = ISO8601DateFormatter().date(from: "2026-03-15T12:00:00Z")!

    // MARK: - Values, against the logs

    @Test(arguments: Way.allCases) func moving3DFixReportsWhatTheReceiverSent(way: Way) async throws {
        let gpsd = try await startGpsd("moving-3d.nmea")
        defer { gpsd.kill() }
        let gps = try await open(port: gpsd.port, way: way)
        defer { Task { await gps.close() } }

        // The log loops; gather one fix for each of its ten seconds.
        let fixes = try await collect(gps) { fixes in
            Set(fixes.map(\.time)).isSuperset(of: (0..<10).map { Self.logDate.addingTimeInterval(Double($0)) })
        }
        for second in 0..<10 {
            let fix = try #require(fixes.last { $0.time == Self.logDate.addingTimeInterval(Double(second)) })
            let s = Double(second)
            #expect(fix.mode == .threeD)
            #expect(abs(try #require(fix.latitude) - (52.52 + s * 0.0001)) < 1e-7)
            #expect(abs(try #require(fix.longitude) - (13.405 + s * 0.0001)) < 1e-7)
            #expect(abs(try #require(fix.altitude) - (34.5 + s * 0.5)) < 1e-6, "GGA altitude above mean sea level")
            #expect(abs(try #require(fix.speed) - 9.72 * 0.514444) < 0.01, "RMC speed, knots to m/s")
            #expect(abs(try #require(fix.course) - 45) < 1e-6)
            // gpsd 3.22's error model for an autonomous fix: EPH = HDOP × 19 m (GGA HDOP 0.9).
            #expect(abs(try #require(fix.horizontalAccuracy) - 0.9 * 19) < 0.5)
            #expect(try #require(fix.verticalAccuracy) > 0)
        }
    }

    /// Two receivers on one gpsd (gpsfake, a pty each), configured as two devices of the kit
    /// bound by gpsd's paths: each keeps to its own receiver (Berlin's log and Sydney's).
    @Test(arguments: Way.allCases) func twoReceiversOnOneGpsdEachKeepToItsOwn(way: Way) async throws {
        let gpsd = try await GPSFake.start(logs: [GPSFake.logPath("moving-3d.nmea"), GPSFake.logPath("fix-2d.nmea")])
        defer { gpsd.kill() }
        let paths = try await gpsd.devicePaths()
        try #require(paths.count == 2, "\(paths)")
        var hemispheres: [Bool] = []
        // As a technician configures it: two named sections, loaded by the kit; out of
        // process (protocol 1.6) one plugin process serves both receivers.
        var plugin = try #require(GpsdPlugin.descriptor)
        var manifest: String?
        if way == .outOfProcess {
            let installed = try await ExternalBuiltin.install("gpsd", as: "gpsd-process")
            plugin = try PluginManifest.load(installed).descriptor()
            manifest = installed
        }
        let registry = PluginRegistry([plugin])
        let configuration = try KitConfiguration.parse("""
            [gps.receiver1]
            plugin = "\(plugin.name)"
            port = \(gpsd.port)
            device = "\(paths[0])"
            [gps.receiver2]
            plugin = "\(plugin.name)"
            port = \(gpsd.port)
            device = "\(paths[1])"
            """, file: "two-receivers.toml", directory: "/tmp", registry: registry)
        let kit = await Kit.load(configuration, registry: registry, context: Self.context)
        // Each says where it is: gpsd's endpoint and its own path there.
        let links = kit.devices.compactMap { $0.identity?.link }
        #expect(links == paths.map { "gpsd://localhost:\(gpsd.port)\($0)" }, "\(links)")
        if let manifest { #expect(ExternalBuiltin.processes(of: manifest).count == 1, "one plugin process serves both receivers") }
        for name in ["receiver1", "receiver2"] {
            let fixes = try await collect(try kit.location(named: name)) { $0.filter(\.hasPosition).count >= 5 }
            let north = fixes.filter(\.hasPosition).map { $0.latitude! > 0 }
            #expect(Set(north).count == 1, "\(name) mixed the receivers: \(fixes.compactMap(\.latitude))")
            hemispheres.append(north[0])
        }
        // One closed, the other carries on in the same process.
        await (try kit.location(named: "receiver1")).close()
        let after = try await collect(try kit.location(named: "receiver2")) { $0.filter(\.hasPosition).count >= 3 }
        #expect(Set(after.filter(\.hasPosition).map { $0.latitude! > 0 }) == [hemispheres[1]], "\(after.compactMap(\.latitude))")
        await kit.close()
        #expect(Set(hemispheres) == [true, false], "one receiver each: \(hemispheres)")
    }

    @Test(arguments: Way.allCases) func twoDimensionalFixHasNoAltitude(way: Way) async throws {
        let gpsd = try await startGpsd("fix-2d.nmea")
        defer { gpsd.kill() }
        let gps = try await open(port: gpsd.port, way: way)
        defer { Task { await gps.close() } }

        let fixes = try await collect(gps) { $0.contains { $0.time == Self.logDate.addingTimeInterval(5) } }
        let fix = try #require(fixes.last)
        #expect(fix.mode == .twoD)
        #expect(abs(try #require(fix.latitude) - -33.8568) < 1e-7)
        #expect(abs(try #require(fix.longitude) - 151.2153) < 1e-7)
        #expect(fix.altitude == nil && fix.verticalAccuracy == nil)
        #expect(abs(try #require(fix.horizontalAccuracy) - 2.0 * 19) < 0.5)

        // A 2D fix satisfies a request for 2D, not one for 3D.
        let reading = try await gps.currentFix(FixRequest(timeout: .seconds(5), maxAge: nil))
        #expect(reading.source == .live && reading.fix.mode == .twoD && reading.age == 0)
        await #expect { try await gps.currentFix(FixRequest(timeout: .seconds(1), maxAge: nil, minimumMode: .threeD)) } throws: {
            ($0 as? FieldHALError)?.kind == .noFix
        }
    }

    @Test(arguments: Way.allCases) func receiverWithoutFixReportsNoFixAndCurrentFixFailsInTime(way: Way) async throws {
        let gpsd = try await startGpsd("no-fix.nmea")
        defer { gpsd.kill() }
        let gps = try await open(port: gpsd.port, way: way)
        defer { Task { await gps.close() } }

        let fixes = try await collect(gps) { $0.count >= 5 }
        #expect(fixes.allSatisfy { $0.mode == .noFix && $0.latitude == nil && $0.sourceProblem == nil })

        let start = ContinuousClock.now
        await #expect { try await gps.currentFix(FixRequest(timeout: .seconds(1.5))) } throws: { error in
            guard let error = error as? FieldHALError else { return false }
            // Out of process the host names the plugin after the device the plugin named.
            return error.kind == .noFix && error.subject == "gps gpsd localhost:\(gpsd.port)" + (way == .outOfProcess ? " (plugin gpsd-process)" : "")
        }
        #expect(ContinuousClock.now - start < .seconds(10), "ended at its 1.5 s, not hung")
        #expect(await gps.lastKnownFix() == nil)
    }

    @Test(arguments: Way.allCases) func fixGainedLateIsReportedLive(way: Way) async throws {
        let gpsd = try await startGpsd("late-fix.nmea", cycle: 0.05)
        defer { gpsd.kill() }
        let gps = try await open(port: gpsd.port, way: way)
        defer { Task { await gps.close() } }

        // The receiver reports no fix, then gains one: watch sees the change.
        let fixes = try await collect(gps) { fixes in
            guard let firstFix = fixes.firstIndex(where: { $0.hasPosition }) else { return false }
            return fixes[..<firstFix].contains { $0.mode == .noFix }
        }
        let gained = try #require(fixes.first(where: { $0.hasPosition }))
        #expect(gained.mode == .threeD)
        #expect(abs(try #require(gained.latitude) - 48.1173) < 1e-7)
        #expect(abs(try #require(gained.altitude) - 545.4) < 1e-6)
        #expect(gained.time >= Self.logDate.addingTimeInterval(6))

        let reading = try await gps.currentFix(FixRequest(timeout: .seconds(10), maxAge: nil))
        #expect(reading.source == .live)
        #expect(abs(try #require(reading.fix.longitude) - 11.5167) < 1e-7)
    }

    @Test(arguments: Way.allCases) func lastFixIsCachedWhenTheReceiverGoes(way: Way) async throws {
        // Played once: gpsd then reports the receiver gone.
        let gpsd = try await startGpsd("moving-3d.nmea", once: true, cycle: 0.05)
        defer { gpsd.kill() }
        let gps = try await open(port: gpsd.port, way: way)
        defer { Task { await gps.close() } }

        let fixes = try await collect(gps) { $0.last?.sourceProblem != nil }
        #expect(fixes.contains(where: { $0.hasPosition }))
        #expect(try #require(fixes.last?.sourceProblem).contains("is gone"))

        let cached = try await gps.currentFix(FixRequest(timeout: .milliseconds(300), maxAge: .seconds(60)))
        #expect(cached.source == .cached)
        #expect(abs(try #require(cached.fix.latitude) - (52.52 + 9 * 0.0001)) < 1e-7, "the log's last position")
        #expect(cached.age >= 0 && cached.age < 30)
        await #expect { try await gps.currentFix(FixRequest(timeout: .milliseconds(300), maxAge: .milliseconds(1))) } throws: {
            ($0 as? FieldHALError)?.kind == .noFix
        }
    }

    // MARK: - Faults

    @Test(arguments: Way.allCases) func gpsdKilledMidWatchIsReportedAndRecovered(way: Way) async throws {
        var gpsd = try await startGpsd("moving-3d.nmea", cycle: 0.02)
        defer { gpsd.kill() }
        let port = gpsd.port
        // A silence of 30 s before a loss is said: the closed connection must say it first.
        let gps = try await open(port: port, ["reconnect_max_ms": .integer(500), "silence_timeout_ms": .integer(30_000)], way: way)
        defer { Task { await gps.close() } }

        let events = LockedValue<[(ContinuousClock.Instant, Fix)]>([])
        let watcher = Task {
            for try await fix in gps.watch() { events.withLock { $0.append((.now, fix)) } }
        }
        defer { watcher.cancel() }
        try await waitFor(timeout: .seconds(15)) { events.value.contains { $0.1.hasPosition } }

        let killedAt = ContinuousClock.now
        gpsd.kill()
        try await waitFor(timeout: .seconds(20)) { events.value.contains { $0.0 > killedAt && $0.1.sourceProblem != nil } }
        let lost = try #require(events.value.first { $0.0 > killedAt && $0.1.sourceProblem != nil })
        #expect(lost.0 - killedAt < .seconds(10), "the loss is reported when the connection closes, not after the 30 s silence")
        #expect(lost.1.mode == .noFix)

        gpsd = try await startGpsd("moving-3d.nmea", cycle: 0.02, port: port)
        let restartedAt = ContinuousClock.now
        try await waitFor(timeout: .seconds(15)) { events.value.contains { $0.0 > restartedAt && $0.1.hasPosition } }
        #expect(!watcher.isCancelled, "the same watch carried on across the restart")
    }

    /// `fieldhal plugin test`'s checks against the gpsd backend out of process, on gpsd.
    @Test func theConformanceChecksPassOnARealGpsd() async throws {
        let gpsd = try await startGpsd("moving-3d.nmea")
        defer { gpsd.kill() }
        let manifest = try PluginManifest.load(try await ExternalBuiltin.install("gpsd", as: "gpsd-conformance"))
        let report = await PluginConformance.run(manifest, parameters: [.location: ["port": .integer(gpsd.port)]])
        #expect(report.passed, "\(report.checks.filter { $0.outcome != .passed })")
        #expect(report.checks.contains { $0.outcome == .passed && $0.name.hasPrefix("the stream's first gps.fix") }, "\(report.checks)")
    }

    @Test(arguments: Way.allCases) func gpsdNotRunningFailsOpenWithAdvice(way: Way) async throws {
        let port = try GPSFake.freePort()
        await #expect { try await open(port: port, way: way) } throws: { error in
            guard let error = error as? FieldHALError else { return false }
            return error.kind == .unavailable && error.detail.contains("cannot connect to gpsd")
                && error.advice?.contains("start gpsd") == true
        }
    }

    @Test(arguments: ["garbage-lines", "endless-line"], Way.allCases)
    func garbageFromThePeerIsALostSourceNotACrash(behaviour: String, way: Way) async throws {
        let port = try GPSFake.freePort()
        let peer = try ScriptPeer(script: GPSFake.logPath("hostile-gpsd.py"), arguments: [String(port), behaviour])
        defer { peer.stop() }
        try await waitFor(timeout: .seconds(10)) { GPSFake.canConnect(port: port) }
        let gps = try await open(port: port, ["silence_timeout_ms": .integer(1000)], way: way)
        defer { Task { await gps.close() } }

        // Within collect's 10 s: a crash or a hang would not get there.
        let fixes = try await collect(gps, timeout: .seconds(10)) { $0.contains { $0.sourceProblem != nil } }
        #expect(!fixes.contains(where: { $0.hasPosition }))
    }

    // MARK: - Cancellation and closing

    @Test(arguments: Way.allCases) func cancelledWatchEndsAndCloseReturnsPromptly(way: Way) async throws {
        let gpsd = try await startGpsd("no-fix.nmea", cycle: 0.2)
        defer { gpsd.kill() }
        let gps = try await open(port: gpsd.port, way: way)

        let watcher = Task {
            var count = 0
            for try await _ in gps.watch() { count += 1 }
            return count
        }
        try await Task.sleep(for: .milliseconds(300))
        let cancelledAt = ContinuousClock.now
        watcher.cancel()
        _ = try await watcher.value
        // A watch runs for ever, and gpsd keeps the connection open: these only tell an end
        // from a hang.
        #expect(ContinuousClock.now - cancelledAt < .seconds(10))

        let closing = ContinuousClock.now
        await gps.close()
        #expect(ContinuousClock.now - closing < .seconds(10))
        // A watch after close ends at once instead of waiting forever.
        var afterClose = 0
        for try await _ in gps.watch() { afterClose += 1 }
        #expect(afterClose == 0)
    }

    @Test(arguments: Way.allCases) func badSettingsAreRejected(way: Way) async throws {
        await #expect { try await open(port: 70000, way: way) } throws: {
            ($0 as? FieldHALError)?.kind == .invalidArgument && "\($0)".contains("port")
        }
    }
}

/// Polls `condition` every 20 ms until it holds, or fails after `timeout`.
func waitFor(timeout: Duration, _ condition: @escaping @Sendable () -> Bool) async throws {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        guard ContinuousClock.now < deadline else { throw GPSFakeError("condition not met within \(timeout)") }
        try await Task.sleep(for: .milliseconds(20))
    }
}
#endif
