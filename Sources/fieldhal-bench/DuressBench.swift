import ArgumentParser
import FieldHAL
import FieldHALCommandLine
import FieldHALComposition
import FieldHALLock
import FieldHALSystem
import FieldHALVault
import Foundation

/// `fieldhal-bench duress`: does a duress unlock take the time a normal unlock takes? Two
/// throwaway kits in a temporary directory, set up alike; unlocks alternate between the
/// PIN and the duress PIN, timed from the call to the saved state and audit line.
struct DuressBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "duress",
        abstract: "Time normal and duress unlocks (argon2id, sealed state, audit) and compare them.")

    @Option(help: "Unlocks of each kind.") var rounds = 20
    @Flag(help: "Print the result as JSON.") var json = false

    struct Report: Encodable {
        var rounds: Int
        var normalMedianMs, duressMedianMs, ratio, normalSpreadMs, duressSpreadMs: Double
    }

    func run() async throws {
        let root = try ScratchDirectory.make("fieldhal-bench-duress")
        defer { try? FileManager.default.removeItem(atPath: root) }
        let lock = LockService(store: VaultLockStore(vault: try Vault(stateDirectory: StateDirectory(path: root))),
                                   audit: AuditLog(path: root + "/audit.log"))
        try lock.setup(pin: "4821", confirmation: "4821", duressPIN: "2580", relockAfter: .immediate)
        var normal: [Double] = [], duress: [Double] = []
        for round in 0..<(rounds * 2) {
            let pin: SecretBytes = round % 2 == 0 ? "4821" : "2580"
            let start = ContinuousClock.now
            guard try lock.unlock(pin: pin) == .unlocked else { throw FieldHALError(.protocolError, subject: "bench duress", detail: "unlock failed") }
            let elapsed = (ContinuousClock.now - start).seconds * 1000
            if round % 2 == 0 { normal.append(elapsed) } else { duress.append(elapsed) }
        }
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        func spread(_ values: [Double]) -> Double { (values.max() ?? 0) - (values.min() ?? 0) }
        let report = Report(rounds: rounds, normalMedianMs: median(normal), duressMedianMs: median(duress),
                            ratio: median(duress) / median(normal), normalSpreadMs: spread(normal), duressSpreadMs: spread(duress))
        try Output.emit(report, json: json) {
            String(format: "unlocks: %d of each\n  normal PIN  median %.1f ms (spread %.1f ms)\n  duress PIN  median %.1f ms (spread %.1f ms)\n  ratio (duress / normal)  %.3f",
                   report.rounds, report.normalMedianMs, report.normalSpreadMs, report.duressMedianMs, report.duressSpreadMs, report.ratio)
        }
    }
}
