#if NFC
import Foundation
import TestSupport
import Testing
import Transrify
import TransrifyLabServer

/// Seed 000 Req 25–32 on two kits, each a `fieldhal` with its own state and its own libnfc
/// stack on one side of the PN532 bridge: kit A signs in with the duress PIN and offers
/// `trf:duress:<alertId>` as a tag; kit B sees the banner and acknowledges by reading it.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct AlertsCLITests {
    func kitConfig(_ lab: SignInLab, nfcSection: String, connstring: String) throws -> String {
        let base = try String(contentsOfFile: lab.config, encoding: .utf8)
        // Swap the fake NFC section for libnfc on this kit's side of the bridge.
        var lines = base.components(separatedBy: "\n")
        if let start = lines.firstIndex(of: "[\(nfcSection)]") {
            let end = lines[(start + 1)...].firstIndex { $0.hasPrefix("[") } ?? lines.endIndex
            lines.removeSubrange(start..<end)
        }
        let text = lines.joined(separator: "\n")
            .replacingOccurrences(of: "evidence_audio_seconds = 1", with: "evidence_audio_seconds = 1\nnfc_enabled = true\nnfc_emulation_s = 10")
            + "\n[\(nfcSection)]\nplugin = \"libnfc\"\nconnstring = \"\(connstring)\"\n"
        let path = scratch("kit-\(nfcSection).toml")
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test func duressOnKitAIsAcknowledgedByNFCFromKitB() async throws {
        let lab = try await SignInLab.start()
        defer { Task { await lab.running.stop() } }
        try lab.running.server.addUser(tenantKey: SignInLab.tenantKey, customerRef: "bob02", pin: "8024", duressPin: "9753")
        let bridge = try await PN532Emulator.start(["--bridge"])
        defer { bridge.stop() }
        let configA = try kitConfig(lab, nfcSection: "nfc_emulator", connstring: bridge.connstring(0))
        let configB = try kitConfig(lab, nfcSection: "nfc", connstring: bridge.connstring(1))
        let stateA = try await lab.stateDirectory(), stateB = try await lab.stateDirectory()

        let signInA = try await CLI.run(["signin", "--customer-ref", "alice01", "--pin-stdin", "--config", configA, "--state-dir", stateA], input: "1357\n")
        #expect(signInA.status == 0, "\(signInA.stderr)")
        let signInB = try await CLI.run(["signin", "--customer-ref", "bob02", "--pin-stdin", "--config", configB, "--state-dir", stateB], input: "8024\n")
        #expect(signInB.status == 0, "\(signInB.stderr)")

        // Kit B's view: one poll shows kit A's alert with the distance (both use the fake GPS).
        var listed = CLI.Result(status: 1, stdout: "", stderr: "")
        for _ in 0..<50 where !listed.stdout.contains("Nearby Duress Alert") {
            listed = try await CLI.run(["alerts", "--config", configB, "--state-dir", stateB])
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(listed.stdout.hasPrefix("Nearby Duress Alert — alice01, about "), "\(listed.stdout)\(listed.stderr)")
        let alertId = try #require(try lab.running.server.alerts(tenantKey: SignInLab.tenantKey).first?.alertId)

        // Kit B reads kit A's emulated tag through the bridge and acknowledges with method NFC.
        let ack = try await CLI.run(["alerts", "ack", "--nfc", "--timeout", "15", "--config", configB, "--state-dir", stateB])
        #expect(ack.status == 0, "\(ack.stdout)\(ack.stderr)")
        #expect(ack.stdout == "Acknowledged alert \(alertId) (NFC).\n")
        #expect(try lab.running.server.acks(alertId: alertId).map { "\($0.customerRef) \($0.method)" } == ["bob02 NFC"])

        // In-app acknowledgement too; a wrong id is an error shown with the alert kept.
        let inApp = try await CLI.run(["alerts", "ack", alertId, "--config", configB, "--state-dir", stateB])
        #expect(inApp.stdout == "Acknowledged alert \(alertId) (INAPP).\n")
        let wrong = try await CLI.run(["alerts", "ack", "no-such-alert", "--config", configB, "--state-dir", stateB])
        #expect(wrong.status == 1)
        #expect(wrong.stderr.hasSuffix("The alert is still active.\n"))
        try await waitForBackgroundRuns(stateA, timeout: .seconds(40))
    }

    @Test func nfcAcknowledgementNeedsNFCEnabled() async throws {
        let lab = try await SignInLab.start()
        defer { Task { await lab.running.stop() } }
        let state = try await lab.stateDirectory()
        _ = try await lab.signIn(SignInLab.user.pin, state: state)
        let ack = try await CLI.run(["alerts", "ack", "--nfc", "--config", lab.config, "--state-dir", state])
        #expect(ack.status == 69)
        #expect(ack.stderr.contains("NFC is disabled — set nfc_enabled = true in [transrify]"))
        let radius = try await CLI.run(["alerts", "--config", lab.config, "--state-dir", state], environment: ["ALERT_RADIUS_METERS": "50"])
        #expect(radius.status == 64)
        #expect(radius.stderr.contains("ALERT_RADIUS_METERS: 50 is outside 100–10000 meters"))
        try await waitForBackgroundRuns(state)
    }
}
#endif
