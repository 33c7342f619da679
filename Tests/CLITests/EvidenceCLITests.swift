import Foundation
import TestSupport
import Testing
import Transrify
import TransrifyLabServer

/// The evidence queue through the CLI, with `fieldhal evidence flush` killed (SIGKILL) at
/// random moments of its uploads and started again: nothing is lost, nothing arrives twice.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct EvidenceCLITests {
    struct QueuedItem: Decodable { var id: String; var sha256: String; var size: Int64 }

    @Test(arguments: CLIWay.allCases)
    func killedMidUploadEveryItemArrivesExactlyOnce(_ way: CLIWay) async throws {
        try await eachWay(way) {
            let lab = try await SignInLab.start()
            defer { Task { await lab.running.stop() } }
            let state = try await lab.stateDirectory()
            let options = ["--config", lab.config, "--state-dir", state]
            for index in 0..<8 {
                let arguments = index % 2 == 0
                    ? ["evidence", "capture", "audio", "--seconds", "\(3 + index)", "--incident", "inc-kill"]
                    : ["evidence", "capture", "text", "--text", String(repeating: "note \(index) ", count: 2000), "--incident", "inc-kill"]
                let captured = try await CLI.run(arguments + options)
                #expect(captured.status == 0, "\(captured.stderr)")
            }
            let listed = try await CLI.run(["evidence", "queue", "--json"] + options)
            let queued = try JSONDecoder().decode([QueuedItem].self, from: Data(listed.stdout.utf8))
            #expect(queued.count == 8)

            var kills = 0, uploadedBetweenKills: [Int] = []
            for round in 0..<30 {
                let before = try lab.running.server.evidence().count
                let delay = UInt32.random(in: 20_000...90_000)  // process start-up is ~20 ms
                let killed = try await offPool { () -> Bool in
                    let process = Process()
                    process.executableURL = CLI.binary
                    process.arguments = ["evidence", "flush"] + options
                    process.standardOutput = FileHandle.nullDevice
                    process.standardError = FileHandle.nullDevice
                    try process.run()
                    usleep(delay)
                    let running = process.isRunning
                    if running { kill(process.processIdentifier, SIGKILL) }
                    process.waitUntilExit()
                    return running
                }
                if killed { kills += 1 }
                uploadedBetweenKills.append(try lab.running.server.evidence().count - before)
                if try lab.running.server.evidence().count == queued.count { break }
                _ = round
            }
            // Beside a daemon, a killed client's flush goes on in the daemon (a request is never
            // cancelled half-way: the item stays claimed until its PUT ends), and a flush that
            // meets an item claimed by another says so with 75, "try again": as a script would.
            var final = try await CLI.run(["evidence", "flush"] + options)
            for _ in 0..<20 where final.status == 75 {
                try await Task.sleep(for: .milliseconds(500))
                final = try await CLI.run(["evidence", "flush"] + options)
            }
            #expect(final.status == 0, "\(final.stdout)\(final.stderr)")
            let evidence = try lab.running.server.evidence()
            #expect(evidence.count == queued.count, "every item exactly once")
            #expect(Set(evidence.map(\.sha256)) == Set(queued.map(\.sha256)))
            #expect(Set(evidence.map(\.size)) == Set(queued.map(\.size)))
            let repeatedFinalize = evidence.filter { $0.finalizeCalls > 1 }.count
            print("evidence kill test: \(kills) kills, uploads between kills \(uploadedBetweenKills), finalize repeated for \(repeatedFinalize) of \(evidence.count) items (same evidence id)")
            let empty = try await CLI.run(["evidence", "queue"] + options)
            #expect(empty.stdout == "the evidence queue is empty\n")
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: state + "/evidence")
            #expect(leftovers == ["queue.lock"], "no temporary or decrypted file left: \(leftovers)")
        }
    }

    /// VIDEO evidence from the fake camera: sealed in the queue, uploaded, and what the
    /// server received is a Motion-JPEG AVI that ffprobe reads whole.
    @Test(arguments: CLIWay.allCases)
    func videoEvidenceArrivesAsAClipFFprobeReads(_ way: CLIWay) async throws {
        try await eachWay(way) {
            let lab = try await SignInLab.start()
            defer { Task { await lab.running.stop() } }
            let state = try await lab.stateDirectory()
            let options = ["--config", lab.config, "--state-dir", state]
            let captured = try await CLI.run(["evidence", "capture", "video", "--seconds", "1", "--incident", "inc-video", "--json"] + options)
            #expect(captured.status == 0, "\(captured.stderr)")
            struct Kind: Decodable { var kind: String }
            #expect(try JSONDecoder().decode(Kind.self, from: Data(captured.stdout.utf8)).kind == "VIDEO")
            let flushed = try await CLI.run(["evidence", "flush"] + options)
            #expect(flushed.status == 0, "\(flushed.stdout)\(flushed.stderr)")
            let video = try #require(try lab.running.server.evidence().first { $0.kind == "VIDEO" })
            let object = lab.directory + "/objects/" + video.key
            #expect(try FileManager.default.attributesOfItem(atPath: object)[.size] as? Int64 == video.size)
            let probe = try await CLI.runTool("/usr/bin/ffprobe", ["-v", "error", "-count_packets", "-show_entries",
                                                                   "stream=codec_name,width,height,nb_read_packets", "-of", "csv=p=0", object])
            #expect(probe.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "mjpeg,160,120,10", "\(probe.stdout)\(probe.stderr)")
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: state + "/evidence")
            #expect(leftovers == ["queue.lock"], "no scratch clip left: \(leftovers)")
        }
    }
}
