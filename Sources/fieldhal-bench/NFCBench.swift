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

/// `fieldhal-bench nfc`: from a tag entering the field to its NDEF message decoded in
/// Swift, next to libnfc's `nfc-mfultralight r` reading the same tag from the same PN532
/// emulator, both through libnfc's pn532_uart driver.
struct NFCBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nfc",
        abstract: "Tag-in-field to NDEF-decoded latency through the libnfc plugin vs nfc-mfultralight r.",
        discussion: """
        Needs python3, libnfc-bin and libnfc-examples; no reader. The PN532 emulator from the \
        repository (Tests/TestSupport/Peers/pn532-emulator.py) serves an NTAG213 on a pty and \
        stamps the instant each reader selects the tag (CLOCK_MONOTONIC): that is when the tag \
        enters the field for both clients. FieldHAL's sample ends when readTag returns the \
        decoded message; nfc-mfultralight's when the process has written its dump and exited \
        (it reads all 45 pages; FieldHAL reads the capability container and the NDEF TLV only).
        """)

    @Option(help: "Reads through the libnfc plugin.") var samples = 100
    @Option(help: "Runs of nfc-mfultralight r.") var toolRuns = 30
    @Option(help: "The PN532 emulator script.") var emulator = "Tests/TestSupport/Peers/pn532-emulator.py"
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        try await reportingFailures { try await measure() }
    }

    struct Report: Encodable {
        var machine: String
        var fieldhalSamples, toolSamples: Int
        var fieldhalMedianMs, fieldhalP95Ms, toolMedianMs, toolP95Ms, ratio: Double
    }

    func measure() async throws {
        guard let libnfc = BuiltinPlugins.registry.plugin(named: "libnfc") else {
            throw FieldHALError(.unavailable, subject: "bench nfc", detail: "this fieldhal was built without the NFC trait")
        }
        let tool = "/usr/bin/nfc-mfultralight"
        guard FileManager.default.isExecutableFile(atPath: tool) else {
            throw FieldHALError(.unavailable, subject: "bench nfc", detail: "\(tool) is missing", advice: "apt install libnfc-examples")
        }
        guard FileManager.default.fileExists(atPath: emulator) else {
            throw FieldHALError(.unavailable, subject: "bench nfc", detail: "no PN532 emulator at \(emulator)",
                                advice: "run from the repository's root or pass --emulator PATH")
        }
        guard samples > 0, toolRuns > 0 else {
            throw FieldHALError(.invalidArgument, subject: "bench nfc", detail: "--samples and --tool-runs must be positive")
        }
        let directory = try ScratchDirectory.make("fieldhal-bench-nfc")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let events = directory + "/events.jsonl"
        let chip = try BenchProcess.start("/usr/bin/python3", [emulator, "--text", "trf:duress:bench-alert-0001"], output: events)
        defer { chip.kill() }
        let connstring = "pn532_uart:" + (try await Self.firstLine(of: events))

        let fieldhal = try await measurePlugin(libnfc, connstring: connstring, events: events)
        let baseline = try await measureTool(tool, connstring: connstring, events: events, directory: directory)
        let fieldhalMedian = GPSBench.percentile(fieldhal, 0.5), toolMedian = GPSBench.percentile(baseline, 0.5)
        let report = Report(machine: GPSBench.machine, fieldhalSamples: fieldhal.count, toolSamples: baseline.count,
                            fieldhalMedianMs: fieldhalMedian, fieldhalP95Ms: GPSBench.percentile(fieldhal, 0.95),
                            toolMedianMs: toolMedian, toolP95Ms: GPSBench.percentile(baseline, 0.95),
                            ratio: fieldhalMedian / toolMedian)
        func format(_ value: Double) -> String { String(format: "%.2f", value) }
        try Output.emit(report, json: json) {
            """
            machine: \(report.machine)
            tag enters the field (selected) → NDEF message read, libnfc pn532_uart on the PN532 emulator:
              fieldhal libnfc plugin   median \(format(report.fieldhalMedianMs)) ms  p95 \(format(report.fieldhalP95Ms)) ms  (\(report.fieldhalSamples) reads)
              nfc-mfultralight r       median \(format(report.toolMedianMs)) ms  p95 \(format(report.toolP95Ms)) ms  (\(report.toolSamples) runs)
              ratio (fieldhal / nfc-mfultralight medians)  \(format(report.ratio))
            """
        }
    }

    /// Each sample: one `readTag` on an open reader (the tag is always in the field, so
    /// every read selects it anew), paired with the emulator's stamp of that selection.
    private func measurePlugin(_ libnfc: PluginDescriptor, connstring: String, events: String) async throws -> [Double] {
        let context = PluginContext(configDirectory: "/", stateDirectory: NSTemporaryDirectory())
        guard case .nfcReader(let reader) = try await libnfc.open(.nfcReader, PluginParameters(["connstring": .string(connstring)]), context) else {
            throw FieldHALError(.unavailable, subject: "bench nfc", detail: "the libnfc plugin opened no reader")
        }
        let before = try Self.selections(in: events).count
        var finished: [UInt64] = []
        for _ in 0..<samples {
            let tag = try await reader.readTag(timeout: .seconds(5))
            finished.append(Self.monotonicNanoseconds())
            guard tag.ndef?.records.isEmpty == false else {
                throw FieldHALError(.protocolError, subject: "bench nfc", detail: "a read returned no NDEF message")
            }
        }
        await reader.close()
        let selected = Array(try await Self.settledSelections(in: events, count: before + samples).dropFirst(before))
        return zip(selected, finished).map { Double($1 - $0) / 1e6 }
    }

    /// Each sample: one run of the tool, from its first selection of the tag to its exit.
    private func measureTool(_ tool: String, connstring: String, events: String, directory: String) async throws -> [Double] {
        var environment = ProcessInfo.processInfo.environment
        environment["LIBNFC_DEVICE"] = connstring
        environment["LIBNFC_AUTO_SCAN"] = "false"
        environment["LIBNFC_LOG_LEVEL"] = "0"
        var latencies: [Double] = []
        for run in 0..<toolRuns {
            let before = try Self.selections(in: events).count
            let status = try await runTool(tool, ["r", directory + "/dump-\(run).mfd"], environment: environment)
            let exited = Self.monotonicNanoseconds()
            guard status == 0 else {
                throw FieldHALError(.protocolError, subject: "bench nfc", detail: "\(tool) exited \(status)")
            }
            let selected = try await Self.settledSelections(in: events, count: before + 1)
            latencies.append(Double(exited - selected[before]) / 1e6)
        }
        return latencies
    }

    private func runTool(_ tool: String, _ arguments: [String], environment: [String: String]) async throws -> Int32 {
        try await withCheckedThrowingContinuation { continuation in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: tool)
            process.arguments = arguments
            process.environment = environment
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            process.terminationHandler = { continuation.resume(returning: $0.terminationStatus) }
            do { try process.run() } catch { continuation.resume(throwing: error) }
        }
    }

    /// The emulator's "selected" stamps so far (CLOCK_MONOTONIC ns).
    static func selections(in events: String) throws -> [UInt64] {
        let text = try String(contentsOfFile: events, encoding: .utf8)
        return text.split(whereSeparator: \.isNewline).compactMap { line -> UInt64? in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  object["event"] as? String == "selected" else { return nil }
            return (object["t"] as? NSNumber)?.uint64Value
        }
    }

    /// Waits until the emulator has written at least `count` stamps (it writes each one
    /// before it answers, but the file may lag the answer by a scheduling slice).
    static func settledSelections(in events: String, count: Int) async throws -> [UInt64] {
        for _ in 0..<200 {
            let stamps = try Self.selections(in: events)
            if stamps.count >= count { return stamps }
            try await Task.sleep(for: .milliseconds(10))
        }
        throw FieldHALError(.protocolError, subject: "bench nfc", detail: "the emulator stamped fewer selections than reads")
    }

    static func firstLine(of path: String) async throws -> String {
        for _ in 0..<500 {
            if let text = try? String(contentsOfFile: path, encoding: .utf8), let newline = text.firstIndex(of: "\n") {
                return String(text[..<newline])
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        throw FieldHALError(.unavailable, subject: "bench nfc", detail: "the PN532 emulator printed no pty within 5 s")
    }

    static func monotonicNanoseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }
}
