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
