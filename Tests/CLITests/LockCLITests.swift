import Foundation
import TestSupport
import Testing

@Suite("fieldhal lock and audit")
struct LockCLITests {
    /// A kit whose fingerprint sensor never matches, so unlocks go to the PIN.
    func pinOnlyKit() throws -> String {
        let config = scratch("lock.toml")
        try "[biometrics]\nplugin = \"fake\"\nhas_sensor = false\n".write(toFile: config, atomically: true, encoding: .utf8)
        return config
    }

    @Test(arguments: CLIWay.allCases)
    func normalAndDuressUnlocksAreIndistinguishableAtTheDevice(_ way: CLIWay) async throws {
        try await eachWay(way) {
            // Two kits set up the same way; one is unlocked with the PIN, one with the duress PIN.
            var results: [(stdout: String, stderr: String, status: Int32, audit: String, stateSize: Int, files: [String])] = []
            for pin in ["4821", "2580"] {
                let state = scratch("state")
                let environment = ["FIELDHAL_STATE_DIR": state]
                let config = try pinOnlyKit()
                let setup = try await CLI.run(["lock", "setup", "--pin-stdin", "--duress", "--config", config], environment: environment,
                                              input: "4821\n4821\n2580\n")
                #expect(setup.status == 0, "\(setup.stderr)")
                let unlock = try await CLI.run(["lock", "unlock", "--pin-stdin", "--config", config], environment: environment, input: pin + "\n")
                let audit = try String(contentsOfFile: state + "/audit.log", encoding: .utf8).split(separator: "\n").last.map(String.init) ?? ""
                let size = try FileManager.default.attributesOfItem(atPath: state + "/vault/lock-state.sealed")[.size] as! Int
                let files = try FileManager.default.subpathsOfDirectory(atPath: state).sorted()
                results.append((unlock.stdout, unlock.stderr, unlock.status, audit, size, files))
            }
            #expect(results[0].stdout == "Unlocked.\n" && results[1].stdout == results[0].stdout, "byte-identical output")
            #expect(results[0].stderr == results[1].stderr && results[0].status == 0 && results[1].status == 0)
            let strip = { (line: String) in
                line.replacingOccurrences(of: #""(hash|prev|time)":"[^"]*""#, with: "", options: .regularExpression)
            }
            #expect(strip(results[0].audit) == strip(results[1].audit) && results[0].audit.contains(#""event":"unlock""#))
            #expect(results[0].stateSize == results[1].stateSize, "the sealed state has one size")
            #expect(results[0].files == results[1].files, "the same files exist")
        }
    }

    @Test(arguments: CLIWay.allCases)
    func lockoutsAndAuditVerifyThroughTheCLI(_ way: CLIWay) async throws {
        try await eachWay(way) {
            let environment = ["FIELDHAL_STATE_DIR": scratch("state")]
            let config = try pinOnlyKit()
            let weak = try await CLI.run(["lock", "setup", "--pin-stdin", "--config", config], environment: environment, input: "123456\n123456\n")
            #expect(weak.status == 64 && weak.stderr == "fieldhal: lock: Passcode cannot be sequential digits\n")
            #expect(try await CLI.run(["lock", "setup", "--pin-stdin", "--config", config], environment: environment, input: "4821\n4821\n").status == 0)

            var statuses: [Int32] = []
            for _ in 0..<3 {
                statuses.append(try await CLI.run(["lock", "unlock", "--pin-stdin", "--config", config], environment: environment, input: "9999\n").status)
            }
            #expect(statuses == [77, 77, 75])
            let paused = try await CLI.run(["lock", "unlock", "--pin-stdin", "--config", config], environment: environment, input: "4821\n")
            #expect(paused.status == 75 && paused.stdout.hasPrefix("Too many attempts. Please wait"))

            let verified = try await CLI.run(["audit", "verify"], environment: environment)
            #expect(verified.status == 0 && verified.stdout == "audit log intact: 4 entries\n", "\(verified.stderr)")
            // Edit one line of the log: verify names it.
            let path = environment["FIELDHAL_STATE_DIR"]! + "/audit.log"
            let edited = try String(contentsOfFile: path, encoding: .utf8).replacingOccurrences(of: "result=failed", with: "result=ok")
            try edited.write(toFile: path, atomically: true, encoding: .utf8)
            let broken = try await CLI.run(["audit", "verify"], environment: environment)
            #expect(broken.status == 65 && broken.stderr.contains("line 2: its content does not match its hash (edited)"), "\(broken.stderr)")
        }
    }

    @Test func emergencyResetNeedsConfirmationThenErasesEverything() async throws {
        let state = scratch("state")
        let environment = ["FIELDHAL_STATE_DIR": state]
        let config = try pinOnlyKit()
        #expect(try await CLI.run(["lock", "setup", "--pin-stdin", "--relock", "immediate", "--config", config], environment: environment,
                                  input: "4821\n4821\n").status == 0)
        #expect(try await CLI.run(["keys", "show"], environment: environment).status == 0)
        for _ in 0..<5 { _ = try await CLI.run(["lock", "unlock", "--pin-stdin", "--config", config], environment: environment, input: "9999\n") }
        let status = try await CLI.run(["lock", "status", "--config", config], environment: environment)
        #expect(status.stdout.contains("Forgot your PIN? fieldhal lock reset erases this kit's data and starts fresh."))

        let unconfirmed = try await CLI.run(["lock", "reset"], environment: environment)
        #expect(unconfirmed.status == 64 && FileManager.default.fileExists(atPath: state + "/vault.key"))
        let reset = try await CLI.run(["lock", "reset", "--yes"], environment: environment)
        #expect(reset.status == 0, "\(reset.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: state).isEmpty, "keys, lock, audit: all gone")
        let fresh = try await CLI.run(["lock", "status", "--config", config], environment: environment)
        #expect(fresh.stdout == "The lock is off.\n")
    }

    /// Issue 41's optional wipe: the Nth wrong PIN in a row erases the kit's data, alone and
    /// through a daemon, with the same words and exit code; the daemon then stops with
    /// EX_TEMPFAIL so that its unit starts it again on the empty state.
    @Test func theWipeAfterNWrongPINsErasesAloneAndThroughTheDaemon() async throws {
        let config = try pinOnlyKit()
        let alone = scratch("state"), served = scratch("state")
        let kits = [alone, served]
        let daemon = try DaemonProcess(["--config", config, "--state-dir", served])
        #expect(await daemon.waitForLine(containing: "api: serving on", timeout: .seconds(20)) != nil, "\(daemon.output)")
        func run(_ arguments: [String], _ state: String, input: String = "") async throws -> CLI.Result {
            try await CLI.run(arguments + ["--config", config, "--state-dir", state], input: input)
        }
        var seen: [String: [String]] = [:]
        func note(_ state: String, _ result: CLI.Result) { seen[state, default: []].append("\(result.status) \(result.stdout)\(result.stderr)") }
        for state in kits {
            let refused = try await run(["lock", "setup", "--pin-stdin", "--wipe-after", "4"], state, input: "4821\n4821\n")
            #expect(refused.status == 64 && refused.stderr.contains("from 5 to 50"), "\(refused)")
            let setup = try await run(["lock", "setup", "--pin-stdin", "--wipe-after", "5"], state, input: "4821\n4821\n")
            #expect(setup.status == 0, "\(setup.stderr)")
            for _ in 1...3 { note(state, try await run(["lock", "unlock", "--pin-stdin"], state, input: "9999\n")) }
        }
        let keys = kits.map { FileManager.default.contents(atPath: $0 + "/vault.key") }
        #expect(keys.allSatisfy { $0 != nil })
        // The third wrong PIN paused attempts for 30 s; a paused attempt is not checked, so
        // it does not count towards the wipe. Wait for the lock's own clock.
        var pause = 0
        for state in kits {
            let status = try JSONDecoder().decode(LockStatusSeen.self, from: Data(try await run(["lock", "status", "--json"], state).stdout.utf8))
            #expect(status.failuresBeforeWipe == 2 && status.wipeAfterFailures == 5, "\(status)")
            pause = max(pause, status.pinLockedForSeconds)
        }
        try await Task.sleep(for: .seconds(pause + 1))
        for state in kits {
            note(state, try await run(["lock", "unlock", "--pin-stdin"], state, input: "9999\n"))
            // The fifth through another door to the PIN.
            let last = try await run(["lock", "settings", "--pin-stdin", "--relock", "1m"], state, input: "9999\n")
            // A wrong PIN to settings is refused with EX_UNAVAILABLE (69), as it always was.
            #expect(last.status == 69 && last.stderr.contains("this kit's FieldHAL data was erased"), "\(last)")
            note(state, last)
        }
        #expect(seen[alone] == seen[served], "the same answers alone and through the daemon: \(seen)")
        #expect(await daemon.waitForLine(containing: "fieldhal stopped", timeout: .seconds(20)) != nil, "\(daemon.output)")
        let stopped = await daemon.stop(0)
        #expect(stopped.status == 75, "the daemon stops for its unit to restart it: \(daemon.output)")
        for (state, key) in zip(kits, keys) {
            // The daemon, until it stops, or the next command opens a new, empty vault.
            let left = try FileManager.default.contentsOfDirectory(atPath: state)
                .filter { !["api.sock", "daemon.lock", "evidence", "vault", "vault.key"].contains($0) }
            #expect(left.isEmpty, "lock, PINs, audit: all gone from \(state): \(left)")
            #expect(((try? FileManager.default.contentsOfDirectory(atPath: state + "/vault")) ?? []).isEmpty, "no sealed entry is left")
            #expect(FileManager.default.contents(atPath: state + "/vault.key") != key, "the old vault key is gone")
            let fresh = try await run(["lock", "status"], state)
            #expect(fresh.stdout == "The lock is off.\n", "\(fresh)")
        }
    }

    struct LockStatusSeen: Decodable {
        var pinLockedForSeconds: Int
        var wipeAfterFailures: Int?
        var failuresBeforeWipe: Int?
    }

    /// Issue 18: a reset (a lost PIN, or someone holding the kit) must not destroy evidence
    /// the server has not got. The queued items stay sealed with what uploads them (the queue
    /// key, the tenant key); the lock, its log, the kit's key pair and the session go; and a
    /// flush afterwards delivers every item, SHA-256 checked by the server.
    @Test func emergencyResetKeepsEvidenceNotYetUploaded() async throws {
        let lab = try await SignInLab.start()
        defer { Task { await lab.running.stop() } }
        let state = try await lab.stateDirectory()
        let options = ["--config", lab.config, "--state-dir", state]
        #expect(try await CLI.run(["lock", "setup", "--pin-stdin", "--relock", "immediate"] + options, input: "4821\n4821\n").status == 0)
        #expect(try await CLI.run(["keys", "show"] + options).status == 0)
        for arguments in [["text", "--text", "seen at the gate"], ["audio", "--seconds", "1"]] {
            let captured = try await CLI.run(["evidence", "capture"] + arguments + ["--incident", "inc-reset"] + options)
            #expect(captured.status == 0, "\(captured.stderr)")
        }
        let listed = try await CLI.run(["evidence", "queue", "--json"] + options)
        let queued = try JSONDecoder().decode([EvidenceCLITests.QueuedItem].self, from: Data(listed.stdout.utf8))
        #expect(queued.count == 2)
        let vaultBefore = try FileManager.default.contentsOfDirectory(atPath: state + "/vault").sorted()
        #expect(vaultBefore.count > 2, "the lock and the kit's key pair are in the vault too: \(vaultBefore)")

        let reset = try await CLI.run(["lock", "reset", "--yes"] + options)
        #expect(reset.status == 0, "\(reset.stderr)")
        #expect(reset.stdout == "This kit's FieldHAL data was erased; evidence not yet uploaded stays sealed and keeps uploading. Run fieldhal lock setup to start again.\n")
        let left = try FileManager.default.contentsOfDirectory(atPath: state).sorted()
        #expect(left == ["evidence", "vault", "vault.key"], "\(left)")
        let vaultAfter = try FileManager.default.contentsOfDirectory(atPath: state + "/vault").sorted()
        #expect(vaultAfter == ["evidence-queue-key.sealed", "transrify-tenant-key.sealed"], "\(vaultAfter)")
        let status = try await CLI.run(["lock", "status"] + options)
        #expect(status.stdout == "The lock is off.\n", "\(status.stdout)\(status.stderr)")
        // Nothing in the queue is readable as plaintext on the kit.
        for file in try FileManager.default.contentsOfDirectory(atPath: state + "/evidence") {
            let bytes = FileManager.default.contents(atPath: state + "/evidence/" + file) ?? Data()
            #expect(!String(decoding: bytes, as: UTF8.self).contains("seen at the gate"), "\(file)")
        }

        let flushed = try await CLI.run(["evidence", "flush"] + options)
        #expect(flushed.status == 0, "\(flushed.stdout)\(flushed.stderr)")
        let evidence = try lab.running.server.evidence()
        #expect(Set(evidence.map(\.sha256)) == Set(queued.map(\.sha256)), "every kept item reached the server intact")
        // The queue empty, a second reset leaves nothing at all.
        #expect(try await CLI.run(["lock", "reset", "--yes"] + options).status == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: state).isEmpty)
    }

    /// A kit with two sensors (issue 43): the lock takes a finger on either, and its setup
    /// sees the fingers enrolled on both.
    @Test(arguments: CLIWay.allCases)
    func aFingerOnEitherOfTwoSensorsUnlocks(_ way: CLIWay) async throws {
        try await eachWay(way) {
            let environment = ["FIELDHAL_STATE_DIR": scratch("state")]
            let config = scratch("two-sensors.toml")
            // Nobody touches the door's sensor; the handset's matches.
            try """
            [biometrics.door]
            plugin = "fake"
            enrolled = ["left-thumb"]
            outcomes = ["no-finger"]

            [biometrics.handset]
            plugin = "fake"
            outcomes = ["match"]
            scan_delay_ms = 100
            """.write(toFile: config, atomically: true, encoding: .utf8)
            let setup = try await CLI.run(["lock", "setup", "--pin-stdin", "--biometrics", "--config", config], environment: environment,
                                          input: "4821\n4821\n")
            #expect(setup.status == 0 && setup.stdout == "Lock set up with fingerprint and PIN.\n", "\(setup)")
            let unlock = try await CLI.run(["lock", "unlock", "--pin-stdin", "--scan-timeout", "20", "--config", config],
                                           environment: environment, input: "")
            #expect(unlock.status == 0 && unlock.stdout == "Unlocked.\n", "\(unlock)")
        }
    }

    #if Fprintd
    @Test(arguments: CLIWay.allCases)
    func unlockWithTheRealFprintdThenPINAfterThreeFailedScans(_ way: CLIWay) async throws {
        try await eachWay(way) {
            let lab = try await FprintdLab.start()
            defer { lab.stop() }
            let environment = ["FIELDHAL_STATE_DIR": scratch("state")]
            let config = scratch("fprintd-lock.toml")
            try "[biometrics]\nplugin = \"fprintd\"\nuser = \"technician\"\nbus_address = \"\(lab.busAddress)\"\n"
                .write(toFile: config, atomically: true, encoding: .utf8)
            let touches = Task { for _ in 0..<5 { try await lab.touch("SCAN finger-3"); try await Task.sleep(for: .milliseconds(300)) } }
            #expect(try await CLI.run(["bio", "enroll", "--config", config], environment: environment).status == 0)
            _ = try? await touches.value
            let setup = try await CLI.run(["lock", "setup", "--pin-stdin", "--biometrics", "--config", config], environment: environment, input: "4821\n4821\n")
            #expect(setup.stdout == "Lock set up with fingerprint and PIN.\n", "\(setup.stderr)")

            let match = Task { try await lab.touch("SCAN finger-3") }
            let byFinger = try await CLI.run(["lock", "unlock", "--pin-stdin", "--config", config], environment: environment, input: "")
            _ = try? await match.value
            #expect(byFinger.status == 0 && byFinger.stdout == "Unlocked.\n", "\(byFinger.stderr)")

            // Three wrong fingers: the sensor pauses and the PIN (from stdin) unlocks.
            let wrong = Task { for _ in 0..<3 { try await lab.touch("SCAN finger-9"); try await Task.sleep(for: .milliseconds(700)) } }
            let byPIN = try await CLI.run(["lock", "unlock", "--pin-stdin", "--config", config], environment: environment, input: "4821\n")
            _ = try? await wrong.value
            #expect(byPIN.status == 0 && byPIN.stdout == "Unlocked.\n", "\(byPIN.stderr)")
            #expect(byPIN.stderr.contains("Fingerprint is paused for 15 minutes. Use your PIN."))
            let status = try await CLI.run(["lock", "status", "--json", "--config", config], environment: environment)
            let report = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any]
            let left = (report?["biometricsLockedForSeconds"] as? NSNumber)?.intValue ?? 0
            #expect((840...900).contains(left), "about 900 s left (less the test's own run time): \(status.stdout)")
        }
    }
    #endif
}
