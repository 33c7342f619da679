import ArgumentParser
import FieldHAL
import FieldHALCommandLine
import FieldHALComposition
import FieldHALPlugins
import FieldHALSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `fieldhal-bench gps`: how long a gpsd report takes to reach a Swift consumer through the
/// gpsd plugin, next to gpspipe reading the very same reports, and what watching costs.
struct GPSBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gps",
        abstract: "Latency from gpsd to a FieldHAL consumer vs gpspipe -w, and idle CPU while watching.",
        discussion: """
        Needs gpsd and gpsd-clients (gpsfake, gpspipe); no receiver. A private gpsd replays a \
        generated NMEA log. A relay stamps each report as it hands it to both clients at once, \
        so both latencies are measured from the same instant. Then both watch a 1 Hz feed \
        and their CPU time and peak memory are compared.
        """)

    @Option(help: "Epochs (one TPV report each) in the latency phase.") var epochs = 300
    @Option(help: "Seconds gpsfake waits between sentences in the latency phase (3 sentences an epoch).") var cycle = 0.01
    @Option(help: "Seconds of the idle-watch phase.") var idleSeconds = 10.0
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        try await reportingFailures { try await measure() }
    }

    struct Report: Encodable {
        struct Latency: Encodable { var samples: Int; var fieldhalMedianMs, fieldhalP95Ms, gpspipeMedianMs, gpspipeP95Ms, ratio: Double }
        struct Idle: Encodable { var seconds: Double; var fixes: Int; var fieldhalCPUPercent, gpspipeCPUPercent: Double; var fieldhalPeakRSSKiB, gpspipePeakRSSKiB: Int }
        var machine: String
        var latency: Latency
        var idle: Idle
    }

    func measure() async throws {
        let setup = try GPSBenchSetup.make("bench gps", tools: ["/usr/bin/gpsfake", "/usr/bin/gpspipe"], epochs: epochs)
        defer { setup.remove() }
        let (gpsd, directory, log) = (setup.gpsd, setup.directory, setup.log)

        let latency = try await measureLatency(gpsd, log: log, directory: directory)
        let idle = try await measureIdle(gpsd, log: log, directory: directory)
        let report = Report(machine: Self.machine, latency: latency, idle: idle)
        try Output.emit(report, json: json) {
            """
            machine: \(report.machine)
            latency, gpsd report to consumer (\(latency.samples) reports):
              fieldhal gpsd plugin  median \(format(latency.fieldhalMedianMs)) ms  p95 \(format(latency.fieldhalP95Ms)) ms
              gpspipe -w            median \(format(latency.gpspipeMedianMs)) ms  p95 \(format(latency.gpspipeP95Ms)) ms
              ratio (fieldhal / gpspipe medians)  \(format(latency.ratio))
            watching a 1 Hz feed for \(format(idle.seconds)) s (\(idle.fixes) fixes):
              CPU   fieldhal \(format(idle.fieldhalCPUPercent)) %   gpspipe \(format(idle.gpspipeCPUPercent)) %
              peak RSS  fieldhal \(idle.fieldhalPeakRSSKiB) KiB   gpspipe \(idle.gpspipePeakRSSKiB) KiB
            """
        }
    }

    private func format(_ value: Double) -> String { String(format: "%.3f", value) }

    // MARK: - Phase 1: latency

    private func measureLatency(_ gpsd: PluginDescriptor, log: String, directory: String) async throws -> Report.Latency {
        let feed = try BenchProcess.start("/usr/bin/gpsfake", ["-1", "-p", "-q", "-c", String(cycle), "-P", String(try TCP.freePort()), log])
        defer { feed.kill() }
        let gpsdPort = Int(feed.arguments[feed.arguments.firstIndex(of: "-P")! + 1])!
        try await Self.waitForListener(port: gpsdPort)
        let relay = try LineRelay(upstreamPort: gpsdPort)
        relay.start()

        let pipeOutput = directory + "/gpspipe.out"
        // Line-buffered through stdbuf, so every stamped line is on disk when gpspipe is killed.
        let pipe = try BenchProcess.start("/usr/bin/stdbuf", ["-oL", "/usr/bin/gpspipe", "-w", "-u", "-u", "127.0.0.1:\(relay.port)"],
                                          output: pipeOutput)
        defer { pipe.kill() }
        let provider = try await Self.openLocation(gpsd, port: relay.port)
        let received = LockedValue<[String: Double]>([:])
        let consumer = Task {
            for try await fix in provider.watch() {
                let now = Date().timeIntervalSince1970
                let key = TPVKey.of(fix.time)
                received.withLock { $0[key] = $0[key] ?? now }
            }
        }
        try await relay.waitForTheFeedToEnd(within: .seconds(Double(epochs) * cycle * 3 + 60))
        consumer.cancel()
        await provider.close()
        pipe.kill()

        let forwarded = relay.forwardTimes
        let piped = Self.parseGpspipe(try String(contentsOfFile: pipeOutput, encoding: .utf8))
        let ours = received.value
        var fieldhal: [Double] = []
        var gpspipe: [Double] = []
        for (key, sent) in forwarded {
            guard let mine = ours[key], let theirs = piped[key] else { continue }
            fieldhal.append((mine - sent) * 1000)
            gpspipe.append((theirs - sent) * 1000)
        }
        guard fieldhal.count >= max(10, epochs / 2) else {
            throw FieldHALError(.timeout, subject: "bench gps", detail: "only \(fieldhal.count) of \(epochs) reports were seen by both clients")
        }
        let ourMedian = Self.percentile(fieldhal, 0.5), theirMedian = Self.percentile(gpspipe, 0.5)
        return .init(samples: fieldhal.count, fieldhalMedianMs: ourMedian, fieldhalP95Ms: Self.percentile(fieldhal, 0.95),
                     gpspipeMedianMs: theirMedian, gpspipeP95Ms: Self.percentile(gpspipe, 0.95),
                     ratio: theirMedian > 0 ? ourMedian / theirMedian : .nan)
    }

    // MARK: - Phase 2: watching at 1 Hz

    private func measureIdle(_ gpsd: PluginDescriptor, log: String, directory: String) async throws -> Report.Idle {
        let port = try TCP.freePort()
        // Three sentences an epoch, a third of a second apart: one report a second, like a receiver.
        let feed = try BenchProcess.start("/usr/bin/gpsfake", ["-p", "-q", "-c", "0.333", "-P", String(port), log])
        defer { feed.kill() }
        try await Self.waitForListener(port: port)
        let pipe = try BenchProcess.start("/usr/bin/gpspipe", ["-w", "-o", "/dev/null", "127.0.0.1:\(port)"])
        defer { pipe.kill() }
        let provider = try await Self.openLocation(gpsd, port: port)
        let fixes = LockedValue(0)
        let consumer = Task { for try await _ in provider.watch() { fixes.withLock { $0 += 1 } } }
        try await Task.sleep(for: .seconds(2))  // settle: connections made, first reports in

        let ourStart = Self.processCPUSeconds(), theirStart = Self.cpuSeconds(of: pipe.pid)
        let fixesAtStart = fixes.value
        let wallStart = ContinuousClock.now
        try await Task.sleep(for: .seconds(idleSeconds))
        let wall = (ContinuousClock.now - wallStart).seconds
        let ourCPU = Self.processCPUSeconds() - ourStart, theirCPU = Self.cpuSeconds(of: pipe.pid) - theirStart
        let counted = fixes.value - fixesAtStart
        let theirPeak = Self.peakRSSKiB(of: "\(pipe.pid)")
        consumer.cancel()
        await provider.close()
        return .init(seconds: wall, fixes: counted, fieldhalCPUPercent: ourCPU / wall * 100, gpspipeCPUPercent: theirCPU / wall * 100,
                     fieldhalPeakRSSKiB: Self.peakRSSKiB(of: "self"), gpspipePeakRSSKiB: theirPeak)
    }

    // MARK: - Helpers

    static func openLocation(_ gpsd: PluginDescriptor, port: Int) async throws -> any LocationProvider {
        let context = PluginContext(configDirectory: "/", stateDirectory: NSTemporaryDirectory())
        guard case .location(let provider) = try await gpsd.open(.location, PluginParameters(["port": .integer(port)]), context) else {
            throw FieldHALError(.unavailable, subject: "bench gps", detail: "the gpsd plugin gave no location provider")
        }
        return provider
    }

    static func waitForListener(port: Int) async throws {
        for _ in 0..<300 {
            if let descriptor = try? TCP.connect(port: port) { close(descriptor); return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw FieldHALError(.timeout, subject: "bench gps", detail: "gpsfake's gpsd did not listen on port \(port) within 15 s")
    }

    /// `2026-11-22 05:38:35 1795325915.975297: {json}` lines (gpspipe -u -u) → receipt
    /// time by TPV key.
    static func parseGpspipe(_ text: String) -> [String: Double] {
        var times: [String: Double] = [:]
        for line in text.split(whereSeparator: \.isNewline) {  // gpsd ends lines with CR LF
            guard let separator = line.range(of: ": {"),
                  let stamp = line[..<separator.lowerBound].split(separator: " ").last.flatMap({ Double($0) }),
                  let key = TPVKey.of(String(line[separator.upperBound...])) else { continue }
            times[key] = times[key] ?? stamp
        }
        return times
    }

    static func percentile(_ values: [Double], _ fraction: Double) -> Double {
        let sorted = values.sorted()
        return sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * fraction).rounded()))]
    }

    static func processCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }

    /// utime + stime of another process, from /proc/PID/stat.
    static func cpuSeconds(of pid: Int32) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let afterName = stat.lastIndex(of: ")") else { return .nan }
        let fields = stat[stat.index(after: afterName)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return .nan }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    static func peakRSSKiB(of pid: String) -> Int { statusKiB("VmHWM", of: pid) }

    /// A field of /proc/PID/status in KiB (`VmHWM`: peak RSS, `VmRSS`: RSS now); -1 if absent.
    static func statusKiB(_ field: String, of pid: String) -> Int {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") }) else { return -1 }
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? -1
    }

    static var machine: String {
        var name = utsname()
        uname(&name)
        let release = withUnsafeBytes(of: name.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let cpu = ((try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? "")
            .split(separator: "\n").first { $0.hasPrefix("model name") }?.split(separator: ":").last?
            .trimmingCharacters(in: .whitespaces) ?? "unknown CPU"
        return "\(cpu), \(ProcessInfo.processInfo.activeProcessorCount) CPUs, Linux \(release)"
    }
}

/// What every gpsd benchmark starts from: the gpsd plugin, gpsd's tools, and a scratch
/// directory holding a generated NMEA log of `epochs` epochs.
struct GPSBenchSetup {
    let gpsd: PluginDescriptor
    let directory: String
    let log: String

    static func make(_ subject: String, tools: [String], epochs: Int) throws -> GPSBenchSetup {
        guard let gpsd = BuiltinPlugins.registry.plugin(named: "gpsd") else {
            throw FieldHALError(.unavailable, subject: subject, detail: "this fieldhal was built without the GPS trait")
        }
        for tool in tools where !FileManager.default.isExecutableFile(atPath: tool) {
            throw FieldHALError(.unavailable, subject: subject, detail: "\(tool) is missing", advice: "apt install gpsd gpsd-clients")
        }
        let directory = try ScratchDirectory.make("fieldhal-" + subject.replacingOccurrences(of: " ", with: "-"))
        let log = directory + "/bench.nmea"
        try BenchNMEA.log(epochs: epochs).write(toFile: log, atomically: true, encoding: .utf8)
        return GPSBenchSetup(gpsd: gpsd, directory: directory, log: log)
    }

    func remove() { try? FileManager.default.removeItem(atPath: directory) }
}

/// A child process for the benchmark, killed with SIGKILL together with its children
/// (gpsfake's gpsd).
struct BenchProcess {
    let process: Process
    let arguments: [String]
    var pid: Int32 { process.processIdentifier }

    static func start(_ path: String, _ arguments: [String], output: String? = nil) throws -> BenchProcess {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        if let output {
            guard FileManager.default.createFile(atPath: output, contents: nil), let handle = FileHandle(forWritingAtPath: output) else {
                throw FieldHALError(.io, subject: "bench", detail: "cannot create \(output)")
            }
            process.standardOutput = handle
        } else {
            process.standardOutput = FileHandle.nullDevice
        }
        process.standardError = FileHandle.nullDevice
        try process.run()
        return BenchProcess(process: process, arguments: arguments)
    }

    func kill() {
        guard process.isRunning else { return }
        let children = (try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8)) ?? ""
        for child in children.split(separator: " ").compactMap({ Int32($0) }) { Glibc.kill(child, SIGKILL) }
        Glibc.kill(pid, SIGKILL)
        process.waitUntilExit()
    }
}

/// A generated NMEA log for the benchmark: a 3D fix moving north, one epoch a second,
/// each with its own time so every report can be matched across observers.
enum BenchNMEA {
    static func log(epochs: Int) -> String {
        var lines: [String] = []
        for epoch in 0..<epochs {
            let hours = 10 + epoch / 3600, minutes = (epoch / 60) % 60, seconds = epoch % 60
            let time = String(format: "%02d%02d%02d.00", hours, minutes, seconds)
            let latitudeMinutes = 31.2 + Double(epoch) * 0.0006
            let latitude = String(format: "52%07.4f", latitudeMinutes)
            lines.append(sentence("GPGGA,\(time),\(latitude),N,01324.3000,E,1,08,0.9,34.5,M,39.5,M,,"))
            lines.append(sentence("GPGSA,A,3,01,03,06,11,14,17,19,22,,,,,1.4,0.9,1.3"))
            lines.append(sentence("GPRMC,\(time),A,\(latitude),N,01324.3000,E,9.72,0.0,150326,,,A"))
        }
        return lines.joined(separator: "\r\n") + "\r\n"
    }

    static func sentence(_ body: String) -> String {
        "$\(body)*\(String(format: "%02X", body.utf8.reduce(0, ^)))"
    }
}
