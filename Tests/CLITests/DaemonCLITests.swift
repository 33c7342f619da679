import FieldHALAPI
import FieldHALClient
import Foundation
import TestSupport
import Testing
import Transrify
import TransrifyLabServer

@Suite(.serialized, .timeLimit(.minutes(3)))
struct DaemonCLITests {
    enum Transport: String, CaseIterable { case polling, webSocket }

    /// Kit B runs the daemon; kit A signs in under duress; B's journal shows the banner
    /// within one poll interval (polling every second), or at once over the WebSocket
    /// channel (polling once a minute), with the haptic warning and the soft alert sound.
    /// SIGTERM then stops it cleanly.
    @Test(arguments: Transport.allCases)
    func aDuressAlertReachesTheDaemon(over transport: Transport) async throws {
        let lab = try await SignInLab.start()
        defer { Task { await lab.running.stop() } }
        try lab.running.server.addUser(tenantKey: SignInLab.tenantKey, customerRef: "bob02", pin: "8024", duressPin: "9753")
        let feedback = scratch("feedback.jsonl")
        // The kits reach the server through a link with 50–300 ms each way, as in the field.
        let link = try await LatencyProxy.start(targetPort: lab.running.port)
        defer { link.stop() }
        let settings = switch transport {
        case .polling: "alert_poll_interval_ms = 1000"
        case .webSocket: "alert_poll_interval_ms = 60000\nalerts_websocket_url = \"ws://127.0.0.1:\(link.port)/v1/alerts/ws\""
        }
        let config = scratch("daemon.toml")
        try (try String(contentsOfFile: lab.config, encoding: .utf8))
            .replacingOccurrences(of: lab.running.baseURL.absoluteString, with: link.baseURL)
            .replacingOccurrences(of: "evidence_audio_seconds = 1", with: "evidence_audio_seconds = 1\n\(settings)")
            .replacingOccurrences(of: "[speaker]\nplugin = \"fake\"", with: "[speaker]\nplugin = \"fake\"\nlog_file = \"\(feedback)\"")
            .replacingOccurrences(of: "[haptics]\nplugin = \"fake\"", with: "[haptics]\nplugin = \"fake\"\nlog_file = \"\(feedback)\"")
            .write(toFile: config, atomically: true, encoding: .utf8)
        let stateA = try await lab.stateDirectory(), stateB = try await lab.stateDirectory()
        let signInB = try await CLI.run(["signin", "--customer-ref", "bob02", "--pin-stdin", "--config", config, "--state-dir", stateB], input: "8024\n")
        #expect(signInB.status == 0)
        try await waitForBackgroundRuns(stateB)
        let daemon = try DaemonProcess(["--config", config, "--state-dir", stateB])
        #expect(await daemon.waitForLine(containing: "running; state", timeout: .seconds(10)) != nil, "\(daemon.output)")
        let ready = transport == .webSocket ? "alerts: over the WebSocket channel" : "alerts: polling every 1 s"
        #expect(await daemon.waitForLine(containing: ready, timeout: .seconds(10)) != nil, "\(daemon.output)")

        // `alerts watch` on kit B follows the daemon's alert events (it would otherwise
        // subscribe a second time and announce the alert twice).
        let watch = Task { try await CLI.run(["alerts", "watch", "--seconds", "8", "--config", config, "--state-dir", stateB]) }
        try await Task.sleep(for: .seconds(1))
        let signedIn = ContinuousClock.now
        let signInA = try await CLI.run(["signin", "--customer-ref", "alice01", "--pin-stdin", "--config", config, "--state-dir", stateA], input: "1357\n")
        #expect(signInA.status == 0)
        let banner = await daemon.waitForLine(containing: "Nearby Duress Alert — alice01", timeout: .seconds(10))
        #expect(banner != nil, "\(daemon.output)")
        if let banner {
            let latency = banner.1 - signedIn
            // Includes kit A's whole sign-in (argon2id on the lab server). Measured alone:
            // 0.1 s over the channel, 1–1.3 s polling every 1 s (docs/performance.md); 5 s
            // leaves room for a loaded CI machine and is far below the channel test's 60 s poll.
            #expect(latency < .seconds(5), "\(transport): \(latency)")
            print("alert latency, duress sign-in on A → banner in B's daemon (\(transport)): \(latency)")
        }
        // Req 29: the haptic warning and the soft alert sound, once.
        var played: [String] = []
        for _ in 0..<100 where played.count < 2 {
            played = ((try? String(contentsOfFile: feedback, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
            try await Task.sleep(for: .milliseconds(20))
        }
        let watched = try await watch.value
        #expect(watched.status == 0 && watched.stdout.hasPrefix("Nearby Duress Alert — alice01, about ")
                && watched.stdout.split(separator: "\n").count == 1, "\(watched)")
        let listening = transport == .webSocket ? "over the WebSocket channel" : "polling every 1 s"
        #expect(watched.stderr == "fieldhal: alerts through the daemon (\(listening))\n", "\(watched.stderr)")
        #expect(played.filter { $0.contains("\"sound\":\"soft-alert\"") }.count == 1, "announced once, by the daemon: \(played)")
        #expect(played.filter { $0.contains("\"pattern\":\"warning\"") }.count == 1, "\(played)")
        #expect(!daemon.output.contains { $0.contains("alice01") && !$0.contains("Nearby Duress Alert") })
        if transport == .webSocket {
            // Req 25.5 / 35.5: signing out ends the subscription; the channel closes.
            #expect(lab.running.server.openAlertChannels == 1)
            let signOut = try await CLI.run(["signout", "--config", config, "--state-dir", stateB])
            #expect(signOut.status == 0)
            for _ in 0..<150 where lab.running.server.openAlertChannels > 0 { try await Task.sleep(for: .milliseconds(20)) }
            #expect(lab.running.server.openAlertChannels == 0, "the channel outlived the session")
        }
        let stopped = await daemon.stop(SIGTERM)
        #expect(stopped.status == 0, "\(daemon.output)")
        // Well inside the unit's TimeoutStopSec=30s; the measured figure is in docs/reliability.md.
        #expect(stopped.took < .seconds(10), "graceful stop took \(stopped.took)")
        #expect(daemon.output.last?.contains("fieldhal stopped") == true, "\(daemon.output)")
        try await waitForBackgroundRuns(stateA)
    }

    /// `alerts watch` in a terminal: the banner on stdout, the channel on stderr, feedback played.
    @Test func alertsWatchShowsTheBannerAndSaysHowItListens() async throws {
        let lab = try await SignInLab.start()
        defer { Task { await lab.running.stop() } }
        try lab.running.server.addUser(tenantKey: SignInLab.tenantKey, customerRef: "bob02", pin: "8024", duressPin: "9753")
        let feedback = scratch("watch-feedback.jsonl")
        let config = scratch("watch.toml")
        try (try String(contentsOfFile: lab.config, encoding: .utf8))
            .replacingOccurrences(of: "evidence_audio_seconds = 1", with: "evidence_audio_seconds = 1\nalerts_websocket_url = \"ws://127.0.0.1:\(lab.running.port)/v1/alerts/ws\"")
            .replacingOccurrences(of: "[speaker]\nplugin = \"fake\"", with: "[speaker]\nplugin = \"fake\"\nlog_file = \"\(feedback)\"")
            .write(toFile: config, atomically: true, encoding: .utf8)
        let stateA = try await lab.stateDirectory(), stateB = try await lab.stateDirectory()
        let signInA = try await CLI.run(["signin", "--customer-ref", "alice01", "--pin-stdin", "--config", config, "--state-dir", stateA], input: "1357\n")
        #expect(signInA.status == 0)
        try await waitForBackgroundRuns(stateA)
        let signInB = try await CLI.run(["signin", "--customer-ref", "bob02", "--pin-stdin", "--config", config, "--state-dir", stateB], input: "8024\n")
        #expect(signInB.status == 0)
        try await waitForBackgroundRuns(stateB)
        // The alert is older than the channel: the snapshot on connecting brings it.
        let watch = try await CLI.run(["alerts", "watch", "--seconds", "2", "--config", config, "--state-dir", stateB])
        #expect(watch.status == 0, "\(watch.stderr)")
        #expect(watch.stdout.hasPrefix("Nearby Duress Alert — alice01, about "), "\(watch.stdout)")
        #expect(watch.stdout.split(separator: "\n").count == 1, "debounced: \(watch.stdout)")
        #expect(watch.stderr == "fieldhal: alerts over the WebSocket channel\n")
        #expect(try String(contentsOfFile: feedback, encoding: .utf8).contains("\"sound\":\"soft-alert\""))

        // Req 29.3 across processes: the debounce record is sealed in the state directory,
        // so a second watcher within 60 s does not announce the same alert again.
        let again = try await CLI.run(["alerts", "watch", "--seconds", "2", "--config", config, "--state-dir", stateB])
        #expect(again.status == 0 && again.stdout.isEmpty, "announced twice within 60 s: \(again.stdout)")

        // Req 29: a kit with neither haptics nor a speaker still shows the banner.
        let stateC = try await lab.stateDirectory()
        let signInC = try await CLI.run(["signin", "--customer-ref", "bob02", "--pin-stdin", "--config", config, "--state-dir", stateC], input: "8024\n")
        #expect(signInC.status == 0)
        try await waitForBackgroundRuns(stateC)
        let silentConfig = scratch("watch-silent.toml")
        try (try String(contentsOfFile: config, encoding: .utf8))
            .replacingOccurrences(of: "[speaker]\nplugin = \"fake\"", with: "[speaker]\nplugin = \"fake\"\nenabled = false")
            .replacingOccurrences(of: "[haptics]\nplugin = \"fake\"", with: "[haptics]\nplugin = \"fake\"\nenabled = false")
            .write(toFile: silentConfig, atomically: true, encoding: .utf8)
        let silent = try await CLI.run(["alerts", "watch", "--seconds", "2", "--config", silentConfig, "--state-dir", stateC])
        #expect(silent.status == 0, "\(silent.stderr)")
        #expect(silent.stdout.hasPrefix("Nearby Duress Alert — alice01, about "), "\(silent.stdout)")
        #expect(try String(contentsOfFile: silentConfig, encoding: .utf8).components(separatedBy: "enabled = false").count == 3)
        let sounds = try String(contentsOfFile: feedback, encoding: .utf8).components(separatedBy: "\"sound\":\"soft-alert\"").count - 1
        #expect(sounds == 1, "the disabled speaker played nothing")

        // No channel: polling, said once; a bad URL is a configuration error.
        let broken = try await CLI.run(["alerts", "watch", "--seconds", "1", "--config", config, "--state-dir", stateB],
                                       environment: ["ALERTS_WEBSOCKET_URL": "http://127.0.0.1/ws"])
        #expect(broken.status == 78, "\(broken.stderr)")
        #expect(broken.stderr.contains("alerts_websocket_url: \"http://127.0.0.1/ws\" is not a ws:// or wss:// URL"), "\(broken.stderr)")
    }

    /// The API socket under hostile or broken clients: garbage, an endless header line and
    /// silence each get an HTTP error or a hang-up within the idle bound, and the daemon goes
    /// on answering.
    @Test func theAPISocketSurvivesBadClients() async throws {
        let state = scratch("socket-state")
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let daemon = try DaemonProcess(["--state-dir", state])
        #expect(await daemon.waitForLine(containing: "api: serving on", timeout: .seconds(10)) != nil, "\(daemon.output)")
        let socket = state + "/api.sock"
        let probe = """
        import socket, sys, time
        def ask(payload):
            s = socket.socket(socket.AF_UNIX); s.settimeout(20); s.connect(sys.argv[1]); start = time.time()
            try:
                if payload: s.sendall(payload)
                data = s.recv(4096)
            except OSError as error:
                data = b""
            first = data.decode(errors="replace").split("\\r\\n")[0] if data else "hang-up"
            print(round(time.time() - start, 1), first)
        ask(b"hello\\r\\n\\r\\n"); ask(b"GET /v1/status HTTP/1.1\\r\\nX: " + b"x" * 100000); ask(None)
        ask(b"GET /v1/status HTTP/1.1\\r\\nHost: k\\r\\nConnection: close\\r\\n\\r\\n")
        """
        let output = try await offPool { () -> String in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            process.arguments = ["-c", probe, socket]
            let pipe = Pipe()
            process.standardOutput = pipe
            try process.run()
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return String(decoding: data, as: UTF8.self)
        }
        let lines = output.split(separator: "\n").map(String.init)
        #expect(lines.count == 4, "\(output)")
        guard lines.count == 4 else { return }
        func refused(_ line: String) -> Bool { line.contains("HTTP/1.1 4") || line.hasSuffix("hang-up") }
        #expect(refused(lines[0]), "garbage: \(lines[0])")
        #expect(refused(lines[1]), "an endless header is cut off: \(lines[1])")
        let silence = Double(lines[2].split(separator: " ")[0]) ?? 0
        #expect(lines[2].hasSuffix("hang-up") && silence >= 9.5 && silence <= 12, "silence is let go after 10 s: \(lines[2])")
        #expect(lines[3].hasSuffix("HTTP/1.1 200 OK"), "\(lines[3])")
        #expect(await daemon.stop().status == 0)
        #expect(!FileManager.default.fileExists(atPath: socket))
    }

    /// SIGTERM while the daemon uploads evidence: a clean exit, and every item arrives once.
    @Test func sigtermDuringUploadsLosesNothing() async throws {
        let lab = try await SignInLab.start()
        defer { Task { await lab.running.stop() } }
        let state = try await lab.stateDirectory()
        let options = ["--config", lab.config, "--state-dir", state]
        for seconds in [20, 25, 30] {
            let captured = try await CLI.run(["evidence", "capture", "audio", "--seconds", "\(seconds)", "--incident", "inc-term"] + options)
            #expect(captured.status == 0, "\(captured.stderr)")
        }
        let daemon = try DaemonProcess(["--upload-interval", "1"] + options)
        _ = await daemon.waitForLine(containing: "running; state", timeout: .seconds(10))
        try await Task.sleep(for: .milliseconds(150))
        let stopped = await daemon.stop(SIGTERM)
        #expect(stopped.status == 0, "\(daemon.output)")
        let uploadedByDaemon = try lab.running.server.evidence().count
        let flush = try await CLI.run(["evidence", "flush"] + options)
        #expect(flush.status == 0, "\(flush.stdout)\(flush.stderr)")
        let evidence = try lab.running.server.evidence()
        #expect(evidence.count == 3, "every item exactly once (\(uploadedByDaemon) before SIGTERM)")
        #expect(Set(evidence.map(\.key)).count == 3)
    }

    /// The commands a daemon serves say the same, with the same exit codes, whether they go
    /// through it or do the work themselves: the same steps on two kits, one with a daemon.
    @Test func commandsSayTheSameThroughTheDaemon() async throws {
        let lab = try await SignInLab.start()
        defer { Task { await lab.running.stop() } }
        let alone = try await lab.stateDirectory(), served = try await lab.stateDirectory()
        let daemon = try DaemonProcess(["--config", lab.config, "--state-dir", served])
        #expect(await daemon.waitForLine(containing: "api: serving on", timeout: .seconds(20)) != nil, "\(daemon.output)")
        // The lock's state on the daemon's event stream meanwhile.
        let lockEvents = Task {
            var seen: [APILockStatus] = []
            do {
                for try await event in FieldHALClient(socketPath: served + "/api.sock").events([.lock]) {
                    if case .lock(let status) = event { seen.append(status) }
                }
            } catch {}
            return seen
        }
        let steps: [(arguments: [String], input: String)] = [
            (["daemon", "status"], ""),
            (["status"], ""),
            (["status", "--json"], ""),
            (["camera", "formats"], ""),
            (["camera", "formats", "--json"], ""),
            (["lock", "status"], ""),
            (["session"], ""),
            (["signin", "--customer-ref", "alice01", "--pin-stdin"], "9999\n"),
            (["signin", "--customer-ref", "a!", "--pin-stdin"], "2468\n"),
            (["signin", "--customer-ref", "alice01", "--pin-stdin"], "12\n"),
            (["lock", "unlock", "--pin-stdin"], "2580\n"),
            (["lock", "settings", "--pin-stdin", "--relock", "1m"], "2580\n"),
            (["signin", "--customer-ref", "alice01", "--pin-stdin"], "2468\n"),
            (["signin", "--customer-ref", "alice01", "--pin-stdin", "--json"], "2468\n"),
            (["session"], ""),
            (["session", "--json"], ""),
            (["session", "--verify"], ""),
            (["alerts"], ""),
            (["lock", "setup", "--pin-stdin"], "2580\n2581\n"),
            (["lock", "setup", "--pin-stdin", "--duress"], "2580\n2580\n2580\n"),
            (["lock", "setup", "--pin-stdin", "--duress"], "2580\n2580\n9173\n"),
            (["lock", "setup", "--pin-stdin"], "1357\n1357\n"),
            (["lock", "reset"], ""),
            (["lock", "unlock", "--pin-stdin"], "1111\n"),
            (["lock", "unlock", "--pin-stdin"], "2580\n"),
            (["lock", "unlock", "--pin-stdin"], "9173\n"),
            (["lock", "settings", "--pin-stdin", "--relock", "1m"], "1111\n"),
            (["lock", "settings", "--pin-stdin", "--change-pin"], "2580\n4826\n4827\n"),
            (["lock", "settings", "--pin-stdin", "--relock", "2m"], "9173\n"),
            (["lock", "status"], ""),
            (["lock", "status", "--json"], ""),
            (["alerts", "ack", "no-such-alert"], ""),
            (["alerts", "--json"], ""),
            (["signout"], ""),
            (["alerts"], ""),
            (["session"], ""),
            (["session", "--verify"], ""),
            (["alerts", "ack", "no-such-alert"], ""),
        ]
        // A session id's last four characters differ between any two sessions.
        // And `status` names the state directory, which differs by design.
        let mask = { (text: String) in
            text.replacingOccurrences(of: #"…[0-9a-f]{4}"#, with: "…XXXX", options: .regularExpression)
                .replacingOccurrences(of: alone, with: "STATE").replacingOccurrences(of: served, with: "STATE")
        }
        for step in steps {
            let first = try await CLI.run(step.arguments + ["--config", lab.config, "--state-dir", alone], input: step.input)
            let second = try await CLI.run(step.arguments + ["--config", lab.config, "--state-dir", served], input: step.input)
            let name = step.arguments.joined(separator: " ")
            if step.arguments == ["daemon", "status"] {
                #expect(first.status == 69 && first.stderr.contains("no fieldhal daemon listens at"), "\(first.stderr)")
                #expect(second.status == 0 && second.stdout.contains("signed in: no\nevidence queued: 0"), "\(second.stdout)\(second.stderr)")
                continue
            }
            if step.arguments == ["signin", "--customer-ref", "alice01", "--pin-stdin"], step.input == "2468\n" { #expect(second.stdout.contains("signed in") && second.status == 0, "\(name): \(second)") }
            #expect(first.status == second.status, "\(name): exit \(first.status) alone, \(second.status) through the daemon: \(second.stderr)")
            #expect(mask(first.stdout) == mask(second.stdout), "\(name): stdout\n\(first.stdout)\nvs\n\(second.stdout)")
            #expect(first.stderr == second.stderr, "\(name): stderr\n\(first.stderr)\nvs\n\(second.stderr)")
        }
        // An emergency reset would pull the daemon's socket and open state from under it:
        // refused while a daemon answers, and nothing is erased.
        let reset = try await CLI.run(["lock", "reset", "--yes", "--config", lab.config, "--state-dir", served])
        #expect(reset.status == 69 && reset.stderr.contains("a fieldhal daemon is running") && reset.stderr.contains("systemctl stop"),
                "\(reset)")
        #expect(try await !CLI.run(["lock", "status", "--config", lab.config, "--state-dir", served]).stdout.contains("The lock is off"))
        // The daemon did the work after the sign-ins and unlocks: no background run of its own.
        #expect(backgroundRuns(for: [served]).isEmpty)
        // The stream began with the lock not set up, and heard the set-up and the unlock
        // through the API at once.
        lockEvents.cancel()
        let locks = await lockEvents.value
        #expect(locks.first?.configured == false, "\(locks)")
        #expect(locks.contains { $0.configured && !$0.locked }, "\(locks)")
        #expect(await daemon.stop().status == 0)
    }

    /// `gps fix` and `gps watch` through the daemon. The receiver here is cold for 2 s after
    /// opening (a no-fix first): on its own, `gps fix --timeout 1` opens it and finds no fix;
    /// through the daemon, whose receiver is warm, it gets one at once.
    @Test func gpsGoesThroughTheDaemon() async throws {
        let state = scratch("gps-daemon-state")
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let config = state + ".toml"
        try """
        [gps]
        plugin = "fake"
        interval_ms = 2000
        loop = false
        track = [
          { lat = 0.0, lon = 0.0, mode = "no-fix" },
          { lat = 52.516275, lon = 13.377704, alt = 34.0, acc = 4.5 },
          { lat = 52.516290, lon = 13.377910, alt = 34.1, acc = 4.2 },
          { lat = 52.516302, lon = 13.378115, alt = 34.3, acc = 3.9 },
        ]

        [api]
        socket = "\(state)/api.sock"

        """.write(toFile: config, atomically: true, encoding: .utf8)
        let cold = try await CLI.run(["gps", "fix", "--timeout", "1", "--config", config, "--state-dir", state])
        #expect(cold.status == 75 && cold.stderr.contains("no fix within 1 s"), "\(cold)")
        let key = try await CLI.run(["keys", "show", "--config", config, "--state-dir", state]).stdout
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let coldSeal = try await CLI.run(["location", "seal", "--to", key, "--timeout", "1", "--config", config, "--state-dir", state])
        #expect(coldSeal.status == 75, "\(coldSeal)")
        let daemon = try DaemonProcess(["--config", config, "--state-dir", state])
        #expect(await daemon.waitForLine(containing: "api: serving on", timeout: .seconds(20)) != nil, "\(daemon.output)")
        for try await event in FieldHALClient(socketPath: state + "/api.sock").events([.fix]) {
            if case .fix(let fix, _) = event, fix.hasPosition { break }
        }
        let warm = try await CLI.run(["gps", "fix", "--timeout", "1", "--config", config, "--state-dir", state])
        #expect(warm.status == 0 && warm.stdout.hasPrefix("52.51") && warm.stdout.contains(" s old)\n"), "\(warm)")
        let sealed = try await CLI.run(["location", "seal", "--to", key, "--timeout", "1", "--config", config, "--state-dir", state])
        #expect(sealed.status == 0 && sealed.stdout.count > 40, "\(sealed)")
        let opened = try await CLI.run(["location", "open", sealed.stdout.trimmingCharacters(in: .whitespacesAndNewlines),
                                        "--config", config, "--state-dir", state])
        #expect(opened.status == 0 && opened.stdout.hasPrefix("52.51"), "\(opened)")
        let json = try await CLI.run(["gps", "fix", "--timeout", "1", "--json", "--config", config, "--state-dir", state])
        #expect(json.status == 0 && json.stdout.contains("\"latitude\" : 52.51"), "\(json)")
        let watched = try await CLI.run(["gps", "watch", "--count", "2", "--config", config, "--state-dir", state])
        #expect(watched.status == 0 && watched.stdout.split(separator: "\n").count == 2 && watched.stdout.contains(" 3d 52.51"), "\(watched)")
        // A fix no receiver gives: the CLI's advice, not the API's parameters.
        let none = try await CLI.run(["gps", "fix", "--timeout", "0.3", "--max-age", "0", "--accuracy", "0.001",
                                      "--config", config, "--state-dir", state])
        #expect(none.status == 75 && none.stderr.contains("raise --timeout / --max-age") && !none.stderr.contains("timeout_ms"), "\(none)")
        #expect(await daemon.stop().status == 0)
    }

    /// `gps watch` and `nfc watch` follow several devices at once, each line naming its own,
    /// the same with no daemon and through one (issue 43); a name the kit lacks is a usage
    /// error that lists the names it has.
    @Test func watchesFollowSeveralDevicesAndNameEach() async throws {
        let state = scratch("watch-devices-state")
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let config = state + ".toml"
        try """
        [gps.left]
        plugin = "fake"
        interval_ms = 100
        track = [{ lat = 52.5, lon = 13.4, alt = 34.0, acc = 4.0 }]

        [gps.right]
        plugin = "fake"
        interval_ms = 100
        track = [{ lat = 48.1, lon = 11.6, alt = 520.0, acc = 3.0 }]

        [nfc.front]
        plugin = "fake"
        tags = [{ type = "ntag213", uid = "04:01:02:03:04:05:06", text = "front door" }]

        [nfc.back]
        plugin = "fake"
        tags = [{ type = "ntag213", uid = "04:0A:0B:0C:0D:0E:0F", text = "back door" }]

        [api]
        socket = "\(state)/api.sock"

        """.write(toFile: config, atomically: true, encoding: .utf8)
        let kit = ["--config", config, "--state-dir", state]
        func watchBoth(_ way: String) async throws {
            let fixes = try await CLI.run(["gps", "watch", "--device", "left", "--device", "right", "--count", "8"] + kit)
            let lines = fixes.stdout.split(separator: "\n")
            #expect(fixes.status == 0 && lines.count == 8, "\(way): \(fixes)")
            #expect(lines.contains { $0.hasPrefix("left: ") && $0.contains(" 3d 52.5") }, "\(way): \(fixes.stdout)")
            #expect(lines.contains { $0.hasPrefix("right: ") && $0.contains(" 3d 48.1") }, "\(way): \(fixes.stdout)")
            let json = try await CLI.run(["gps", "watch", "--device", "left", "--device", "right", "--count", "8", "--json"] + kit)
            let devices = Set(json.stdout.split(separator: "\n").compactMap { line in
                (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["device"] as? String
            })
            #expect(json.status == 0 && devices == ["left", "right"], "\(way): \(json)")
            // --all: every reader the configuration names.
            let tags = try await CLI.run(["nfc", "watch", "--all", "--count", "2"] + kit)
            #expect(tags.status == 0, "\(way): \(tags)")
            #expect(tags.stdout.contains("front: found type2 tag 04:01:02:03:04:05:06: text \"front door\""), "\(way): \(tags.stdout)")
            #expect(tags.stdout.contains("back: found type2 tag 04:0A:0B:0C:0D:0E:0F: text \"back door\""), "\(way): \(tags.stdout)")
            let one = try await CLI.run(["nfc", "watch", "--device", "back", "--count", "1", "--json"] + kit)
            let event = try JSONSerialization.jsonObject(with: Data(one.stdout.utf8)) as? [String: Any]
            #expect(one.status == 0 && event?["device"] as? String == "back" && event?["state"] as? String == "found", "\(way): \(one)")
            let missing = try await CLI.run(["gps", "watch", "--device", "middle", "--count", "1"] + kit)
            #expect(missing.status == 64 && missing.stderr.contains("left, right"), "\(way): \(missing)")
        }
        try await watchBoth("no daemon")
        let daemon = try DaemonProcess(kit)
        #expect(await daemon.waitForLine(containing: "api: serving on", timeout: .seconds(20)) != nil, "\(daemon.output)")
        try await watchBoth("through the daemon")
        #expect(await daemon.stop().status == 0)
    }

    /// A streaming command's lines reach a pipe as they happen (stdio would hold them back
    /// until 4 KiB had gathered: `fieldhal gps watch | grep` showed nothing for minutes).
    @Test func watchLinesReachAPipeAtOnce() async throws {
        let watch = try DaemonProcess(["--config", CLI.exampleConfig, "--state-dir", scratch("watch-state")], command: ["gps", "watch"])
        let first = await watch.waitForLine(containing: " 3d ", timeout: .seconds(10))
        #expect(first != nil && watch.process.isRunning, "the first fix only came when the command ended: \(watch.output)")
        _ = await watch.stop()
    }

    /// Two daemons on one state directory both ran its evidence queue (issue 41): the second
    /// exits 75 naming the first one's pid, even with an API socket of its own, and the first
    /// one's exit (even SIGKILL) frees the directory for the next.
    @Test func aSecondDaemonOnTheSameStateDirectoryExits() async throws {
        let state = scratch("one-daemon")
        let config = scratch("one-daemon.toml")
        try (try String(contentsOfFile: CLI.exampleConfig, encoding: .utf8) + "\n[api]\nsocket = \"\(scratch("second.sock"))\"\n")
            .write(toFile: config, atomically: true, encoding: .utf8)
        let first = try DaemonProcess(["--state-dir", state])
        #expect(await first.waitForLine(containing: "api: serving on", timeout: .seconds(20)) != nil, "\(first.output)")
        let second = try await CLI.run(["run", "--config", config, "--state-dir", state])
        #expect(second.status == 75, "\(second)")
        #expect(second.stderr == "fieldhal: \(state): another daemon (pid \(first.process.processIdentifier)) runs on this state directory"
                + " — stop it (systemctl stop fieldhal) or give this one another --state-dir\n", "\(second.stderr)")
        #expect(await first.stop(SIGKILL).status != 0)
        let third = try DaemonProcess(["--config", config, "--state-dir", state])
        #expect(await third.waitForLine(containing: "api: serving on", timeout: .seconds(20)) != nil, "\(third.output)")
        let stopped = await third.stop()
        #expect(stopped.status == 0, "status \(stopped.status) after \(stopped.took): \(third.output)")
    }

    @Test func sighupReloadsTheConfiguration() async throws {
        let lab = try await SignInLab.start()
        defer { Task { await lab.running.stop() } }
        let state = try await lab.stateDirectory()
        let daemon = try DaemonProcess(["--config", lab.config, "--state-dir", state])
        _ = await daemon.waitForLine(containing: "running; state", timeout: .seconds(10))
        try "[kit]\nbroken = ".write(toFile: lab.config, atomically: true, encoding: .utf8)
        kill(daemon.process.processIdentifier, SIGHUP)
        #expect(await daemon.waitForLine(containing: "configuration not reloaded, the old one stays", timeout: .seconds(5)) != nil, "\(daemon.output)")
        // The header whose 30,000 parts overflowed toml++'s stack, killing the daemon on SIGHUP.
        try ("[" + Array(repeating: "a", count: 30_000).joined(separator: ".") + "]\n").write(toFile: lab.config, atomically: true, encoding: .utf8)
        kill(daemon.process.processIdentifier, SIGHUP)
        #expect(await daemon.waitForLine(containing: "a table header of more than 32 dotted parts", timeout: .seconds(5)) != nil, "\(daemon.output)")
        #expect(daemon.process.isRunning)
        try "[kit]\nname = \"reloaded\"\n".write(toFile: lab.config, atomically: true, encoding: .utf8)
        kill(daemon.process.processIdentifier, SIGHUP)
        #expect(await daemon.waitForLine(containing: "configuration reloaded", timeout: .seconds(5)) != nil, "\(daemon.output)")
        #expect(await daemon.stop().status == 0)
    }
}
