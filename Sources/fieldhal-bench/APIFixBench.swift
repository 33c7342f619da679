import ArgumentParser
import FieldHAL
import FieldHALComposition
import FieldHALAPI
import FieldHALClient
import FieldHALPlugins
import Foundation
import FieldHALCommandLine
#if canImport(Glibc)
import Glibc
#endif

/// `fieldhal-bench api-gps`: what the daemon's event stream adds to a fix from gpsd, next to
/// the gpsd plugin's in-process `watch()` and gpspipe reading the same reports, and what a
/// hundred programs following fixes cost through the daemon against a hundred gpsd clients.
struct APIFixBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "api-gps",
        abstract: "Fix latency over the hardware API's event stream vs in-process watch() and gpspipe; 100 followers through the daemon vs 100 gpsd clients.",
        discussion: """
        Needs gpsd and gpsd-clients (gpsfake, gpspipe); no receiver. Latency: a private gpsd \
        replays a generated NMEA log; a relay stamps each report as it hands it at once to \
        its clients — the gpsd plugin's watch() in this process, a `fieldhal run` daemon \
        (gpsd plugin) whose fix events this process follows over the API socket three ways \
        (FieldHALClient.events(), FieldHALClient.follow on the client's reading thread, and \
        raw bytes read by a thread), and `gpspipe -w` — so every latency is from the same \
        instant; then again with each report handed to one client in turn, so that each \
        path is measured on its own (the clients do not compete for the CPUs; each way \
        through the API follows a daemon of its own), interleaved. Then one wake-up through a \
        socket on this machine (a thread blocked in read, woken by a write after an epoch's \
        idle): a daemon between the receiver and the program costs at least one, so \
        (in-process + one wake-up) / in-process is the floor under the ratio. Load: a 1 Hz feed; first \
        --followers programs' worth of event-stream clients on one daemon (the daemon's \
        CPU and peak memory, gpsd's CPU), then as many gpspipe processes straight on gpsd \
        (gpsd's CPU, their memory), each for --seconds.
        """)

    @Option(help: "Epochs (one TPV report each) in the latency phase.") var epochs = 1000
    @Option(help: "Seconds gpsfake waits between sentences in the latency phase (3 sentences an epoch).") var cycle = 0.01
    @Option(help: "Clients in the load phase.") var followers = 100
    @Option(help: "Seconds each load measurement lasts.") var seconds = 10
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        try await reportingFailures { try await measure() }
    }

    struct Latency: Encodable {
        var samples: Int
        var inProcessMedianMs, inProcessP95Ms: Double
        var eventStreamMedianMs, eventStreamP95Ms: Double
        /// The same stream through `FieldHALClient.follow`: each event handed over on the
        /// client's reading thread, no task woken for it.
        var eventStreamFollowMedianMs, eventStreamFollowP95Ms: Double
        /// The same stream read as bytes (what a C or shell client sees): the daemon's share.
        var eventStreamRawMedianMs, eventStreamRawP95Ms: Double
        var gpspipeMedianMs, gpspipeP95Ms: Double
        /// Event stream (`events()`) ÷ in-process, and ÷ gpspipe (medians).
        var ratioVsInProcess, ratioVsGpspipe: Double
        /// Event stream (`follow`) ÷ in-process `watch()`, and raw bytes ÷ in-process.
        var ratioFollowVsInProcess, ratioRawVsInProcess: Double
        /// The same stream read as bytes through the web door (TCP on loopback, a page's
        /// token and Origin), and its ratio to the raw bytes on the Unix socket (issue 45: ≤ 2).
        var webDoorRawMedianMs, webDoorRawP95Ms, ratioWebDoorVsSocket: Double
    }

    struct Load: Encodable {
        var clients: Int
        var seconds: Double
        var fixesPerClient: Double
        /// Through the daemon: its CPU and peak RSS, and gpsd's CPU (one client: the daemon).
        var daemonCPUPercent: Double
        var daemonPeakRSSKiB: Int
        var gpsdCPUPercentServingTheDaemon: Double
        /// Straight on gpsd: gpsd's CPU with that many gpspipe clients, and their total RSS.
        var gpsdCPUPercentServingGpspipes: Double
        var gpspipesTotalRSSKiB: Int
        /// The daemon's CPU ÷ gpsd's with as many clients of its own; nil when gpsd's was
        /// under one clock tick.
        var cpuRatio: Double?
    }

    struct Report: Encodable {
        var machine: String
        /// Every report to every client at once: the clients compete for the two CPUs.
        var latency: Latency
        /// Each report to one client in turn: each path on its own, interleaved.
        var latencyAlone: Latency
        /// One wake-up through a socket on this machine (`WakeUpFloor`), and the ratio a
        /// daemon that added nothing but its socket would give: (in-process alone + one
        /// wake-up) / in-process alone. No daemon between the receiver and the program can do
        /// better here.
        var wakeUpMedianMs, wakeUpP95Ms, floorRatioAlone: Double
        var load: Load
    }

    func measure() async throws {
        guard epochs >= 20, cycle > 0, followers > 0, seconds > 0 else {
            throw FieldHALError(.invalidArgument, subject: "bench api-gps", detail: "--epochs must be at least 20, --cycle, --followers and --seconds positive")
        }
        let setup = try GPSBenchSetup.make("bench api-gps", tools: ["/usr/bin/gpsfake", "/usr/bin/gpspipe"], epochs: epochs)
        defer { setup.remove() }
        let (gpsd, directory, log) = (setup.gpsd, setup.directory, setup.log)

        let latency = try await measureLatency(gpsd, log: log, directory: directory, oneClientPerReport: false)
        let alone = try await measureLatency(gpsd, log: log, directory: directory, oneClientPerReport: true)
        let wakeUp = try await WakeUpFloor.measure(idle: .seconds(cycle * 3))
        let load = try await measureLoad(log: log, directory: directory)
        let report = Report(machine: GPSBench.machine, latency: latency, latencyAlone: alone,
                            wakeUpMedianMs: wakeUp.medianMs, wakeUpP95Ms: wakeUp.p95Ms,
                            floorRatioAlone: (alone.inProcessMedianMs + wakeUp.medianMs) / alone.inProcessMedianMs, load: load)
        func format(_ value: Double) -> String { String(format: "%.3f", value) }
        try Output.emit(report, json: json) {
            """
            machine: \(report.machine)
            latency, gpsd report to consumer (\(latency.samples) reports seen by every client; median, p95):
              gpsd plugin watch(), in-process      \(format(latency.inProcessMedianMs)) ms  \(format(latency.inProcessP95Ms)) ms
              daemon's event stream, Swift client  \(format(latency.eventStreamMedianMs)) ms  \(format(latency.eventStreamP95Ms)) ms
              the same, FieldHALClient.follow      \(format(latency.eventStreamFollowMedianMs)) ms  \(format(latency.eventStreamFollowP95Ms)) ms
              daemon's event stream, raw bytes     \(format(latency.eventStreamRawMedianMs)) ms  \(format(latency.eventStreamRawP95Ms)) ms
              the same through the web door (TCP)  \(format(latency.webDoorRawMedianMs)) ms  \(format(latency.webDoorRawP95Ms)) ms
              gpspipe -w                           \(format(latency.gpspipeMedianMs)) ms  \(format(latency.gpspipeP95Ms)) ms
              ratio event stream (Swift client) / in-process   \(format(latency.ratioVsInProcess))
              ratio event stream (follow) / in-process         \(format(latency.ratioFollowVsInProcess))
              ratio event stream (raw bytes) / in-process      \(format(latency.ratioRawVsInProcess))
              ratio web door / Unix socket (raw bytes)         \(format(latency.ratioWebDoorVsSocket))
              ratio event stream (Swift client) / gpspipe      \(format(latency.ratioVsGpspipe))
            latency, each report to one client in turn (each path alone; \(alone.samples)+ reports each; median, p95):
              gpsd plugin watch(), in-process      \(format(alone.inProcessMedianMs)) ms  \(format(alone.inProcessP95Ms)) ms
              daemon's event stream, Swift client  \(format(alone.eventStreamMedianMs)) ms  \(format(alone.eventStreamP95Ms)) ms
              the same, FieldHALClient.follow      \(format(alone.eventStreamFollowMedianMs)) ms  \(format(alone.eventStreamFollowP95Ms)) ms
              daemon's event stream, raw bytes     \(format(alone.eventStreamRawMedianMs)) ms  \(format(alone.eventStreamRawP95Ms)) ms
              the same through the web door (TCP)  \(format(alone.webDoorRawMedianMs)) ms  \(format(alone.webDoorRawP95Ms)) ms
              gpspipe -w                           \(format(alone.gpspipeMedianMs)) ms  \(format(alone.gpspipeP95Ms)) ms
              ratio event stream (Swift client) / in-process   \(format(alone.ratioVsInProcess))
              ratio event stream (follow) / in-process         \(format(alone.ratioFollowVsInProcess))
              ratio event stream (raw bytes) / in-process      \(format(alone.ratioRawVsInProcess))
              ratio web door / Unix socket (raw bytes)         \(format(alone.ratioWebDoorVsSocket))
              ratio event stream (Swift client) / gpspipe      \(format(alone.ratioVsGpspipe))
            one wake-up through a socket on this machine: median \(format(report.wakeUpMedianMs)) ms  p95 \(format(report.wakeUpP95Ms)) ms
              the floor for any daemon, alone: (in-process + one wake-up) / in-process = \(format(report.floorRatioAlone))
            \(load.clients) clients on a 1 Hz feed for \(format(load.seconds)) s (\(format(load.fixesPerClient)) fixes each):
              through the daemon: daemon CPU \(format(load.daemonCPUPercent)) %, peak RSS \(load.daemonPeakRSSKiB) KiB; gpsd CPU \(format(load.gpsdCPUPercentServingTheDaemon)) %
              straight on gpsd:   gpsd CPU \(format(load.gpsdCPUPercentServingGpspipes)) %; the gpspipes' RSS \(load.gpspipesTotalRSSKiB) KiB in all
              ratio CPU daemon / gpsd  \(load.cpuRatio.map(format) ?? "– (gpsd under one clock tick)")
            """
        }
    }

    // MARK: - Latency: one relay, every client

    private func measureLatency(_ gpsd: PluginDescriptor, log: String, directory: String, oneClientPerReport: Bool) async throws -> Latency {
        let feed = try BenchProcess.start("/usr/bin/gpsfake", ["-1", "-p", "-q", "-c", String(cycle), "-P", String(try TCP.freePort()), log])
        defer { feed.kill() }
        let gpsdPort = Int(feed.arguments[feed.arguments.firstIndex(of: "-P")! + 1])!
        try await GPSBench.waitForListener(port: gpsdPort)
        let relay = try LineRelay(upstreamPort: gpsdPort, oneClientPerReport: oneClientPerReport)
        relay.start()

        let daemon = try await Self.startDaemon(gpsdPort: relay.port, directory: directory + (oneClientPerReport ? "/alone" : "/latency"),
                                                webDoor: !oneClientPerReport)
        defer { daemon.process.kill() }
        let webDaemon = oneClientPerReport ? try await Self.startDaemon(gpsdPort: relay.port, directory: directory + "/alone-web", webDoor: true) : daemon
        defer { if oneClientPerReport { webDaemon.process.kill() } }
        // Alone, the raw reader follows a daemon of its own: one daemon serving both readers
        // would wake two connections (and, on two CPUs, compete with itself) for every fix.
        let rawDaemon = oneClientPerReport ? try await Self.startDaemon(gpsdPort: relay.port, directory: directory + "/alone-raw") : nil
        defer { rawDaemon?.process.kill() }
        let followDaemon = oneClientPerReport ? try await Self.startDaemon(gpsdPort: relay.port, directory: directory + "/alone-follow") : nil
        defer { followDaemon?.process.kill() }
        let pipeOutput = directory + "/gpspipe.out"
        let pipe = try BenchProcess.start("/usr/bin/stdbuf", ["-oL", "/usr/bin/gpspipe", "-w", "-u", "-u", "127.0.0.1:\(relay.port)"],
                                          output: pipeOutput)
        defer { pipe.kill() }
        let provider = try await GPSBench.openLocation(gpsd, port: relay.port)
        let inProcess = LockedValue<[String: Double]>([:])
        let overAPI = LockedValue<[String: Double]>([:])
        let consumer = Task {
            for try await fix in provider.watch() {
                let now = Date().timeIntervalSince1970
                let key = TPVKey.of(fix.time)
                inProcess.withLock { $0[key] = $0[key] ?? now }
            }
        }
        let follower = Task {
            for try await event in daemon.api.events([.fix]) {
                guard case .fix(let fix, _) = event else { continue }
                let now = Date().timeIntervalSince1970
                let key = TPVKey.of(fix.time)
                overAPI.withLock { $0[key] = $0[key] ?? now }
            }
        }
        let followed = LockedValue<[String: Double]>([:])
        let following = (followDaemon ?? daemon).api.follow([.fix], { event in
            guard case .fix(let fix, _) = event else { return }
            let now = Date().timeIntervalSince1970
            let key = TPVKey.of(fix.time)
            followed.withLock { $0[key] = $0[key] ?? now }
        }, end: { _ in })
        defer { following.cancel() }
        let raw = try RawEventReader(socketPath: (rawDaemon ?? daemon).api.socketPath)
        defer { raw.stop() }
        guard let door = webDaemon.web else { throw FieldHALError(.unavailable, subject: "bench api-gps", detail: "the daemon opened no web door") }
        let web = try RawEventReader(webPort: door.port, token: door.token)
        defer { web.stop() }
        try await relay.waitForTheFeedToEnd(within: .seconds(Double(epochs) * cycle * 3 + 60))
        consumer.cancel()
        follower.cancel()
        following.cancel()
        await provider.close()
        pipe.kill()

        let piped = GPSBench.parseGpspipe(try String(contentsOfFile: pipeOutput, encoding: .utf8))
        let mine = inProcess.value, streamed = overAPI.value, bytes = raw.stop(), handed = followed.value, paged = web.stop()
        var local: [Double] = [], api: [Double] = [], rawAPI: [Double] = [], gpspipe: [Double] = [], follow: [Double] = [], webRaw: [Double] = []
        for (key, sent) in relay.forwardTimes {
            if oneClientPerReport {
                // Each report reached one client.
                if let a = mine[key] { local.append((a - sent) * 1000) }
                if let c = piped[key] { gpspipe.append((c - sent) * 1000) }
                if let b = streamed[key] { api.append((b - sent) * 1000) }
                if let d = bytes[key] { rawAPI.append((d - sent) * 1000) }
                if let e = handed[key] { follow.append((e - sent) * 1000) }
                if let f = paged[key] { webRaw.append((f - sent) * 1000) }
                continue
            }
            guard let a = mine[key], let b = streamed[key], let c = piped[key], let d = bytes[key], let e = handed[key], let f = paged[key] else { continue }
            webRaw.append((f - sent) * 1000)
            follow.append((e - sent) * 1000)
            local.append((a - sent) * 1000)
            api.append((b - sent) * 1000)
            gpspipe.append((c - sent) * 1000)
            rawAPI.append((d - sent) * 1000)
        }
        let wanted = oneClientPerReport ? epochs / 7 : epochs / 2
        guard min(local.count, api.count, gpspipe.count, rawAPI.count, follow.count, webRaw.count) >= max(10, wanted) else {
            throw FieldHALError(.timeout, subject: "bench api-gps", detail: "only \(local.count) of \(epochs) reports were seen by every client",
                                advice: "the daemon's log: \(directory)/latency/daemon.log (kept only while the bench runs); try more --epochs")
        }
        let median = { (values: [Double]) in GPSBench.percentile(values, 0.5) }
        return Latency(samples: min(local.count, api.count, gpspipe.count, rawAPI.count, follow.count, webRaw.count),
                       inProcessMedianMs: median(local), inProcessP95Ms: GPSBench.percentile(local, 0.95),
                       eventStreamMedianMs: median(api), eventStreamP95Ms: GPSBench.percentile(api, 0.95),
                       eventStreamFollowMedianMs: median(follow), eventStreamFollowP95Ms: GPSBench.percentile(follow, 0.95),
                       eventStreamRawMedianMs: median(rawAPI), eventStreamRawP95Ms: GPSBench.percentile(rawAPI, 0.95),
                       gpspipeMedianMs: median(gpspipe), gpspipeP95Ms: GPSBench.percentile(gpspipe, 0.95),
                       ratioVsInProcess: median(api) / median(local), ratioVsGpspipe: median(api) / median(gpspipe),
                       ratioFollowVsInProcess: median(follow) / median(local), ratioRawVsInProcess: median(rawAPI) / median(local),
                       webDoorRawMedianMs: median(webRaw), webDoorRawP95Ms: GPSBench.percentile(webRaw, 0.95),
                       ratioWebDoorVsSocket: median(webRaw) / median(rawAPI))
    }

    // MARK: - Load: many followers, through the daemon and straight on gpsd

    private func measureLoad(log: String, directory: String) async throws -> Load {
        // Three sentences an epoch, a third of a second apart: one report a second, like a
        // receiver; started so that gpsd surely reports (`GpsdFeed`).
        let (feed, port, watcher, _) = try await GpsdFeed.start(["-c", "0.333"], logs: [log], subject: "bench api-gps")
        defer { feed.kill() }
        watcher.stop()
        let gpsdPID = try Self.gpsdPID(under: feed.pid)

        // Through the daemon.
        let daemon = try await Self.startDaemon(gpsdPort: port, directory: directory + "/load")
        defer { daemon.process.kill() }
        // Each client's fixes, and why a client stopped if it did: a follower that could not
        // connect must be an error here, not a quiet zero.
        let received = LockedValue([Int](repeating: 0, count: followers))
        let failures = LockedValue<[String]>([])
        let clients = (0..<followers).map { index in
            Task {
                do {
                    for try await event in daemon.api.events([.fix]) {
                        // Fixes with a position: the stream may open with a no-fix report.
                        if case .fix(let fix, _) = event, fix.hasPosition { received.withLock { $0[index] += 1 } }
                    }
                } catch is CancellationError {
                } catch {
                    failures.withLock { $0.append("follower \(index): \(error)") }
                }
            }
        }
        defer { for client in clients { client.cancel() } }
        // The window opens once every client has had a fix (connected, gpsd feeding), and
        // lasts --seconds and until every client has had one more: on a loaded machine the
        // start-up takes what it takes, and a window never closes empty.
        try await Self.waitUntil("every follower's first fix through the daemon", within: .seconds(60), log: directory + "/load/daemon.log",
                                 failures: failures) { received.value.allSatisfy { $0 > 0 } }
        received.withLock { $0 = [Int](repeating: 0, count: followers) }
        let daemonBefore = GPSBench.cpuSeconds(of: daemon.process.pid), gpsdBefore = GPSBench.cpuSeconds(of: gpsdPID)
        let start = ContinuousClock.now
        try await Task.sleep(for: .seconds(seconds))
        try await Self.waitUntil("a fix for every follower within the window", within: .seconds(60), log: directory + "/load/daemon.log",
                                 failures: failures) { received.value.allSatisfy { $0 > 0 } }
        let wall = (ContinuousClock.now - start).seconds
        let daemonCPU = GPSBench.cpuSeconds(of: daemon.process.pid) - daemonBefore
        let gpsdServingDaemon = GPSBench.cpuSeconds(of: gpsdPID) - gpsdBefore
        let fixes = received.value.reduce(0, +)
        let daemonPeak = GPSBench.peakRSSKiB(of: "\(daemon.process.pid)")
        for client in clients { client.cancel() }
        daemon.process.kill()

        // Straight on gpsd: as many gpspipe processes.
        var pipes: [BenchProcess] = []
        defer { for pipe in pipes { pipe.kill() } }
        for _ in 0..<followers {
            pipes.append(try BenchProcess.start("/usr/bin/gpspipe", ["-w", "-o", "/dev/null", "127.0.0.1:\(port)"]))
        }
        try await Task.sleep(for: .seconds(2))
        let gpsdAlone = GPSBench.cpuSeconds(of: gpsdPID)
        let pipesStart = ContinuousClock.now
        try await Task.sleep(for: .seconds(seconds))
        let pipesWall = (ContinuousClock.now - pipesStart).seconds
        let gpsdServingPipes = GPSBench.cpuSeconds(of: gpsdPID) - gpsdAlone
        let pipesRSS = pipes.map { APIBench.rssKiB(of: $0.pid) }.filter { $0 > 0 }.reduce(0, +)
        for pipe in pipes { pipe.kill() }
        pipes.removeAll()

        let daemonPercent = daemonCPU / wall * 100, gpsdPercent = gpsdServingPipes / pipesWall * 100
        return Load(clients: followers, seconds: wall, fixesPerClient: Double(fixes) / Double(followers),
                    daemonCPUPercent: daemonPercent, daemonPeakRSSKiB: daemonPeak,
                    gpsdCPUPercentServingTheDaemon: gpsdServingDaemon / wall * 100,
                    gpsdCPUPercentServingGpspipes: gpsdPercent, gpspipesTotalRSSKiB: pipesRSS,
                    cpuRatio: gpsdPercent > 0 ? daemonPercent / gpsdPercent : nil)
    }

    // MARK: - Helpers

    struct Daemon {
        let process: BenchProcess
        let api: FieldHALClient
        /// The web door's port and a page's token, when the daemon opened one.
        var web: (port: Int, token: String)?
    }

    /// `fieldhal run` with only a gpsd receiver and the API, in its own state directory.
    static func startDaemon(gpsdPort: Int, directory: String, webDoor: Bool = false) async throws -> Daemon {
        let webPort = webDoor ? try TCP.freePort() : nil
        var daemon = try await startDaemon(sections: """
            [gps]
            plugin = "gpsd"
            host = "127.0.0.1"
            port = \(gpsdPort)
            """ + (webPort.map { "\n\n[web]\nlisten = \"127.0.0.1:\($0)\"" } ?? ""), directory: directory)
        if let webPort {
            let issued = try await daemon.api.issueWebToken(APIWebTokenRequest(origin: WebDoorReader.origin, allow: ["location"]))
            daemon.web = (webPort, issued.token ?? "")
        }
        return daemon
    }

    /// `fieldhal run` with the receivers `sections` configure and the API, in its own state
    /// directory.
    static func startDaemon(sections: String, directory: String) async throws -> Daemon {
        try FileManager.default.createDirectory(atPath: directory + "/state", withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let socket = directory + "/api.sock"
        let config = directory + "/kit.toml"
        try """
        \(sections)

        [api]
        socket = "\(socket)"

        """.write(toFile: config, atomically: true, encoding: .utf8)
        let process = try BenchProcess.start(try Sibling.fieldhal(), ["run", "--config", config, "--state-dir", directory + "/state"],
                                             output: directory + "/daemon.log")
        let api = FieldHALClient(socketPath: socket)
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline, process.process.isRunning {
            if (try? await api.status()) != nil { return Daemon(process: process, api: api) }
            try await Task.sleep(for: .milliseconds(50))
        }
        let said = (try? String(contentsOfFile: directory + "/daemon.log", encoding: .utf8)) ?? ""
        process.kill()
        let how = process.process.isRunning ? "did not serve its API within 20 s" : "exited \(process.process.terminationStatus)"
        throw FieldHALError(.unavailable, subject: "bench", detail: "the daemon \(how): \(said.suffix(500))",
                            advice: "run it yourself: fieldhal run --config \(config)")
    }

    /// Waits for a condition the load phase needs, polling what the followers counted; past
    /// the bound it fails saying what it waited for, what the followers said and where the
    /// daemon's log is.
    static func waitUntil(_ what: String, within bound: Duration, log: String, failures: LockedValue<[String]>,
                          _ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + bound
        while !condition() {
            let said = failures.value
            guard said.isEmpty, ContinuousClock.now < deadline else {
                let tail = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").suffix(500)
                throw FieldHALError(.unavailable, subject: "bench api-gps",
                                    detail: "no \(what) after \(bound)\(said.isEmpty ? "" : ": " + said.joined(separator: "; ")); the daemon said: \(tail)",
                                    advice: "run the daemon by hand against gpsfake and follow /v1/events")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// gpsfake (Python) runs gpsd as its child.
    static func gpsdPID(under parent: Int32) throws -> Int32 {
        for _ in 0..<100 {
            let children = (try? String(contentsOfFile: "/proc/\(parent)/task/\(parent)/children", encoding: .utf8)) ?? ""
            for child in children.split(separator: " ").compactMap({ Int32($0) }) {
                let name = (try? String(contentsOfFile: "/proc/\(child)/comm", encoding: .utf8)) ?? ""
                if name.hasPrefix("gpsd") { return child }
            }
            usleep(50_000)
        }
        throw FieldHALError(.unavailable, subject: "bench api-gps", detail: "no gpsd under gpsfake (pid \(parent))")
    }
}

/// Follows `GET /v1/events?types=fix` on its own thread with blocking reads, stamping each
/// fix's `data:` line as it arrives: the stream as a program in C or a shell sees it, with
/// no decoding in the way.
/// The page a web door reader stands for.
enum WebDoorReader {
    static let origin = "http://localhost:8000"
}

final class RawEventReader: @unchecked Sendable {
    private let descriptor: Int32
    private let lock = NSLock()
    private var stamps: [String: Double] = [:]
    private var stopped = false

    /// Through the web door on loopback, as a page's stream goes: its token and Origin.
    init(webPort: Int, token: String) throws {
        descriptor = try TCP.connect(port: webPort)
        let request = "GET /v1/events?types=fix HTTP/1.1\r\nHost: 127.0.0.1:\(webPort)\r\nOrigin: \(WebDoorReader.origin)\r\n"
            + "Authorization: Bearer \(token)\r\n\r\n"
        _ = request.withCString { send(descriptor, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
        Thread { [self] in read() }.start()
    }

    init(socketPath: String) throws {
        descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (index, byte) in socketPath.utf8.prefix(buffer.count - 1).enumerated() { buffer[index] = byte }
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard descriptor >= 0, connected == 0 else {
            close(descriptor)
            throw FieldHALError(.unavailable, subject: "bench", detail: "cannot connect to \(socketPath)")
        }
        let request = "GET /v1/events?types=fix HTTP/1.1\r\nHost: fieldhal\r\n\r\n"
        _ = request.withCString { send(descriptor, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
        Thread { [self] in read() }.start()
    }

    private func read() {
        var buffer = [UInt8](repeating: 0, count: 65536)
        var pending: [UInt8] = []
        while true {
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count <= 0 {
                close(descriptor)
                return
            }
            let now = Date().timeIntervalSince1970
            pending += buffer[0..<count]
            while let newline = pending.firstIndex(of: 10) {
                let line = String(decoding: pending[..<newline], as: UTF8.self)
                pending.removeSubrange(...newline)
                // `data: {…"time":"2026-…Z"…}`: the time is the key gpsd gave the report.
                guard line.contains("data:"), let start = line.range(of: #""time":""#),
                      let end = line[start.upperBound...].firstIndex(of: "\"") else { continue }
                let key = String(line[start.upperBound..<end])
                lock.withLock { if !stopped { stamps[key] = stamps[key] ?? now } }
            }
        }
    }

    /// Ends the stream and returns the arrival times by fix time.
    @discardableResult
    func stop() -> [String: Double] {
        lock.withLock {
            if !stopped {
                stopped = true
                shutdown(descriptor, Int32(SHUT_RDWR))
            }
            return stamps
        }
    }
}
