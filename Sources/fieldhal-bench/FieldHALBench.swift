import ArgumentParser
import FieldHAL
import Foundation

/// `fieldhal-bench`: FieldHAL's benchmarks, each against what a user would otherwise pick,
/// in the same run (docs/performance.md). A tool for the repository, not the product: the
/// package does not install it.
@main
struct FieldHALBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fieldhal-bench", abstract: "Measure a backend against a baseline tool in the same run.",
        discussion: "Figures, and the runs they came from, are in docs/performance.md.",
        subcommands: [GPSBench.self, NFCBench.self, EvidenceBench.self, DuressBench.self, CameraBench.self, AlertsBench.self, APIBench.self,
                      APIFixBench.self, PluginsBench.self, ReadersBench.self, ReceiversBench.self, SeizureBench.self, SeizureWorker.self])
}

/// The programs the benchmarks run beside this one: built into the same directory.
enum Sibling {
    /// `fieldhal` (its daemon, and built-in plugins served out of process).
    static func fieldhal() throws -> String { try path("fieldhal") }

    static func path(_ name: String) throws -> String {
        let me = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        let beside = URL(fileURLWithPath: me).deletingLastPathComponent().appendingPathComponent(name).path
        guard FileManager.default.isExecutableFile(atPath: beside) else {
            throw FieldHALError(.unavailable, subject: "fieldhal-bench", detail: "\(beside) is missing", advice: "build it: swift build")
        }
        return beside
    }
}
