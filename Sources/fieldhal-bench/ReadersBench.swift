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

/// `fieldhal-bench readers`: a lab bench of 1, 2 and 4 readers read at once, each through
/// the libnfc plugin on a PN532 emulator of its own (libnfc's pn532_uart driver on a pty),
/// against one reader alone in the same run. Issue 43's figures: with 4 readers, the
/// aggregate reads per second at least 3.5× one reader's, each read's median within 1.2×.
struct ReadersBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "readers",
        abstract: "Reads per second and read latency with 1, 2 and 4 readers read at once, vs one reader alone.",
        discussion: """
        Needs python3 and libnfc; no reader. Each reader is the repository's PN532 emulator \
        (Tests/TestSupport/Peers/pn532-emulator.py) serving an NTAG213 on a pty, every byte paced as a \
        UART at --baud would (a real PN532's 115200 by default; 0: unpaced, so that only the CPUs limit), \
        opened by the libnfc plugin on a device thread of its own. For each count, every reader reads its tag again and again \
        for --seconds; a read is readTag's wall time. Beside the figures: the CPU time the emulators and \
        this process used, against the machine's, since a pty emulator is a process that also needs a CPU \
        (the physical floor on a small machine).
        """)

    @Option(help: "Reader counts to measure, comma-separated.") var counts = "1,2,4"
    @Option(help: "Seconds of reading per count.") var seconds = 10.0
    @Option(help: "The emulated chips' UART speed, bits per second (0: unpaced).") var baud = 115_200
    @Option(help: "The PN532 emulator script.") var emulator = "Tests/TestSupport/Peers/pn532-emulator.py"
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        try await reportingFailures { try await measure() }
    }

    struct Row: Encodable {
        var readers: Int
        var reads: Int
        var readsPerSecond, medianMs, p95Ms: Double
        /// Against one reader alone: the aggregate rate's multiple, and the median's.
        var throughputRatio, medianRatio: Double
        /// CPU seconds per wall second: the emulators', this process's, and the whole machine's.
        var emulatorCPUs, benchCPUs, machineCPUs: Double
    }

    struct Report: Encodable {
        var machine: String
        var cpus: Int
        var baud: Int
        var rows: [Row]
    }

    func measure() async throws {
        guard let libnfc = BuiltinPlugins.registry.plugin(named: "libnfc") else {
            throw FieldHALError(.unavailable, subject: "bench readers", detail: "this build has no NFC trait")
        }
        guard FileManager.default.fileExists(atPath: emulator) else {
            throw FieldHALError(.unavailable, subject: "bench readers", detail: "no PN532 emulator at \(emulator)",
                                advice: "run from the repository's root or pass --emulator PATH")
        }
        let sizes = counts.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !sizes.isEmpty, sizes.allSatisfy({ (1...16).contains($0) }), seconds > 0, baud >= 0 else {
            throw FieldHALError(.invalidArgument, subject: "bench readers", detail: "--counts takes 1 to 16 readers each, --seconds a positive time")
        }
        var rows: [Row] = []
        var alone: (rate: Double, median: Double)?
        for size in sizes {
            var row = try await measure(size, libnfc)
            if alone == nil, size == 1 { alone = (row.readsPerSecond, row.medianMs) }
            if let alone {
                row.throughputRatio = row.readsPerSecond / alone.rate
                row.medianRatio = row.medianMs / alone.median
            }
            rows.append(row)
            if !json {
                Output.streamLine(String(format: "%d reader(s): %d reads, %.1f reads/s, median %.2f ms, p95 %.2f ms; CPUs: emulators %.2f, bench %.2f, machine %.2f",
                                         row.readers, row.reads, row.readsPerSecond, row.medianMs, row.p95Ms,
                                         row.emulatorCPUs, row.benchCPUs, row.machineCPUs))
            }
        }
        let report = Report(machine: GPSBench.machine, cpus: ProcessInfo.processInfo.activeProcessorCount, baud: baud, rows: rows)
        try Output.emit(report, json: json) {
            (["machine: \(report.machine); chips at \(report.baud == 0 ? "no pacing" : "\(report.baud) baud")",
              "against one reader alone (throughput ×, median ×):"]
                + rows.map { String(format: "  %d reader(s): throughput %.2f×, median %.2f×", $0.readers, $0.throughputRatio, $0.medianRatio) })
                .joined(separator: "\n")
        }
    }

    /// `size` emulators, one reader each, all reading at once for `seconds`.
    private func measure(_ size: Int, _ libnfc: PluginDescriptor) async throws -> Row {
        let directory = try ScratchDirectory.make("fieldhal-bench-readers")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var chips: [BenchProcess] = []
        defer { for chip in chips { chip.kill() } }
        var connstrings: [String] = []
        for index in 0..<size {
            let events = directory + "/events-\(index).jsonl"
            chips.append(try BenchProcess.start("/usr/bin/python3", [emulator, "--text", "bench reader \(index)", "--baud", "\(baud)"],
                                                output: events))
            connstrings.append("pn532_uart:" + (try await NFCBench.firstLine(of: events)))
        }
        let context = PluginContext(configDirectory: "/", stateDirectory: NSTemporaryDirectory())
        var readers: [any NFCReader] = []
        for connstring in connstrings {
            guard case .nfcReader(let reader) = try await libnfc.open(.nfcReader, PluginParameters(["connstring": .string(connstring)]), context) else {
                throw FieldHALError(.unavailable, subject: "bench readers", detail: "the libnfc plugin opened no reader")
            }
            readers.append(reader)
        }
        // One read each first: the emulators and libnfc warmed, as a bench would be.
        for reader in readers { _ = try await reader.readTag(timeout: .seconds(5)) }
        let pids = chips.map(\.pid) + [getpid()]
        let before = CPUTimes.now(pids)
        let clock = ContinuousClock()
        let end = clock.now + .seconds(seconds)
        let latencies = try await withThrowingTaskGroup(of: [Double].self) { group in
            for reader in readers {
                group.addTask {
                    var taken: [Double] = []
                    while clock.now < end {
                        let start = clock.now
                        let tag = try await reader.readTag(timeout: .seconds(5))
                        guard tag.ndef?.records.isEmpty == false else {
                            throw FieldHALError(.protocolError, subject: "bench readers", detail: "a read returned no NDEF message")
                        }
                        let elapsed = clock.now - start
                        taken.append(Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15)
                    }
                    return taken
                }
            }
            var all: [Double] = []
            for try await taken in group { all += taken }
            return all
        }
        let after = CPUTimes.now(pids)
        for reader in readers { await reader.close() }
        let wall = seconds
        return Row(readers: size, reads: latencies.count, readsPerSecond: Double(latencies.count) / wall,
                   medianMs: GPSBench.percentile(latencies, 0.5), p95Ms: GPSBench.percentile(latencies, 0.95),
                   throughputRatio: 1, medianRatio: 1,
                   emulatorCPUs: (after.processes.dropLast().reduce(0, +) - before.processes.dropLast().reduce(0, +)) / wall,
                   benchCPUs: ((after.processes.last ?? 0) - (before.processes.last ?? 0)) / wall,
                   machineCPUs: (after.machine - before.machine) / wall)
    }
}

/// CPU seconds from /proc: each process's user and system time, and the machine's busy time.
struct CPUTimes {
    var processes: [Double]
    var machine: Double

    static func now(_ pids: [Int32]) -> CPUTimes {
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        let processes = pids.map { pid -> Double in
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { return 0 }
            // After the command's closing parenthesis: state is field 3, utime 14, stime 15.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
            return (user + system) / ticks
        }
        var machine = 0.0
        if let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
           let line = stat.split(separator: "\n").first(where: { $0.hasPrefix("cpu ") }) {
            // user nice system idle iowait irq softirq steal: busy is all but idle and iowait.
            let values = line.split(separator: " ").dropFirst().compactMap { Double($0) }
            if values.count >= 8 { machine = (values.reduce(0, +) - values[3] - values[4]) / ticks }
        }
        return CPUTimes(processes: processes, machine: machine)
    }
}
