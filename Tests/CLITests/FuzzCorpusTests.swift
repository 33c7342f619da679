import Foundation
import Testing
import TestSupport

/// The committed fuzz corpus (fuzz/corpus, grown by `fuzz/run --keep`) replayed through the
/// same targets in every test run: an input that once crashed a parser, kept there, fails here
/// if the crash comes back. `fuzz/run` (in .ci/run) does the coverage-guided search.
@Suite struct FuzzCorpusTests {
    static let targets = ["ndef", "type2", "type4-reader", "type4-tag", "config", "api-request", "location",
                          "transrify-answer", "alert-channel", "vault", "audit-log", "plugin-message", "fix-event", "request-head"]

    @Test(arguments: targets)
    func theCorpusReplaysClean(_ target: String) async throws {
        let corpus = CLI.repositoryRoot.appendingPathComponent("fuzz/corpus/\(target)").path
        let inputs = try FileManager.default.contentsOfDirectory(atPath: corpus).count
        #expect(inputs > 0, "no corpus for \(target)")
        let result = try await CLI.runTool(CLI.products.appendingPathComponent("fieldhal-fuzz").path, [target, corpus])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "fieldhal-fuzz \(target): \(inputs) inputs, no failure\n", "\(result.stdout)")
    }

    @Test func anUnknownTargetIsAUsageError() async throws {
        let result = try await CLI.runTool(CLI.products.appendingPathComponent("fieldhal-fuzz").path, ["nothing"])
        #expect(result.status == 64 && result.stderr.contains("targets: alert-channel, api-request, audit-log, config, fix-event, location, ndef, plugin-message, request-head, transrify-answer, type2, type4-reader, type4-tag, vault"), "\(result)")
    }
}
