import Foundation
import Testing
import TestSupport

/// The benchmark commands run end to end on a small budget, so that they do not rot between
/// the runs that produce `docs/performance.md`. What they print is checked for shape only:
/// figures are measured by a person on a quiet machine, not asserted by a test.
@Suite(.timeLimit(.minutes(3)))
struct BenchCLITests {
    /// gpsd → the daemon's event stream, against the in-process watch and gpspipe (60 epochs:
    /// each of the five clients gets 10 alone); then a couple of followers through the
    /// daemon and straight on gpsd.
    @Test func apiGPSMeasuresEveryClient() async throws {
        let result = try await CLI.bench(["api-gps", "--epochs", "60", "--followers", "2", "--seconds", "3", "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let report = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        let latency = report?["latency"] as? [String: Any]
        let load = report?["load"] as? [String: Any]
        #expect((latency?["samples"] as? Int ?? 0) >= 20, "\(result.stdout)")
        for key in ["inProcessMedianMs", "eventStreamMedianMs", "eventStreamFollowMedianMs", "eventStreamRawMedianMs", "gpspipeMedianMs", "ratioVsInProcess", "ratioFollowVsInProcess"] {
            #expect((latency?[key] as? Double).map { $0 > 0 && $0.isFinite } == true, "\(key): \(result.stdout)")
        }
        #expect(load?["clients"] as? Int == 2 && (load?["daemonPeakRSSKiB"] as? Int ?? 0) > 0 && (load?["fixesPerClient"] as? Double ?? 0) >= 1,
                "\(result.stdout)")
    }

    /// Receivers side by side on one gpsd, through the daemon: every count has its fixes
    /// measured and its ratio against one receiver's.
    @Test func receiversMeasuresOneAndFourOnOneGpsd() async throws {
        let result = try await CLI.bench(["receivers", "--epochs", "60", "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let report = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        let rows = report?["rows"] as? [[String: Any]] ?? []
        #expect(rows.map { $0["receivers"] as? Int } == [1, 4], "\(result.stdout)")
        for row in rows {
            #expect((row["samples"] as? Int ?? 0) >= 60 * (row["receivers"] as? Int ?? 1) / 4, "\(row)")
            for key in ["medianMs", "p95Ms", "medianRatio"] {
                #expect((row[key] as? Double).map { $0 > 0 && $0.isFinite } == true, "\(key): \(row)")
            }
        }
    }

    /// Issue 19's seizure benchmark on the fake kit: both pipelines put every item on the lab
    /// server, and the segments' first audio is confirmed before the whole file's (the latter
    /// waits for the photo, then the audio, then the video, then the uploads).
    @Test func seizureRunsBothPipelinesAgainstTheLabServer() async throws {
        let result = try await CLI.bench(["seizure", "--seconds", "3", "--segment-seconds", "1", "--width", "160", "--height", "120",
                                        "--fps", "10", "--taken-at", "2,9", "--faults", "none", "--json"])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        let report = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        let runs = report?["runs"] as? [[String: Any]] ?? []
        #expect(runs.map { $0["pipeline"] as? String } == ["segments", "whole"], "\(result.stdout)")
        for run in runs {
            #expect((run["items"] as? Int ?? 0) >= 5 && run["items"] as? Int == run["itemsConfirmed"] as? Int, "\(run)")
            let taken = run["takenAt"] as? [[String: Any]] ?? []
            // Long after the recordings ended everything recorded is on the server.
            #expect((taken.last?["lostAudio"] as? Double).map { $0 < 0.01 } == true && (taken.last?["lostVideo"] as? Double).map { $0 < 0.01 } == true, "\(run)")
        }
        let segmentsAudio = runs.first?["firstAudioConfirmedSeconds"] as? Double ?? .infinity
        let wholeAudio = runs.last?["firstAudioConfirmedSeconds"] as? Double ?? 0
        #expect(segmentsAudio < wholeAudio, "first audio: segments \(segmentsAudio) s, whole \(wholeAudio) s")
        #expect((report?["firstAudioConfirmedRatio"] as? Double ?? 0) > 1, "\(result.stdout)")
    }

    /// The faults for real: the capture in a process of its own, SIGKILLed 1.5 s after its
    /// verdict (it may lose the segment recording and the one uploading, and what it sealed
    /// is whole), then cut off from the server at 1.5 s for 1 s (nothing lost: it uploads
    /// once the link is back).
    @Test func seizureKillsAndCutsOffTheCaptureAndCountsWhatIsLeft() async throws {
        let result = try await CLI.bench(["seizure", "--seconds", "3", "--segment-seconds", "1", "--width", "160", "--height", "120",
                                        "--fps", "10", "--taken-at", "1.5", "--pipelines", "segments", "--faults", "both", "--cut-seconds", "1", "--json"])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        let report = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        let faults = report?["faults"] as? [[String: Any]] ?? []
        #expect(faults.map { $0["fault"] as? String } == ["kill", "cut"], "\(result.stdout)")
        let kill = faults.first ?? [:], cut = faults.last ?? [:]
        #expect(kill["withinBound"] as? Bool == true && kill["sealedIntact"] as? Bool == true, "\(kill)")
        #expect((kill["audioRecorded"] as? Double).map { $0 > 1 && $0 <= 1.5 } == true, "recorded until the kill: \(kill)")
        #expect((kill["lostAudio"] as? Double ?? 9) <= 2 && (kill["lostVideo"] as? Double ?? 9) <= 2, "\(kill)")
        #expect(cut["withinBound"] as? Bool == true && cut["lostAudio"] as? Double == 0 && cut["lostVideo"] as? Double == 0, "\(cut)")
        #expect((cut["connectionsEnded"] as? Int ?? 0) + (cut["connectionsRefused"] as? Int ?? 0) >= 1, "the cut met the uploads: \(cut)")
    }

    /// Issue 41: a capture whose process runs out of descriptors (its soft limit lowered to
    /// its lowest free descriptor 1.5 s after its verdict, for 2 s) stops recording, and says
    /// why: an error item for each kind it lost and the incident's manifest reach the server,
    /// written with the descriptors the pipeline holds back. Without them both were lost: a
    /// silent gap.
    @Test func aCaptureOutOfDescriptorsSaysSoAndClosesItsIncident() async throws {
        let result = try await CLI.bench(["seizure", "--seconds", "4", "--segment-seconds", "1", "--width", "160", "--height", "120",
                                        "--fps", "10", "--taken-at", "1.5", "--pipelines", "segments", "--faults", "descriptors",
                                        "--cut-seconds", "2", "--json"])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        let report = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        let run = (report?["faults"] as? [[String: Any]])?.first ?? [:]
        #expect(run["fault"] as? String == "descriptors" && run["manifestDelivered"] as? Bool == true, "\(run)")
        let errors = run["errorItems"] as? [String] ?? []
        for kind in ["AUDIO", "VIDEO"] where (run["lost\(kind.capitalized)"] as? Double ?? 9) > 0.01 {
            #expect(errors.contains { $0.hasPrefix("\(kind) evidence not captured") && $0.contains("Too many open files") }, "\(kind): \(run)")
        }
        #expect(run["withinBound"] as? Bool == true, "\(run)")
    }

    /// The gpsd and libnfc backends in process and out of process (a plugin process), and
    /// the plugin process at rest.
    @Test func pluginsMeasuresBothWaysAndTheProcessAtRest() async throws {
        let emulator = CLI.repositoryRoot.appendingPathComponent("Tests/TestSupport/Peers/pn532-emulator.py").path
        // Small stills: the debug build's JPEG encoder takes a quarter of a second for a
        // 640x480 one, and 200 of them starved the tests beside this one.
        let arguments = ["plugins", "--epochs", "60", "--rest-seconds", "1", "--nfc-reads", "10",
                         "--media-calls", "10", "--still-width", "64", "--still-height", "48",
                         "--emulator", emulator, "--json"]
        var result = try await CLI.bench(arguments)
        // Once in a fresh-clone CI run (2026-11-27 at 0433cab), on a machine loaded by the tests beside
        // this one, none of gpsfake's 40 reports reached either consumer; the bench said so
        // with exit 75 (EX_TEMPFAIL: try again). This checks the bench's shape, not gpsfake
        // under load: one more try, said in the log, for that failure only.
        if result.status == 75 && result.stderr.contains("reports reached the two consumers") {
            print("bench plugins: \(result.stderr.trimmingCharacters(in: .whitespacesAndNewlines)); once more")
            result = try await CLI.bench(arguments)
        }
        #expect(result.status == 0, "\(result.stderr)")
        let report = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        for phase in ["alone", "atOnce"] {
            let latency = report?[phase] as? [String: Any]
            #expect((latency?["samples"] as? Int ?? 0) >= 10, "\(phase): \(result.stdout)")
            for key in ["inProcessMedianMs", "outOfProcessMedianMs", "ratio"] {
                #expect((latency?[key] as? Double).map { $0 > 0 && $0.isFinite } == true, "\(phase) \(key): \(result.stdout)")
            }
        }
        let rest = report?["rest"] as? [String: Any]
        #expect((rest?["seconds"] as? Double ?? 0) >= 1 && (rest?["pluginCPUSeconds"] as? Double).map { $0 >= 0 } == true, "\(result.stdout)")
        #expect((report?["pluginRSSKiB"] as? Int ?? 0) > 0, "\(result.stdout)")
        let nfc = report?["nfc"] as? [String: Any]
        #expect(nfc?["samples"] as? Int == 10, "\(result.stdout)")
        for key in ["inProcessMedianMs", "outOfProcessMedianMs"] {
            #expect((nfc?[key] as? Double).map { $0 > 0 && $0 < 1000 } == true, "nfc \(key): \(result.stdout)")
        }
        for phase in ["stills", "clips"] {
            let calls = report?[phase] as? [String: Any]
            #expect(calls?["samples"] as? Int == 10 && (calls?["bytes"] as? Int ?? 0) > 0, "\(phase): \(result.stdout)")
            for key in ["inProcessMedianMs", "outOfProcessMedianMs"] {
                #expect((calls?[key] as? Double).map { $0 > 0 && $0 < 1000 } == true, "\(phase) \(key): \(result.stdout)")
            }
        }
        // Haptics needs /dev/uinput (the kernel lab); elsewhere the report says why it is skipped.
        #expect(report?["haptics"] is [String: Any] || (report?["hapticsSkipped"] as? String)?.contains("uinput") == true, "\(result.stdout)")
    }
}
