import Foundation
import TestSupport
import Testing

/// Attacks a local user without a grant can make on a running daemon (issue 41), made for
/// real: another uid, the real socket, a real lab server receiving the evidence.
@Suite(.serialized, .timeLimit(.minutes(4)))
struct HostileLocalUserTests {
    static let flooder = 4242
    static let granted = 4343

    /// The slow-header flood that once held the daemon at its descriptor limit and cost a
    /// duress sign-in its evidence: 2,000 connections from a uid with no grant, each sending
    /// half a request head and one header line a second, opened again as soon as they are
    /// closed. A granted uid polling `GET /v1/status` meanwhile is answered, the daemon holds
    /// few descriptors, and a duress sign-in through the daemon delivers every item and the
    /// manifest. Latencies are printed for `docs/reliability.md`; their bound is a benchmark's.
    @Test(.enabled(if: APITests.canSwitchUser, "needs root or passwordless sudo to start callers as another uid"))
    func aFloodFromAUserWithoutAGrantCostsTheKitNothing() async throws {
        let lab = try await SignInLab.start()
        defer { Task { await lab.running.stop() } }
        let state = try await lab.stateDirectory()
        let place = scratch("flood")
        try FileManager.default.createDirectory(atPath: place, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        let socket = place + "/api.sock"
        let config = place + "/kit.toml"
        try (try String(contentsOfFile: lab.config, encoding: .utf8)
             + "\n[api]\nsocket = \"\(socket)\"\ngrants = [{ user = \"\(Self.granted)\", allow = [\"status\"] }]\n")
            .write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(["--config", config, "--state-dir", state, "--upload-interval", "1"])
        #expect(await daemon.waitForLine(containing: "api: serving on \(socket)", timeout: .seconds(20)) != nil, "\(daemon.output)")

        let peer = CLI.repositoryRoot.appendingPathComponent("Tests/TestSupport/Peers/api-flood.py").path
        let flood = try DaemonProcess([peer, "flood", socket, "--uid", "\(Self.flooder)", "--connections", "2000", "--seconds", "120"],
                                      command: [], executable: "/usr/bin/python3")
        #expect(await flood.waitForLine(containing: "\"flooding\"", timeout: .seconds(30)) != nil, "\(flood.output)")

        async let polled = CLI.runTool("/usr/bin/python3", [peer, "poll", socket, "--uid", "\(Self.granted)", "--requests", "200", "--interval-ms", "50"])
        let (signIn, _) = try await lab.signIn(SignInLab.user.duress, state: state, config: config)
        #expect(signIn.status == 0, "\(signIn.stdout)\(signIn.stderr)")
        let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(daemon.process.processIdentifier)/fd").count) ?? -1

        // The evidence of one duress sign-in: TEXT and the manifest (a TEXT), NEARBY twice,
        // PHOTO, AUDIO and VIDEO, each on the lab server.
        let evidence = try await offPool { () -> [String: Int] in
            let deadline = ContinuousClock.now + .seconds(90)
            var kinds: [String: Int] = [:]
            while ContinuousClock.now < deadline {
                kinds = Dictionary(grouping: try lab.running.server.evidence(), by: \.kind).mapValues(\.count)
                if kinds.values.reduce(0, +) >= 7 { break }
                usleep(200_000)
            }
            return kinds
        }
        let poll = try await polled
        let flooded = await flood.stop()
        #expect(evidence == ["TEXT": 2, "NEARBY": 2, "PHOTO": 1, "AUDIO": 1, "VIDEO": 1], "\(evidence)")
        #expect(try lab.running.server.alerts(tenantKey: SignInLab.tenantKey).count == 1)

        let answer = try JSONSerialization.jsonObject(with: Data(poll.stdout.utf8)) as? [String: Any] ?? [:]
        let answered = answer["answered"] as? Int ?? 0
        let latencies = (answer["latencies_ms"] as? [Double] ?? []).sorted()
        #expect(answered >= 198, "a granted client answered \(answered) of 200 times: \(poll.stdout)\(poll.stderr)")
        #expect(descriptors >= 0 && descriptors < 300, "the daemon holds \(descriptors) descriptors under the flood")
        let percentile = { (p: Double) in latencies.isEmpty ? -1 : latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))] }
        print("flood: \(answered)/200 status answers, p50 \(percentile(0.5)) ms, p99 \(percentile(0.99)) ms, max \(latencies.last ?? -1) ms;"
              + " daemon descriptors \(descriptors); flooder \(flood.output.last ?? "") (exit \(flooded.status))")
        let stopped = await daemon.stop()
        #expect(stopped.status == 0, "the daemon exited \(stopped.status) after \(stopped.took): \(daemon.output.joined(separator: "\n"))")
    }

    /// Requests the HTTP decoder refuses, and bodies cut short or badly framed, get a 4xx in
    /// the documented error shape with a `detail` that says what was wrong — never a 5xx,
    /// never an empty 400 (they were 500 `io` and bodiless 400s).
    @Test func malformedRequestsGetDocumentedAnswers() async throws {
        let state = scratch("malformed-state")
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let daemon = try DaemonProcess(["--state-dir", state])
        #expect(await daemon.waitForLine(containing: "api: serving on", timeout: .seconds(20)) != nil, "\(daemon.output)")
        let probe = #"""
        import json, socket, sys
        def ask(data, half=False):
            s = socket.socket(socket.AF_UNIX); s.settimeout(15); s.connect(sys.argv[1]); s.sendall(data)
            if half: s.shutdown(socket.SHUT_WR)
            out = b""
            while b"\r\n\r\n" not in out or len(out.split(b"\r\n\r\n", 1)[1]) < int(dict(l.split(b": ", 1) for l in out.split(b"\r\n\r\n")[0].split(b"\r\n")[1:] if b": " in l).get(b"Content-Length", b"0").decode() or 0):
                chunk = s.recv(65536)
                if not chunk: break
                out += chunk
            head, _, body = out.partition(b"\r\n\r\n")
            error = json.loads(body or b"{}").get("error", {})
            print(head.split(b"\r\n")[0].decode(), error.get("status"), error.get("kind"), "|", error.get("detail"))
        post = b"POST /v1/haptics/play HTTP/1.1\r\nHost: k\r\nContent-Type: application/json\r\n"
        ask(b"HELLO\r\n\r\n")
        ask(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        ask(b"GET /v1/status HTTP/1.1\r\nHost: k\r\nX-A: " + b"a" * 100000 + b"\r\n\r\n")
        ask(post + b"Content-Length: -5\r\n\r\n")
        ask(post + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        ask(post + b"Content-Length: 100\r\n\r\n{\"pattern\":", half=True)
        ask(post + b"Transfer-Encoding: chunked\r\n\r\n5\r\n{\"pat", half=True)
        ask(post + b"Transfer-Encoding: chunked\r\n\r\nZZ\r\nabc\r\n")
        ask(b"POST /v1/nfc/read HTTP/1.1\r\nHost: k\r\nContent-Type: application/json\r\nContent-Length: 17\r\nConnection: close\r\n\r\n{\"timeoutMs\":1.5}")
        """#
        let result = try await CLI.runTool("/usr/bin/python3", ["-c", probe, state + "/api.sock"])
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 9, "\(result.stdout)\(result.stderr)")
        let expected = [
            "HTTP/1.1 400 Bad Request 400 invalidArgument | the request line names no HTTP method",
            "HTTP/1.1 400 Bad Request 400 invalidArgument | not an HTTP/1.1 request the daemon can read",
            "HTTP/1.1 431 Request Header Fields Too Large 431 invalidArgument | the request head is larger than the daemon reads (80 KiB)",
            "HTTP/1.1 400 Bad Request 400 invalidArgument | Content-Length is not a whole number of bytes",
            "HTTP/1.1 400 Bad Request 400 invalidArgument | not an HTTP/1.1 request the daemon can read",
            "HTTP/1.1 400 Bad Request 400 invalidArgument | the body ended before its Content-Length or last chunk",
            "HTTP/1.1 400 Bad Request 400 invalidArgument | the body ended before its Content-Length or last chunk",
            "HTTP/1.1 400 Bad Request 400 invalidArgument | a chunk size is not a hexadecimal number",
            "HTTP/1.1 400 Bad Request 400 invalidArgument | timeoutMs is not a whole number",
        ]
        for (line, want) in zip(lines, expected) { #expect(line == want) }
        #expect(await daemon.stop().status == 0, "\(daemon.output.suffix(10))")
    }

    /// A tag's text record holding an escape sequence that clears the screen and a newline
    /// that forges a line: `nfc read` prints both as `\u001b` and `\u000a` on the record's
    /// one line, alone and through the daemon.
    @Test(arguments: CLIWay.allCases)
    func controlCharactersFromATagComeOutEscaped(_ way: CLIWay) async throws {
        try await eachWay(way) {
            let config = scratch("escapes.toml")
            try #"""
            [nfc]
            plugin = "fake"
            tags = [{ type = "ntag213", uid = "04:A1:B2:C3:D4:E5:F6", text = "ok\u001b[2J\nfieldhal stopped" }]
            """#.write(toFile: config, atomically: true, encoding: .utf8)
            let read = try await CLI.run(["nfc", "read", "--timeout", "5", "--config", config])
            #expect(read.status == 0, "\(read.stderr)")
            #expect(!read.stdout.unicodeScalars.contains { $0.value == 0x1B }, "an escape reached the terminal: \(read.stdout.debugDescription)")
            #expect(read.stdout.contains(#"text: ok\u001b[2J\u000afieldhal stopped"#), "\(read.stdout.debugDescription)")
            #expect(!read.stdout.split(separator: "\n").contains { $0.hasPrefix("fieldhal stopped") }, "a forged line")
            // JSON keeps the value whole; the encoder escapes it.
            let json = try await CLI.run(["nfc", "read", "--timeout", "5", "--json", "--config", config])
            #expect(json.stdout.contains(#"ok\u001b[2J\nfieldhal stopped"#), "\(json.stdout)")
        }
    }
}
