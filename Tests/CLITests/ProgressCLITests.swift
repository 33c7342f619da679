import Foundation
import TestSupport
import Testing
import TransrifyLabServer

/// Progress of long work (issue 22): on standard error, never in the result; nothing on a
/// non-terminal unless asked; JSON lines with --json.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct ProgressCLITests {
    struct Line: Decodable {
        struct Progress: Decodable { var label: String; var done: Double; var total: Double?; var unit: String }
        var progress: Progress
    }

    static func progressLines(_ text: String) throws -> [Line.Progress] {
        try text.split(separator: "\n").map { try JSONDecoder().decode(Line.self, from: Data($0.utf8)).progress }
    }

    @Test func aRecordingReportsItsSecondsWhenAskedAndNothingOtherwise() async throws {
        let path = scratch("progress.wav")
        let quiet = try await CLI.run(["mic", "record", "--config", "fake", "--seconds", "1.5", "-o", path, "--json"],
                                      environment: ["FIELDHAL_STATE_DIR": scratch("state")])
        #expect(quiet.status == 0 && quiet.stderr.isEmpty, "not a terminal, not asked: \(quiet.stderr)")
        let asked = try await CLI.run(["mic", "record", "--config", "fake", "--seconds", "1.5", "-o", path, "--json", "--progress"],
                                      environment: ["FIELDHAL_STATE_DIR": scratch("state")])
        #expect(asked.status == 0, "\(asked.stderr)")
        let lines = try Self.progressLines(asked.stderr)
        #expect(!lines.isEmpty && lines.allSatisfy { $0.unit == "seconds" && $0.total == 1.5 && $0.label == "recording sound" }, "\(asked.stderr)")
        #expect(try JSONSerialization.jsonObject(with: Data(asked.stdout.utf8)) is [String: Any], "the result alone on stdout: \(asked.stdout)")
        let text = try await CLI.run(["mic", "record", "--config", "fake", "--seconds", "1.5", "-o", path, "--progress"],
                                     environment: ["FIELDHAL_STATE_DIR": scratch("state")])
        #expect(text.stderr.hasPrefix("recording sound: 0 s of 1.5 s"), "\(text.stderr)")
        // At a terminal (script(1) gives the command one): drawn in place, cleared before the result.
        let state = scratch("state")
        let terminal = try await CLI.runTool("/usr/bin/script", ["-qc", "FIELDHAL_STATE_DIR=\(state) \(CLI.binary.path) mic record --config fake --seconds 1 -o \(path)", "/dev/null"])
        // Each redraw starts with "\r ESC[K"; how many come before the result depends on how
        // busy the machine is, so every one but the last must be a progress line.
        let redraws = terminal.stdout.components(separatedBy: "\r\u{1B}[K").dropFirst()
        #expect(terminal.stdout.hasPrefix("\r\u{1B}[Krecording sound: 0 s of 1 s (0 %)") && redraws.count >= 2
                && redraws.dropLast().allSatisfy { $0.hasPrefix("recording sound: ") && $0.contains(" s of 1 s (") }
                && redraws.last?.hasPrefix("\(path): 1.00 s") == true, "\(terminal.stdout.debugDescription)")
    }

    @Test func anUploadReportsItsBytesToTheLastOne() async throws {
        let lab = try await SignInLab.start()
        defer { Task { await lab.running.stop() } }
        let state = try await lab.stateDirectory()
        let options = ["--config", lab.config, "--state-dir", state]
        let captured = try await CLI.run(["evidence", "capture", "audio", "--seconds", "5", "--incident", "inc-p"] + options)
        #expect(captured.status == 0, "\(captured.stderr)")
        let flushed = try await CLI.run(["evidence", "flush", "--progress", "--json"] + options)
        #expect(flushed.status == 0, "\(flushed.stderr)")
        let lines = try Self.progressLines(flushed.stderr)
        let last = try #require(lines.last, "no progress: \(flushed.stderr)")
        #expect(last.unit == "bytes" && (last.total ?? 0) > 100_000 && last.done == last.total && last.label.hasPrefix("uploading AUDIO "), "\(lines)")
        #expect(flushed.stdout.contains("\"remaining\" : 0"), "\(flushed.stdout)")
    }
}
