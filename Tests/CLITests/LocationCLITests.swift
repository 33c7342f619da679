import Foundation
import TestSupport
import Testing

@Suite("fieldhal keys, location and gps against gpsd")
struct LocationCLITests {
    @Test(arguments: CLIWay.allCases)
    func sealAndOpenThroughTheCLI(_ way: CLIWay) async throws {
        try await eachWay(way) {
            let state = ["FIELDHAL_STATE_DIR": scratch("state")]
            let shown = try await CLI.run(["keys", "show"], environment: state)
            #expect(shown.status == 0, "\(shown.stderr)")
            let publicKey = shown.stdout.trimmingCharacters(in: .newlines)
            #expect(publicKey.count == 44 && publicKey.hasSuffix("="))
            #expect(try await CLI.run(["keys", "show"], environment: state).stdout == shown.stdout, "the key pair is made once")

            let sealed = try await CLI.run(["location", "seal", "--to", publicKey, "--lat", "52.516275", "--lon", "13.377704",
                                      "--acc", "4.5", "--fuzz", "2"], environment: state)
            #expect(sealed.status == 0, "\(sealed.stderr)")
            let payload = sealed.stdout.trimmingCharacters(in: .newlines)
            let opened = try await CLI.run(["location", "open", payload, "--json"], environment: state)
            #expect(opened.status == 0, "\(opened.stderr)")
            let location = try #require(try JSONSerialization.jsonObject(with: Data(opened.stdout.utf8)) as? [String: Any])
            #expect(location["lat"] as? Double == 52.52 && location["lon"] as? Double == 13.38)
            #expect((location["acc"] as? Double ?? 0) > 500, "accuracy widened to the rounding")

            // Another kit's key cannot open it; a flipped character is refused as bad data (65).
            let other = try await CLI.run(["location", "open", payload], environment: ["FIELDHAL_STATE_DIR": scratch("other")])
            #expect(other.status == 65 && other.stderr.contains("sealed for another device"))
            var altered = Array(payload)
            altered[10] = altered[10] == "A" ? "B" : "A"
            let tampered = try await CLI.run(["location", "open", String(altered)], environment: state)
            #expect(tampered.status == 65 && tampered.stderr.split(separator: "\n").count == 1)
            // Nothing the CLI prints holds more than the public key.
            #expect(!shown.stdout.contains("secret") && !opened.stdout.contains("secret"))
        }
    }

    @Test(arguments: CLIWay.allCases)
    func namedRecipientBringsTheirFuzzAndSealFromTheGPS(_ way: CLIWay) async throws {
        try await eachWay(way) {
            let state = ["FIELDHAL_STATE_DIR": scratch("state")]
            let publicKey = try await CLI.run(["keys", "show"], environment: state).stdout.trimmingCharacters(in: .newlines)
            let config = scratch("sharing.toml")
            try String(contentsOfFile: CLI.exampleConfig, encoding: .utf8).appending("""

                [location_sharing]
                window_s = 120
                recipients = [ { name = "alice", key = "\(publicKey)", fuzz = 3 } ]
                """).write(toFile: config, atomically: true, encoding: .utf8)
            let sealed = try await CLI.run(["location", "seal", "--to", "alice", "--from-gps", "--config", config, "--json"], environment: state)
            #expect(sealed.status == 0, "\(sealed.stderr)")
            let result = try #require(try JSONSerialization.jsonObject(with: Data(sealed.stdout.utf8)) as? [String: Any])
            let location = try #require(result["location"] as? [String: Any])
            #expect(location["lat"] as? Double == 52.516, "the example track's first point, to 3 decimals")
            let opened = try await CLI.run(["location", "open", result["payload"] as! String, "--config", config], environment: state)
            #expect(opened.status == 0 && opened.stdout.hasPrefix("52.516000, 13.378000"), "\(opened.stderr)")
        }
    }

    #if GPS
    @Test(arguments: CLIWay.allCases)
    func gpsFixReadsFromARunningGpsd(_ way: CLIWay) async throws {
        try await eachWay(way) {
            let gpsd = try await GPSFake.start(log: GPSFake.logPath("moving-3d.nmea"))
            defer { gpsd.kill() }
            let config = scratch("gpsd.toml")
            let example = try String(contentsOf: CLI.repositoryRoot.appendingPathComponent("examples/gpsd-kit.toml"), encoding: .utf8)
            try example.replacingOccurrences(of: "port = 2947", with: "port = \(gpsd.port)")
                .write(toFile: config, atomically: true, encoding: .utf8)

            // A generous timeout: on a loaded CI machine gpsd can take seconds to recognise the
            // NMEA stream on its pty before it reports anything.
            let fix = try await CLI.run(["gps", "fix", "--timeout", "20", "--config", config, "--json"])
            #expect(fix.status == 0, "\(fix.stderr)")
            let reading = try #require(try JSONSerialization.jsonObject(with: Data(fix.stdout.utf8)) as? [String: Any])
            #expect(reading["source"] as? String == "live")
            let position = try #require(reading["fix"] as? [String: Any])
            #expect(abs((position["latitude"] as? Double ?? 0) - 52.5205) < 0.0006, "a point of the log's track")

            gpsd.kill()
            let stopped = try await CLI.run(["gps", "fix", "--config", config])
            #expect(stopped.status == 69 && stopped.stderr.contains("cannot connect to gpsd"), "\(stopped.stderr)")
        }
    }
    #endif
}
