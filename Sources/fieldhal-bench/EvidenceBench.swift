import ArgumentParser
import FieldHAL
import FieldHALCommandLine
import FieldHALComposition
import FieldHALFlows
import FieldHALSystem
import FieldHALVault
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `fieldhal-bench evidence`: the evidence pipeline (SHA-256 + secretstream encryption +
/// atomic, fsynced write into the queue) on one large file, next to `sha256sum` hashing the
/// same file, both as child processes measured the same way (wall time, peak RSS).
struct EvidenceBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "evidence",
        abstract: "Queue a large file as evidence (hash + encrypt + durable write) vs sha256sum on it.",
        discussion: """
        Writes a file of random bytes (--mebibytes, default 256) in a scratch directory, reads \
        it once to warm the page cache, then runs each side --runs times, alternating: \
        `fieldhal-bench evidence --seal FILE` (the queue's add, in a fresh state directory) and \
        `sha256sum FILE`. Reports median throughput, their ratio, and peak RSS (VmHWM, sampled every 5 ms).
        """)

    @Option(help: "Size of the test file in MiB.") var mebibytes = 256
    @Option(help: "Runs of each side.") var runs = 3
    @Option(help: "Internal: seal FILE into a fresh queue and exit.") var seal: String?
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        if let seal { return try sealOnce(seal) }
        try await reportingFailures { try measure() }
    }

    private func sealOnce(_ path: String) throws {
        let state = StateDirectory(path: try ScratchDirectory.make("fieldhal-bench-seal"))
        defer { try? FileManager.default.removeItem(atPath: state.path) }
        let queue = try EvidenceQueue(stateDirectory: state, vault: try Vault(stateDirectory: state))
        let item = try queue.add(kind: .video, contentType: "application/octet-stream", incidentId: "bench", file: path)
        print(item.sha256)
    }

    struct Report: Encodable {
        var machine: String
        var mebibytes: Int
        var runs: Int
        var fieldhalMiBPerSecond, sha256sumMiBPerSecond, throughputRatio: Double
        var fieldhalPeakRSSKiB, sha256sumPeakRSSKiB: Int
        var digestsAgree: Bool
    }

    private func measure() throws {
        guard mebibytes > 0, runs > 0 else {
            throw FieldHALError(.invalidArgument, subject: "bench evidence", detail: "--mebibytes and --runs must be positive")
        }
        let directory = try ScratchDirectory.make("fieldhal-bench-evidence")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/evidence.bin"
        try writeRandomFile(file, bytes: mebibytes << 20)
        _ = try Child.run("/usr/bin/sha256sum", [file])  // warm the page cache

        var fieldhal: [Child.Outcome] = [], baseline: [Child.Outcome] = []
        for _ in 0..<runs {
            fieldhal.append(try Child.run("/proc/self/exe", ["evidence", "--seal", file]))
            baseline.append(try Child.run("/usr/bin/sha256sum", [file]))
        }
        let size = Double(mebibytes)
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        let ours = median(fieldhal.map { size / $0.seconds }), theirs = median(baseline.map { size / $0.seconds })
        let agree = fieldhal.allSatisfy { $0.output.prefix(64) == baseline[0].output.prefix(64) }
        let report = Report(machine: GPSBench.machine, mebibytes: mebibytes, runs: runs,
                            fieldhalMiBPerSecond: ours, sha256sumMiBPerSecond: theirs, throughputRatio: ours / theirs,
                            fieldhalPeakRSSKiB: fieldhal.map(\.peakRSSKiB).max() ?? 0,
                            sha256sumPeakRSSKiB: baseline.map(\.peakRSSKiB).max() ?? 0, digestsAgree: agree)
        try Output.emit(report, json: json) {
            """
            machine: \(report.machine)
            \(mebibytes) MiB file, \(runs) runs each, median throughput:
              fieldhal evidence queue (SHA-256 + secretstream + fsync)  \(String(format: "%.0f", ours)) MiB/s  peak RSS \(report.fieldhalPeakRSSKiB) KiB
              sha256sum                                                 \(String(format: "%.0f", theirs)) MiB/s  peak RSS \(report.sha256sumPeakRSSKiB) KiB
              throughput ratio (fieldhal / sha256sum)  \(String(format: "%.2f", ours / theirs))
              SHA-256 digests agree: \(agree ? "yes" : "NO")
            """
        }
        guard agree else { throw ExitCode(1) }
    }

    private func writeRandomFile(_ path: String, bytes: Int) throws {
        guard FileManager.default.createFile(atPath: path, contents: nil), let handle = FileHandle(forWritingAtPath: path) else {
            throw FieldHALError(.io, subject: path, detail: "cannot create the test file")
        }
        defer { try? handle.close() }
        var generator = SystemRandomNumberGenerator()
        var block = [UInt8](repeating: 0, count: 1 << 20)
        for _ in 0..<(bytes >> 20) {
            block.withUnsafeMutableBytes { raw in
                for index in 0..<(raw.count / 8) { raw.storeBytes(of: generator.next() as UInt64, toByteOffset: index * 8, as: UInt64.self) }
            }
            try handle.write(contentsOf: block)
        }
    }

    /// A child process measured with wait4: wall time, CPU time, peak RSS, its output.
    enum Child {
        struct Outcome { var seconds: Double; var cpuSeconds: Double; var peakRSSKiB: Int; var output: String }

        static func run(_ path: String, _ arguments: [String]) throws -> Outcome {
            var pipeEnds: [Int32] = [-1, -1]
            guard pipe(&pipeEnds) == 0 else { throw FieldHALError(.io, subject: "bench", detail: "pipe failed") }
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            posix_spawn_file_actions_adddup2(&actions, pipeEnds[1], 1)
            posix_spawn_file_actions_addclose(&actions, pipeEnds[0])
            let argv = ([path] + arguments).map { strdup($0) } + [nil]
            defer { argv.forEach { free($0) } }
            let started = ContinuousClock.now
            var pid: pid_t = 0
            guard posix_spawn(&pid, path, &actions, nil, argv, environ) == 0 else {
                throw FieldHALError(.unavailable, subject: "bench", detail: "cannot start \(path)")
            }
            close(pipeEnds[1])
            // Peak RSS is sampled from /proc (VmHWM) while the child runs: wait4's ru_maxrss
            // would count this 30 MiB process, whose memory a spawned child shares until exec.
            var output = [UInt8](), buffer = [UInt8](repeating: 0, count: 4096), peak = 0
            while true {
                var entry = pollfd(fd: pipeEnds[0], events: Int16(POLLIN), revents: 0)
                let ready = poll(&entry, 1, 5)
                peak = max(peak, GPSBench.peakRSSKiB(of: String(pid)))
                guard ready > 0 else { continue }
                let count = read(pipeEnds[0], &buffer, buffer.count)
                if count <= 0 { break }
                output += buffer[0..<count]
            }
            close(pipeEnds[0])
            var status: Int32 = 0
            var usage = rusage()
            wait4(pid, &status, 0, &usage)
            let elapsed = ContinuousClock.now - started
            guard status == 0 else { throw FieldHALError(.io, subject: "bench", detail: "\(path) failed (status \(status))") }
            return Outcome(seconds: elapsed.seconds, cpuSeconds: usage.cpuSeconds, peakRSSKiB: peak,
                           output: String(decoding: output, as: UTF8.self))
        }
    }
}

extension rusage {
    /// User plus system time.
    var cpuSeconds: Double {
        Double(ru_utime.tv_sec) + Double(ru_utime.tv_usec) / 1e6 + Double(ru_stime.tv_sec) + Double(ru_stime.tv_usec) / 1e6
    }
}
