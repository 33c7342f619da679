#if Fprintd
import Foundation
import TestSupport
import Testing

@Suite("fieldhal bio against a real fprintd")
struct BiometricsCLITests {
    @Test(arguments: CLIWay.allCases)
    func enrollStatusVerifyThroughTheCLI(_ way: CLIWay) async throws {
        try await eachWay(way) {
            let lab = try await FprintdLab.start()
            defer { lab.stop() }
            let config = scratch("fprintd.toml")
            let example = try String(contentsOf: CLI.repositoryRoot.appendingPathComponent("examples/fprintd-kit.toml"), encoding: .utf8)
            try example.replacingOccurrences(of: #"# bus_address = "unix:path=/run/dbus/system_bus_socket""#, with: #"bus_address = "\#(lab.busAddress)""#)
                .replacingOccurrences(of: #"# user = "fieldhal""#, with: #"user = "technician""#)
                .write(toFile: config, atomically: true, encoding: .utf8)

            let before = try await CLI.run(["bio", "status", "--config", config])
            #expect(before.status == 0 && before.stdout == "sensor present, no fingers enrolled\n", "\(before.stderr)")

            let toucher = Task { for _ in 0..<5 { try await lab.touch("SCAN finger-7"); try await Task.sleep(for: .milliseconds(300)) } }
            let enrolled = try await CLI.run(["bio", "enroll", "--finger", "left-index-finger", "--config", config])
            _ = try? await toucher.value
            #expect(enrolled.status == 0, "\(enrolled.stderr)")
            #expect(enrolled.stdout.split(separator: "\n").suffix(2) == ["stage 4 passed", "enrolled left-index-finger"])

            let after = try await CLI.run(["bio", "status", "--config", config, "--json"])
            #expect(after.stdout.contains("left-index-finger"), "exit \(after.status): \(after.stderr)")

            let match = Task { try await lab.touch("SCAN finger-7") }
            let verified = try await CLI.run(["bio", "verify", "--config", config])
            _ = try? await match.value
            #expect(verified.status == 0 && verified.stdout == "match\n", "exit \(verified.status): \(verified.stdout)\(verified.stderr)")

            let other = Task { try await lab.touch("SCAN finger-8") }
            let refused = try await CLI.run(["bio", "verify", "--config", config])
            _ = try? await other.value
            #expect(refused.status == 1 && refused.stdout == "no-match\n", "exit \(refused.status): \(refused.stdout)\(refused.stderr)")
        }
    }
}
#endif
