import ArgumentParser
import FieldHAL
import FieldHALAPI
import FieldHALCommandLine
import FieldHALComposition
import FieldHALSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `fieldhal-bench receivers`: GNSS receivers side by side on one gpsd, each a device of the
/// daemon's kit, followed through its event stream: each fix's latency with 4 receivers
/// against 1 in the same run. Issue 43's figure: with 4 receivers, the median within 1.1×.
struct ReceiversBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "receivers",
        abstract: "Fix latency through the daemon with 1 and 4 receivers on one gpsd.",
        discussion: """
        Needs gpsd and gpsd-clients (gpsfake); no receiver. For each count, gpsfake feeds one \
        generated NMEA log per receiver, each through a pty of its own, to one private gpsd, \
        each receiver as fast as the one alone (gpsfake interleaves the logs, so it waits \
        --cycle divided by the count between sentences): four receivers are four times the fixes; \
        `fieldhal run` configures every receiver as a device of its own ([gps.r0], [gps.r1], …) \
        and one client follows all of them on /v1/events. A fix's latency runs from the moment \
        this program's own gpsd connection (watching every receiver, as gpspipe -w does) reads \
        the report to the moment the event stream hands the client the same receiver's fix. \
        The floor beside it: one wake-up of a thread blocked on a socket, the least any \
        hand-over costs.
        """)

    @Option(help: "Receiver counts to measure, comma-separated; the first is the baseline.") var counts = "1,4"
    @Option(help: "Epochs (one TPV report each) in each receiver's log.") var epochs = 200
    @Option(help: "Seconds between one receiver's sentences (3 sentences an epoch).") var cycle = 0.02
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        try await reportingFailures { try await measure() }
    }

    struct Row: Encodable {
        var receivers: Int
        var samples: Int
        /// Fixes a second through the daemon, all receivers together.
        var fixesPerSecond: Double
        var medianMs, p95Ms: Double
        /// Against the first count's (one receiver's): the median's and the p95's multiple.
        var medianRatio, p95Ratio: Double
        /// The daemon's CPU seconds per wall second while it served them.
        var daemonCPUs: Double
    }

    struct Report: Encodable {
        var machine: String
        var cpus: Int
        var wakeUpMedianMs: Double
        var rows: [Row]
    }

    func measure() async throws {
        let sizes = counts.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !sizes.isEmpty, sizes.allSatisfy({ (1...16).contains($0) }), epochs >= 20, cycle > 0 else {
            throw FieldHALError(.invalidArgument, subject: "bench receivers",
                                detail: "--counts must be 1 to 16 receivers, --epochs at least 20, --cycle positive")
        }
        let setup = try GPSBenchSetup.make("bench receivers", tools: ["/usr/bin/gpsfake"], epochs: epochs)
        defer { setup.remove() }
        let wakeUp = try await WakeUpFloor.measure()
        var rows: [Row] = []
        for count in sizes {
            var row = try await measure(receivers: count, log: setup.log, directory: setup.directory + "/\(count)")
            if let first = rows.first {
                row.medianRatio = row.medianMs / first.medianMs
                row.p95Ratio = row.p95Ms / first.p95Ms
            }
            rows.append(row)
        }
        let report = Report(machine: GPSBench.machine, cpus: ProcessInfo.processInfo.activeProcessorCount,
                            wakeUpMedianMs: wakeUp.medianMs, rows: rows)
        try Output.emit(report, json: json) {
            var lines = ["machine: \(report.machine)",
                         "fix latency, gpsd's report to the event stream's client (floor: one wake-up, \(format(wakeUp.medianMs)) ms):"]
            for row in rows {
                lines.append("  \(row.receivers) receiver\(row.receivers == 1 ? " " : "s")  \(row.samples) fixes, \(format(row.fixesPerSecond))/s"
                             + "  median \(format(row.medianMs)) ms  p95 \(format(row.p95Ms)) ms"
                             + "  ×\(format(row.medianRatio)) median, ×\(format(row.p95Ratio)) p95  daemon \(format(row.daemonCPUs)) CPUs")
            }
            return lines.joined(separator: "\n")
        }
    }

    private func format(_ value: Double) -> String { String(format: "%.3f", value) }

    /// gpsfake with `count` receivers on one gpsd, each feeding at the single one's rate
    /// (gpsfake feeds the logs' sentences in turn, one every -c).
    private func startFeed(receivers count: Int, log: String) async throws -> (BenchProcess, Int, GpsdWatcher, [String]) {
        try await GpsdFeed.start(["-1", "-c", String(cycle / Double(count))], logs: Array(repeating: log, count: count), subject: "bench receivers")
    }

    private func measure(receivers count: Int, log: String, directory: String) async throws -> Row {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let (feed, port, reference, paths) = try await startFeed(receivers: count, log: log)
        defer { feed.kill(); reference.stop() }

        let names = paths.indices.map { "r\($0)" }
        let sections = zip(names, paths).map { name, path in
            "[gps.\(name)]\nplugin = \"gpsd\"\nhost = \"127.0.0.1\"\nport = \(port)\ndevice = \"\(path)\"\n"
        }.joined(separator: "\n")
        let daemon = try await APIFixBench.startDaemon(sections: sections, directory: directory)
        defer { daemon.process.kill() }
        let pathOf = Dictionary(uniqueKeysWithValues: zip(names, paths))
        let arrivals = LockedValue<[String: Double]>([:])
        let following = daemon.api.follow([.fix], devices: names, { event in
            guard case .fix(let fix, let device) = event, let device, let path = pathOf[device] else { return }
            let now = Date().timeIntervalSince1970
            let key = path + "|" + TPVKey.of(fix.time)
            arrivals.withLock { $0[key] = $0[key] ?? now }
        }, end: { _ in })
        defer { following.cancel() }

        let cpuBefore = GPSBench.cpuSeconds(of: daemon.process.pid)
        let start = ContinuousClock.now
        try await reference.waitForTheFeedToEnd(within: .seconds(Double(epochs * 3) * cycle + 60))
        let wall = (ContinuousClock.now - start).seconds
        let daemonCPU = GPSBench.cpuSeconds(of: daemon.process.pid) - cpuBefore
        following.cancel()

        let stamps = reference.stamps, seen = arrivals.value
        let latencies = seen.compactMap { key, arrived in stamps[key].map { (arrived - $0) * 1000 } }
        guard latencies.count >= count * epochs / 4 else {
            throw FieldHALError(.timeout, subject: "bench receivers",
                                detail: "only \(latencies.count) fixes of \(count) receivers × \(epochs) epochs reached the client",
                                advice: "the daemon's log: \(directory)/daemon.log (kept only while the bench runs); try a longer --cycle")
        }
        return Row(receivers: count, samples: latencies.count, fixesPerSecond: Double(latencies.count) / wall,
                   medianMs: GPSBench.percentile(latencies, 0.5), p95Ms: GPSBench.percentile(latencies, 0.95),
                   medianRatio: 1, p95Ratio: 1, daemonCPUs: daemonCPU / wall)
    }
}

/// gpsfake started so that its gpsd surely reports: under load gpsfake sometimes leaves its
/// gpsd without a pty it was to hand over (the tests' `GPSFake` says the same), and such a
/// gpsd listens but never reports. So each start is checked by the benchmark's own
/// connection, which must see a report from every receiver within 15 s; up to three fresh
/// starts. (CI saw a load phase of `bench api-gps` wait in vain for fixes, 2026-11-29.)
enum GpsdFeed {
    /// The feed, its port, the connection that watched it start (stamping from then on) and
    /// the receivers' paths, sorted.
    static func start(_ arguments: [String], logs: [String], subject: String) async throws -> (BenchProcess, Int, GpsdWatcher, [String]) {
        var lastError: any Error = FieldHALError(.unavailable, subject: subject, detail: "gpsfake did not start")
        for _ in 0..<3 {
            let port = try TCP.freePort()
            let feed = try BenchProcess.start("/usr/bin/gpsfake", ["-p", "-q"] + arguments + ["-P", String(port)] + logs)
            do {
                try await GPSBench.waitForListener(port: port)
                let watcher = try GpsdWatcher(port: port)
                do {
                    return (feed, port, watcher, try await watcher.waitForReports(from: logs.count, within: .seconds(15), subject: subject))
                } catch {
                    watcher.stop()
                    throw error
                }
            } catch {
                lastError = error
                feed.kill()
            }
        }
        throw lastError
    }
}

/// The benchmark's own gpsd client, watching every receiver as gpspipe -w does: it stamps
/// each TPV report (by receiver and time) the moment it reads it, and learns the receivers'
/// paths from gpsd's DEVICES and TPV reports. One thread, blocking reads.
final class GpsdWatcher: @unchecked Sendable {
    private let socket: Int32
    private let lock = NSLock()
    private var seenPaths: [String] = []
    /// The receivers a TPV report has come from.
    private var reportingPaths: Set<String> = []
    private var stamped: [String: Double] = [:]
    private var lastReport = ContinuousClock.now
    private var ended = false

    init(port: Int) throws {
        socket = try TCP.connect(port: port)
        let watch = #"?WATCH={"enable":true,"json":true};"# + "\n"
        _ = watch.withCString { send(socket, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
        Thread { [self] in read() }.start()
    }

    /// TPV arrival times (Unix seconds) by `path|time`.
    var stamps: [String: Double] { lock.withLock { stamped } }

    func stop() { shutdown(socket, Int32(SHUT_RDWR)) }

    /// The receivers' paths, sorted, once a TPV report has come from `count` of them.
    func waitForReports(from count: Int, within limit: Duration, subject: String) async throws -> [String] {
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            let paths = lock.withLock { reportingPaths }
            if paths.count >= count { return paths.sorted() }
            if lock.withLock({ ended }) { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        let (named, reporting) = lock.withLock { (seenPaths.count, reportingPaths.count) }
        throw FieldHALError(.timeout, subject: subject, detail: "gpsd named \(named) and reported from \(reporting) of \(count) receivers within \(limit)",
                            advice: "gpsfake hands gpsd its ptys one by one; run it by hand: gpsfake -P PORT LOG LOG …")
    }

    /// Returns when gpsd's reports stop: the connection ends, or nothing came for 2 s after
    /// some had (gpsfake plays each log once), or `limit` passes.
    func waitForTheFeedToEnd(within limit: Duration) async throws {
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
            let (done, quiet, any) = lock.withLock { (ended, ContinuousClock.now - lastReport, !stamped.isEmpty) }
            if done || (any && quiet > .seconds(2)) { return }
        }
    }

    private func read() {
        var buffer = [UInt8](repeating: 0, count: 65536)
        var pending: [UInt8] = []
        while true {
            guard case .success(let got) = SystemCall.attempt({ recv(socket, &buffer, buffer.count, 0) }), got > 0 else { break }
            pending += buffer[0..<got]
            while let newline = pending.firstIndex(of: 10) {
                let line = String(decoding: pending[..<newline], as: UTF8.self)
                pending.removeSubrange(...newline)
                let now = Date().timeIntervalSince1970
                if let time = TPVKey.of(line), let path = Self.field("device", in: line) {
                    lock.withLock {
                        stamped[path + "|" + time] = stamped[path + "|" + time] ?? now
                        lastReport = .now
                        reportingPaths.insert(path)
                        if !seenPaths.contains(path) { seenPaths.append(path) }
                    }
                } else if line.contains(#""class":"DEVICES""#) {
                    let paths = Self.all("path", in: line)
                    lock.withLock { for path in paths where !seenPaths.contains(path) { seenPaths.append(path) } }
                }
            }
        }
        lock.withLock { ended = true }
        close(socket)
    }

    /// The first `"name":"value"` string in a gpsd report.
    static func field(_ name: String, in line: String) -> String? { all(name, in: line).first }

    static func all(_ name: String, in line: String) -> [String] {
        var found: [String] = []
        var rest = line[...]
        while let key = rest.range(of: "\"\(name)\":\"") {
            guard let end = rest[key.upperBound...].firstIndex(of: "\"") else { break }
            found.append(String(rest[key.upperBound..<end]))
            rest = rest[end...]
        }
        return found
    }
}
