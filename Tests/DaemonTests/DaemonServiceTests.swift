import FieldHAL
import FieldHALAPI
import FieldHALClient
import FieldHALCommandLine
@testable import FieldHALDaemon
import FieldHALMedia
import FieldHALSystem
import Foundation
import Logging
import ServiceLifecycle
import TestSupport
import Testing
import UnixSignals

/// The daemon as a library (issue 42): its services run in this process, on the fake kit,
/// with no `fieldhal run` started; the API answers from them, and a graceful shutdown stops
/// them in order and takes the socket away.
@Suite("The daemon in process")
struct DaemonServiceTests {
    /// A daemon on the fake kit, its services running in this process, its API answering.
    struct Running {
        let daemon: Daemon
        let group: ServiceGroup
        let running: Task<Void, any Error>
        let state: String
        var client: FieldHALClient { FieldHALClient(socketPath: state + "/api.sock") }

        /// `configuration`: a kit's TOML, or nil for the built-in fake kit.
        /// `log`: where the daemon's lines from warnings up go (nowhere by default).
        static func start(clock: any KitClock = SystemKitClock(), configuration: String? = nil, log: CapturedLines? = nil) async throws -> Running {
            let state = NSTemporaryDirectory() + "fieldhal-daemon-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            var config = "fake"
            if let configuration {
                config = state + "/kit.toml"
                try configuration.write(toFile: config, atomically: true, encoding: .utf8)
            }
            let options = try GlobalOptions.parse(["--config", config, "--state-dir", state])
            var logger = log?.logger(label: "fieldhal.test", level: .warning) ?? Logger(label: "fieldhal.test")
            logger.logLevel = .warning
            let daemon = try Daemon(options: options, logger: logger, uploadInterval: .seconds(1), verifyInterval: .seconds(5),
                                    clock: clock)
            let host = await daemon.openDevices()
            let hangUps = await UnixSignalsSequence(trapping: .sighup)
            let group = ServiceGroup(configuration: .init(services: daemon.services(host: host, hangUps: hangUps), logger: logger))
            daemon.group.withLock { $0 = group }
            let running = Task { try await group.run() }
            let started = Running(daemon: daemon, group: group, running: running, state: state)
            // The socket is there once the API service listens: the first answer is the event.
            let deadline = ContinuousClock.now + .seconds(60)
            while ContinuousClock.now < deadline, (try? await started.client.status()) == nil {
                try await Task.sleep(for: .milliseconds(20))
            }
            return started
        }

        func stop() async throws {
            await group.triggerGracefulShutdown()
            try await running.value
            try? FileManager.default.removeItem(atPath: state)
        }
    }

    @Test func theDaemonServesItsAPIFromThisProcessAndStopsInOrder() async throws {
        let kit = try await Running.start()
        let client = kit.client
        let status = try await client.status()
        #expect(status.pid == getpid(), "the API is served from this process: \(status)")
        let capabilities = try await client.capabilities().capabilities
        #expect(capabilities.contains { $0.capability == .camera && $0.isAvailable }, "\(capabilities)")

        // A flow route through the daemon's own composition: the lock, set up and read back.
        let message = try await client.setUpLock(APILockSetup(pin: "4821", pinConfirmation: "4821"))
        #expect(message.message == "Lock set up with a PIN.")
        #expect(try await client.lock().configured)

        let socket = kit.state + "/api.sock"
        await kit.group.triggerGracefulShutdown()
        try await kit.running.value
        #expect(!FileManager.default.fileExists(atPath: socket), "the socket goes with the API service")
        #expect(!kit.daemon.erased.value)
        try? FileManager.default.removeItem(atPath: kit.state)
    }

    /// The idle relock reaches the event stream when the kit's clock reaches it: the lock's
    /// watch sleeps on the daemon's clock until the moment the lock says it will relock (it
    /// used to read the lock, and verify its whole audit log, every 5 s). On a manual clock
    /// the minute passes at once, and not a second early.
    /// The lock file's size is in every listing of the state directory (the stealth checks
    /// compare them): it must not change with the number of digits in the daemon's pid.
    @Test func theDaemonLockIsElevenBytesWhateverThePid() throws {
        for pid: Int32 in [1, 987, 65_432, 4_194_304] {
            let record = DaemonLock.record(pid: pid)
            #expect(record.utf8.count == 11)
            #expect(Int32(record.trimmingCharacters(in: .whitespacesAndNewlines)) == pid)
        }
        let state = StateDirectory(path: NSTemporaryDirectory() + "fieldhal-daemon-lock-\(UUID().uuidString)")
        let lock = try DaemonLock(state)
        #expect(try FileManager.default.attributesOfItem(atPath: state.path + "/daemon.lock")[.size] as? Int == 11)
        withExtendedLifetime(lock) {}
        try? FileManager.default.removeItem(atPath: state.path)
    }

    @Test func theIdleRelockIsPublishedWhenTheKitsClockReachesIt() async throws {
        let clock = ManualKitClock()
        let kit = try await Running.start(clock: clock)
        let client = kit.client
        let events = client.events([.lock])
        let setUp = clock.now
        _ = try await client.setUpLock(APILockSetup(pin: "4821", pinConfirmation: "4821", relockAfter: "1m"))
        #expect(try await !client.lock().locked)

        // The watch goes to sleep until just past the relock.
        let relock = setUp.addingTimeInterval(60)
        #expect(await eventually { clock.deadlines.contains { $0 >= relock && $0 < relock.addingTimeInterval(1) } },
                "the lock's watch is not asleep until the relock: \(clock.deadlines.map { $0.timeIntervalSince(setUp) })")
        clock.advance(by: .seconds(59))
        #expect(try await !client.lock().locked, "locked a second early")

        clock.advance(by: .seconds(2))
        let relocked = try await withThrowingTaskGroup(of: Bool.self) { race in
            race.addTask {
                for try await event in events {
                    if case .lock(let status) = event, status.configured, status.locked { return true }
                }
                return false
            }
            race.addTask { try await Task.sleep(for: .seconds(120)); return false }  // a hang, not a bound
            defer { race.cancelAll() }
            return try await race.next() ?? false
        }
        #expect(relocked, "no lock event said locked after the kit's clock passed the relock")
        #expect(try await client.lock().locked)
        try await kit.stop()
    }

    /// The contract on a recording through the API (api/openapi.yaml, `/camera/record`): a
    /// still asked for meanwhile is a frame of the recording, at the recording's size, within
    /// a frame — not a wait for its end at the size asked; a second recording at once is
    /// refused `busy`, not queued behind the first (issue 43, found by a client written from
    /// the contract alone). A camera that records in real time, as a real one does.
    @Test func aStillDuringARecordingIsOneOfItsFramesAndASecondRecordingIsBusy() async throws {
        let kit = try await Running.start(configuration: "[camera]\nplugin = \"fake\"\nrealtime = true\n")
        let client = kit.client
        let clip = kit.state + "/clip.avi"
        let ended = LockedValue(false)
        let recording = Task {
            defer { ended.withLock { $0 = true } }
            return try await client.recordVideo(APIVideoRecord(durationMs: 8_000, width: 160, height: 120, fps: 10), to: clip)
        }
        // The still: one of the recording's frames, at its size, while it goes on (before
        // the recording has begun, a still is at the size asked: asked again).
        var size: (width: Int, height: Int)?
        while !ended.value {
            size = JPEGSize.of(try await client.photo(width: 320, height: 240))
            if size?.width != 320 { break }
        }
        #expect(size?.width == 160 && size?.height == 120, "a still during a 160x120 recording came at \(String(describing: size))")

        // And a second recording meanwhile is refused, not queued behind the first.
        do {
            let second = try await client.recordVideo(APIVideoRecord(durationMs: 100, width: 160, height: 120, fps: 10), to: kit.state + "/second.avi")
            Issue.record("a second recording at once was made: \(second)")
        } catch let refusal as APIProblem {
            #expect(refusal.status == 409 && refusal.kind == "busy" && refusal.detail.contains("recording"), "\(refusal)")
        }
        #expect(!ended.value, "the recording ended before the still")
        let first = try await recording.value
        #expect(first.width == 160 && first.frames > 0, "\(first)")
        try await kit.stop()
    }

    /// Two cameras: each listed with its name, each its own recording (one busy does not
    /// refuse the other), and a name the kit lacks (404) or that cannot be a name (400) is the
    /// caller's error.
    @Test func twoCamerasRecordAtOnceAndEachRouteNamesItsDevice() async throws {
        let kit = try await Running.start(configuration: """
            [camera.front]
            plugin = "fake"
            realtime = true
            [camera.rear]
            plugin = "fake"
            realtime = true
            roles = []
            """)
        let client = kit.client
        let cameras = try await client.devices().filter { $0.capability == .camera }
        #expect(cameras.map(\.name) == ["front", "rear"])
        #expect(cameras.map(\.isDefault) == [true, false])
        #expect(cameras.map(\.roles) == [[.evidence], []])
        let allAvailable = cameras.allSatisfy { $0.isAvailable }
        #expect(allAvailable)

        let front = Task { try await client.recordVideo(APIVideoRecord(durationMs: 1_500, width: 160, height: 120, fps: 10), to: kit.state + "/front.avi", device: "front") }
        let rear = Task { try await client.recordVideo(APIVideoRecord(durationMs: 1_500, width: 320, height: 240, fps: 10), to: kit.state + "/rear.avi", device: "rear") }
        let (frontClip, rearClip) = (try await front.value, try await rear.value)
        #expect(frontClip.width == 160 && frontClip.frames > 0 && rearClip.width == 320 && rearClip.frames > 0, "\(frontClip) \(rearClip)")

        do {
            _ = try await client.cameraFormats(device: "side")
            Issue.record("a camera the kit lacks answered")
        } catch let problem as APIProblem {
            #expect(problem.status == 404 && problem.kind == "noSuchDevice" && problem.advice == "its camera devices: front, rear", "\(problem)")
        }
        for (device, expected) in [("bad name", "cannot name a device"), ("-x", "cannot name a device")] {
            do {
                _ = try await client.cameraFormats(device: device)
                Issue.record("\(device) answered")
            } catch let problem as APIProblem {
                #expect(problem.status == 400 && problem.detail.contains(expected), "\(problem)")
            }
        }
        #expect(try await !client.cameraFormats(device: "rear").isEmpty)
        let still = try await client.photo(width: 64, height: 48, device: "rear")
        #expect(JPEGSize.of(still)?.width == 64)
        try await kit.stop()
    }

    /// The services' other waits are on the same clock: a session check waits its interval
    /// on it, and a stop ends every wait at once, however far its deadline.
    @Test func everyServiceWaitsOnTheKitsClockAndStopsAtOnce() async throws {
        let clock = ManualKitClock()
        let kit = try await Running.start(clock: clock)
        // The uploads (1 s), the session checks (5 s), the lock's watch and the alert loop
        // (not signed in: the next look) all sleep on the manual clock.
        #expect(await eventually { clock.sleeperCount >= 4 }, "\(clock.sleeperCount) services asleep on the kit's clock")
        for _ in 0..<10 { clock.advance(by: .seconds(1)) }  // they wake, do their work, sleep again
        #expect(await eventually { clock.sleeperCount >= 4 }, "\(clock.sleeperCount) services asleep after ten seconds")
        try await kit.stop()
        #expect(clock.sleeperCount == 0, "a wait outlived the daemon")
    }
}

/// Whether `condition` holds within a minute, looked at every 10 ms: for state that another
/// task reaches at its own pace (a hang fails, a slow machine does not).
func eventually(_ condition: @escaping @Sendable () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + .seconds(60)
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return condition()
}
