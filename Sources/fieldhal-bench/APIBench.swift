import ArgumentParser
import FieldHAL
import FieldHALAPI
import FieldHALClient
import FieldHALCommandLine
import FieldHALComposition
import FieldHALSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `fieldhal-bench api`: what a call through the daemon's hardware API costs, next to what a
/// program would do without it — spawn `curl --unix-socket` or the Python client, or spawn
/// `fieldhal` for each reading — and what many event clients cost the daemon.
struct APIBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "api",
        abstract: "Hardware API call latency vs curl, the Python client and a spawned CLI; the daemon's CPU and memory with many event clients.",
        discussion: """
        Starts `fieldhal run` on the given kit (default: the fake kit) with its API on a \
        scratch socket, then measures, in one run: GET /v1/status through the Swift client \
        (a connection per call, as it makes them) against `curl --unix-socket` (when \
        installed) and `python3 examples/python/fieldhal_api.py status`, each a process per \
        call, as a shell script would; POST /v1/nfc/read through the Swift client against \
        spawning `fieldhal nfc read --json` without a daemon (the only way before the API); \
        `fieldhal status`, `nfc read` and `lock status` through the daemon from the front \
        (fieldhal-front, installed as fieldhal) against the whole CLI and curl; \
        then the daemon's CPU and resident memory over a few seconds with one, then \
        --watchers, clients following fix events, all fed by one location watch.
        """)

    @Option(help: "The kit to run the daemon on.") var config = "examples/fake-kit.toml"
    @Option(help: "Calls through the Swift client, per route.") var samples = 200
    @Option(help: "Spawned processes per baseline.") var toolRuns = 30
    @Option(help: "Event clients for the load measurement.") var watchers = 100
    @Option(help: "Seconds each load measurement lasts.") var seconds = 5
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        try await reportingFailures { try await measure() }
    }

    struct Latency: Encodable {
        var name: String
        var samples: Int
        var medianMs, p95Ms: Double
    }

    struct Load: Encodable {
        var watchers: Int
        var daemonCPUPercent: Double
        var daemonRSSKiB: Int
        var fixesReceived: Int
    }

    struct Report: Encodable {
        var machine: String
        var latencies: [Latency]
        var statusRatioVsCurl: Double?
        var statusRatioVsPython: Double
        var tagReadRatioVsSpawnedCLI: Double
        /// `fieldhal status` through the daemon from the front, against curl and the whole CLI.
        var frontStatusRatioVsCurl: Double?
        var frontStatusRatioVsWholeCLI: Double?
        var loads: [Load]
        var daemonRSSKiBAtStart, daemonRSSKiBAtEnd: Int
    }

    func measure() async throws {
        guard samples > 0, toolRuns > 0, watchers > 0, seconds > 0 else {
            throw FieldHALError(.invalidArgument, subject: "bench api", detail: "--samples, --tool-runs, --watchers and --seconds must be positive")
        }
        guard let kit = try? String(contentsOfFile: config, encoding: .utf8) else {
            throw FieldHALError(.unavailable, subject: "bench api", detail: "cannot read \(config)",
                                advice: "run from the repository's root or pass --config PATH")
        }
        let client = "examples/python/fieldhal_api.py"
        guard FileManager.default.fileExists(atPath: client) else {
            throw FieldHALError(.unavailable, subject: "bench api", detail: "no \(client)", advice: "run from the repository's root")
        }
        let directory = try ScratchDirectory.make("fieldhal-bench-api")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let socket = directory + "/api.sock"
        let daemonConfig = directory + "/kit.toml"
        try (kit + "\n[api]\nsocket = \"\(socket)\"\n").write(toFile: daemonConfig, atomically: true, encoding: .utf8)
        let executable = try Sibling.fieldhal()
        let daemon = try BenchProcess.start(executable, ["run", "--config", daemonConfig, "--state-dir", directory + "/state"],
                                            output: directory + "/daemon.log")
        defer { daemon.kill() }
        let api = FieldHALClient(socketPath: socket)
        try await waitForDaemon(api)
        let rssAtStart = Self.rssKiB(of: daemon.pid)

        var latencies: [Latency] = []
        let status = try await timed(samples) { _ = try await api.status() }
        latencies.append(Latency("GET /v1/status, Swift client", status))
        var curl: [Double]?
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/curl") {
            curl = try await spawned(toolRuns, "/usr/bin/curl", ["-sf", "-o", "/dev/null", "--unix-socket", socket, "http://fieldhal/v1/status"])
            latencies.append(Latency("GET /v1/status, curl --unix-socket", curl!))
        }
        let python = try await spawned(toolRuns, "/usr/bin/python3", [client, "--socket", socket, "status"])
        latencies.append(Latency("GET /v1/status, python3 fieldhal_api.py", python))
        let read = try await timed(samples) { _ = try await api.readTag(timeout: .seconds(2)) }
        latencies.append(Latency("POST /v1/nfc/read, Swift client", read))
        // Without a daemon: the CLI opens the kit itself, in a state directory no daemon serves.
        let cli = try await spawned(toolRuns, executable, ["nfc", "read", "--json", "--config", config, "--state-dir", directory + "/alone"])
        latencies.append(Latency("fieldhal nfc read, spawned without a daemon", cli))
        // The CLI as the daemon's client, and the CLI's own start (the floor of any command).
        let served = try await spawned(toolRuns, executable, ["nfc", "read", "--json", "--config", daemonConfig, "--state-dir", directory + "/client"])
        latencies.append(Latency("fieldhal nfc read, spawned, through the daemon", served))
        let version = try await spawned(toolRuns, executable, ["--version"])
        latencies.append(Latency("fieldhal --version, spawned", version))
        let wholeStatus = try await spawned(toolRuns, executable, ["status", "--config", daemonConfig, "--state-dir", directory + "/client"])
        latencies.append(Latency("fieldhal status, whole CLI, through the daemon", wholeStatus))
        // The front, as installed as `fieldhal`: the daemon's commands without the whole CLI's start.
        var frontStatus: [Double]?
        if let front = Self.front() {
            frontStatus = try await spawned(toolRuns, front, ["status", "--config", daemonConfig, "--state-dir", directory + "/client"])
            latencies.append(Latency("fieldhal status, front, through the daemon", frontStatus!))
            latencies.append(Latency("fieldhal nfc read, front, through the daemon",
                                     try await spawned(toolRuns, front, ["nfc", "read", "--json", "--config", daemonConfig, "--state-dir", directory + "/client"])))
            latencies.append(Latency("fieldhal lock status, front, through the daemon",
                                     try await spawned(toolRuns, front, ["lock", "status", "--config", daemonConfig, "--state-dir", directory + "/client"])))
        }
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/nfc-list") {
            // What a libnfc user's tool costs to start (no device here: it lists none).
            latencies.append(Latency("nfc-list, spawned (no device)", try await spawned(toolRuns, "/usr/bin/nfc-list", [], anyStatus: true)))
        }

        var loads: [Load] = []
        for count in [1, watchers] {
            loads.append(try await load(count, api: api, daemon: daemon.pid))
        }
        let median = { (values: [Double]) in GPSBench.percentile(values, 0.5) }
        let report = Report(machine: GPSBench.machine, latencies: latencies,
                            statusRatioVsCurl: curl.map { median(status) / median($0) },
                            statusRatioVsPython: median(status) / median(python),
                            tagReadRatioVsSpawnedCLI: median(read) / median(cli),
                            frontStatusRatioVsCurl: frontStatus.flatMap { front in curl.map { median(front) / median($0) } },
                            frontStatusRatioVsWholeCLI: frontStatus.map { median($0) / median(wholeStatus) }, loads: loads,
                            daemonRSSKiBAtStart: rssAtStart, daemonRSSKiBAtEnd: Self.rssKiB(of: daemon.pid))
        func format(_ value: Double) -> String { String(format: "%.2f", value) }
        try Output.emit(report, json: json) {
            var lines = ["machine: \(report.machine)", "latency (median, p95):"]
            for latency in report.latencies {
                lines.append("  \(latency.name.padding(toLength: 46, withPad: " ", startingAt: 0)) \(format(latency.medianMs)) ms  \(format(latency.p95Ms)) ms  (\(latency.samples))")
            }
            if let ratio = report.statusRatioVsCurl { lines.append("  ratio status: Swift client / curl          \(format(ratio))") }
            lines.append("  ratio status: Swift client / python3       \(format(report.statusRatioVsPython))")
            lines.append("  ratio tag read: API / spawned CLI          \(format(report.tagReadRatioVsSpawnedCLI))")
            if let ratio = report.frontStatusRatioVsCurl { lines.append("  ratio status: front / curl                 \(format(ratio))") }
            if let ratio = report.frontStatusRatioVsWholeCLI { lines.append("  ratio status: front / whole CLI            \(format(ratio))") }
            lines.append("daemon under fix-event clients (\(seconds) s each):")
            for load in report.loads {
                lines.append("  \(load.watchers) client(s): CPU \(format(load.daemonCPUPercent)) %, RSS \(load.daemonRSSKiB) KiB, \(load.fixesReceived) fixes delivered")
            }
            lines.append("daemon RSS: \(report.daemonRSSKiBAtStart) KiB at start, \(report.daemonRSSKiBAtEnd) KiB at the end")
            return lines.joined(separator: "\n")
        }
    }

    private func waitForDaemon(_ api: FieldHALClient) async throws {
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            if (try? await api.status()) != nil { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw FieldHALError(.unavailable, subject: "bench api", detail: "the daemon did not serve its API within 20 s")
    }

    /// Milliseconds per call, `count` calls one after another.
    private func timed(_ count: Int, _ call: () async throws -> Void) async throws -> [Double] {
        var values: [Double] = []
        for _ in 0..<count {
            let start = ContinuousClock.now
            try await call()
            values.append((ContinuousClock.now - start).milliseconds)
        }
        return values
    }

    /// Milliseconds per process, spawn to exit, each required to succeed.
    private func spawned(_ count: Int, _ path: String, _ arguments: [String], anyStatus: Bool = false) async throws -> [Double] {
        try await timed(count) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: path)
            process.arguments = arguments
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            // The termination handler runs on the child's SIGCHLD; waitUntilExit polls its run
            // loop and rounds every run up to tens of milliseconds.
            try await withCheckedThrowingContinuation { (done: CheckedContinuation<Void, any Error>) in
                process.terminationHandler = { _ in done.resume() }
                do { try process.run() } catch {
                    process.terminationHandler = nil
                    done.resume(throwing: error)
                }
            }
            guard anyStatus || process.terminationStatus == 0 else {
                throw FieldHALError(.io, subject: "bench api", detail: "\(path) \(arguments.joined(separator: " ")) exited \(process.terminationStatus)")
            }
        }
    }

    /// The daemon's CPU share and memory while `count` clients follow fix events.
    private func load(_ count: Int, api: FieldHALClient, daemon pid: Int32) async throws -> Load {
        let received = LockedValue(0)
        let clients = (0..<count).map { _ in
            Task {
                for try await event in api.events([.fix]) {
                    if case .fix = event { received.withLock { $0 += 1 } }
                }
            }
        }
        try await Task.sleep(for: .seconds(1))  // every client connected and subscribed
        received.withLock { $0 = 0 }
        let cpuBefore = GPSBench.cpuSeconds(of: pid)
        let start = ContinuousClock.now
        try await Task.sleep(for: .seconds(seconds))
        let cpu = GPSBench.cpuSeconds(of: pid) - cpuBefore
        let elapsed = (ContinuousClock.now - start).milliseconds / 1000
        let rss = Self.rssKiB(of: pid)
        for client in clients { client.cancel() }
        return Load(watchers: count, daemonCPUPercent: cpu / elapsed * 100, daemonRSSKiB: rss, fixesReceived: received.value)
    }

    /// The front beside this binary: `fieldhal-front` in a build directory, `bin/fieldhal`
    /// for an installed `libexec/fieldhal/fieldhal`.
    static func front() -> String? {
        guard let me = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else { return nil }
        let directory = (me as NSString).deletingLastPathComponent
        let installed = ((directory as NSString).deletingLastPathComponent as NSString).deletingLastPathComponent + "/bin/fieldhal"
        return [directory + "/fieldhal-front", installed].first { FileManager.default.isExecutableFile(atPath: $0) && $0 != me }
    }

    static func rssKiB(of pid: Int32) -> Int {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }) else { return -1 }
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? -1
    }
}

extension APIBench.Latency {
    init(_ name: String, _ values: [Double]) {
        self.init(name: name, samples: values.count, medianMs: GPSBench.percentile(values, 0.5), p95Ms: GPSBench.percentile(values, 0.95))
    }
}

extension Duration {
    fileprivate var milliseconds: Double {
        Double(components.seconds) * 1000 + Double(components.attoseconds) / 1e15
    }
}
