import FieldHAL
import FieldHALAPI
import FieldHALClient
import Foundation
import TestSupport
import Synchronization
import Testing

/// The daemon's hardware API (issue 20), from outside: `fieldhal run` on the fake kit, its
/// socket checked against api/openapi.yaml by `lab/api-contract`, which uses the Python
/// example client — the client a user would copy — and callers of other users made with
/// setpriv, as the kernel reports them.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct APITests {
    /// A directory anyone may enter, holding the socket, a configuration, and copies of the
    /// contract, the checker and the client (a caller of another uid must be able to read them).
    struct Place {
        let directory: String
        var socket: String { directory + "/api.sock" }
        var config: String { directory + "/kit.toml" }
        var checker: String { directory + "/lab/api-contract" }
        var client: String { directory + "/examples/python/fieldhal_api.py" }

        init(api settings: String = "") throws {
            directory = scratch("api")
            let files = FileManager.default
            for folder in ["lab", "examples/python", "api"] {
                try files.createDirectory(atPath: directory + "/" + folder, withIntermediateDirectories: true)
            }
            for file in ["lab/api-contract", "examples/python/fieldhal_api.py", "api/openapi.yaml"] {
                try files.copyItem(atPath: CLI.repositoryRoot.appendingPathComponent(file).path, toPath: directory + "/" + file)
            }
            chmod(directory, 0o755)
            try write(api: settings)
        }

        func write(api settings: String) throws {
            let kit = try String(contentsOfFile: CLI.exampleConfig, encoding: .utf8)
            try (kit + "\n[api]\nsocket = \"\(socket)\"\n\(settings)\n").write(toFile: config, atomically: true, encoding: .utf8)
        }
    }

    /// Whether this test run may start processes as other users (root, or sudo without a password).
    static let canSwitchUser: Bool = getuid() == 0 || (try? CLI.runBlocking(["-n", "true"], executable: URL(fileURLWithPath: "/usr/bin/sudo")).status) == 0

    /// Runs `arguments` as uid 4242 with the given supplementary groups, as the kernel will see it.
    static func asOtherUser(_ arguments: [String], groups: [Int] = []) async throws -> CLI.Result {
        let switchUser = ["--reuid=4242", "--regid=4242"] + (groups.isEmpty ? ["--clear-groups"] : ["--groups=" + groups.map(String.init).joined(separator: ",")])
        let command = getuid() == 0 ? ["/usr/bin/setpriv"] + switchUser : ["/usr/bin/sudo", "-n", "/usr/bin/setpriv"] + switchUser
        return try await CLI.runTool(command[0], Array(command.dropFirst()) + arguments)
    }

    func startDaemon(_ place: Place) async throws -> DaemonProcess {
        let daemon = try DaemonProcess(["--config", place.config, "--state-dir", scratch("api-state")])
        #expect(await daemon.waitForLine(containing: "api: serving on \(place.socket)", timeout: .seconds(20)) != nil, "\(daemon.output)")
        return daemon
    }

    /// Every route, every documented error, the event stream: as the contract says. The
    /// socket is open to all (the kernel's word on the caller decides), and gone after SIGTERM.
    @Test func theAPIAnswersAsItsContractSays() async throws {
        let place = try Place()
        let daemon = try await startDaemon(place)
        let checked = try await CLI.runTool("/usr/bin/python3", [place.checker, "--socket", place.socket])
        #expect(checked.status == 0, "\(checked.stdout)\(checked.stderr)")
        #expect(checked.stdout.contains(" passed, 0 failed"), "\(checked.stdout)")
        let mode = try FileManager.default.attributesOfItem(atPath: place.socket)[.posixPermissions] as? Int
        #expect(mode == 0o666)

        // A second daemon does not take the socket from the first: it says who holds it.
        let second = try DaemonProcess(["--config", place.config, "--state-dir", scratch("api-state-2")])
        #expect(await second.waitForLine(containing: "another daemon (pid \(daemon.process.processIdentifier)) serves the API here",
                                         timeout: .seconds(20)) != nil, "\(second.output)")
        _ = await second.stop()
        let stillServed = try await CLI.runTool("/usr/bin/python3", [place.client, "--socket", place.socket, "status"])
        #expect(stillServed.status == 0, "\(stillServed.stderr)")

        // A client following events is let go when the daemon stops, and the daemon stops at once.
        let follower = Process()
        follower.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        follower.arguments = [place.client, "--socket", place.socket, "events", "--types", "fix"]
        let followed = Pipe()
        follower.standardOutput = followed
        try follower.run()
        try await Task.sleep(for: .seconds(2))
        let stopped = await daemon.stop()
        #expect(stopped.status == 0 && stopped.took < .seconds(5), "\(stopped) \(daemon.output)")
        let exited = try await offPool { () -> Int32 in
            let deadline = ContinuousClock.now + .seconds(5)
            while follower.isRunning, ContinuousClock.now < deadline { usleep(10_000) }
            if follower.isRunning { follower.terminate() }
            follower.waitUntilExit()
            return follower.terminationStatus
        }
        #expect(exited == 0, "the event client was not let go")
        let fixes = String(decoding: followed.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).split(separator: "\n")
        #expect(!fixes.isEmpty && fixes.allSatisfy { $0.hasPrefix("{\"data\": {") && $0.contains("\"type\": \"fix\"") }, "\(fixes)")
        #expect(!FileManager.default.fileExists(atPath: place.socket), "the socket outlived the daemon")
    }

    /// Another user gets 403s that say how to be allowed; a grant to their group lets them
    /// read exactly what it names; the control group lets them do everything. Grants change
    /// on SIGHUP, without a restart.
    @Test(.enabled(if: canSwitchUser, "needs root or passwordless sudo to start callers as another uid"))
    func callersAreAuthorisedByWhoTheKernelSaysTheyAre() async throws {
        let place = try Place(api: "group = \"4444\"")
        let daemon = try await startDaemon(place)
        let refused = try await Self.asOtherUser(["/usr/bin/python3", place.checker, "--socket", place.socket, "--refused"])
        #expect(refused.status == 0, "\(refused.stdout)\(refused.stderr)")
        #expect(refused.stdout.contains("24 passed, 0 failed"), "\(refused.stdout)")

        try place.write(api: "group = \"4444\"\ngrants = [{ group = \"4343\", allow = [\"status\"] }]")
        kill(daemon.process.processIdentifier, SIGHUP)
        #expect(await daemon.waitForLine(containing: "configuration reloaded", timeout: .seconds(10)) != nil)
        try await Task.sleep(for: .seconds(1))
        let granted = try await Self.asOtherUser(["/usr/bin/python3", place.client, "--socket", place.socket, "status"], groups: [4343])
        #expect(granted.status == 0, "\(granted.stderr)")
        #expect(granted.stdout.contains("\"scopes\": [\"status\"]") && granted.stdout.contains("\"uid\": 4242"), "\(granted.stdout)")
        let notGranted = try await Self.asOtherUser(["/usr/bin/python3", place.client, "--socket", place.socket, "location"], groups: [4343])
        #expect(notGranted.status == 77, "\(notGranted.stdout)\(notGranted.stderr)")
        #expect(notGranted.stderr.contains("uid 4242 may not use location"), "\(notGranted.stderr)")

        let controller = try await Self.asOtherUser(["/usr/bin/python3", place.checker, "--socket", place.socket], groups: [4444])
        #expect(controller.status == 0, "\(controller.stdout)\(controller.stderr)")
        _ = await daemon.stop()
    }

    /// The Swift client: the same answers, typed; the daemon's errors as `APIProblem` with
    /// their advice; a missing daemon and a wait past its bound as typed errors too.
    @Test func theSwiftClientGetsTheKitThroughTheDaemon() async throws {
        let place = try Place()
        let daemon = try await startDaemon(place)
        let kit = FieldHALClient(socketPath: place.socket)
        let status = try await kit.status()
        #expect(status.api == "v1" && status.pid == daemon.process.processIdentifier)
        #expect(status.caller.uid == getuid() && status.caller.scopes == APIScope.allCases.sorted())
        let capabilities = try await kit.capabilities()
        #expect(capabilities.capabilities.map(\.capability) == Capability.allCases)
        #expect(capabilities.capabilities.allSatisfy { $0.isAvailable }, "\(capabilities)")
        #expect(try await kit.lock().configured == false)
        #expect(try await kit.evidence().items.isEmpty)
        let jpeg = try await kit.photo(width: 320, height: 240, quality: 70)
        #expect(jpeg.starts(with: [0xFF, 0xD8]) && jpeg.suffix(2) == [0xFF, 0xD9] && jpeg.count > 1000, "\(jpeg.count) bytes")
        let reading = try await kit.location(timeout: .seconds(3))
        #expect(reading.fix.hasPosition && reading.fix.latitude.map { abs($0 - 52.5163) < 0.001 } == true, "\(reading)")

        // The daemon's refusal of a bad request, typed, with what to do.
        await #expect(throws: APIProblem.self) { _ = try await kit.location(timeout: .seconds(120)) }
        do {
            _ = try await kit.location(timeout: .milliseconds(300), maxAge: nil, accuracy: 0.001)
            Issue.record("a fix at 1 mm from the fake receiver")
        } catch let problem as APIProblem {
            #expect(problem.kind == "noFix" && problem.status == 503 && problem.advice != nil, "\(problem)")
        }

        // Events: every capability once, then fixes, as they come.
        var capabilityEvents = 0, fixes: [Fix] = [], locks: [APILockStatus] = [], tags: [APITagEvent] = []
        for try await event in kit.events() {
            switch event {
            case .capability: capabilityEvents += 1
            case .fix(let fix, _): fixes.append(fix)
            case .lock(let status): locks.append(status)
            case .alert(let alert): Issue.record("an alert on a kit nobody signed in to: \(alert)")
            case .tag(let tag): tags.append(tag)
            case .use(let use): Issue.record("a use event, not asked for: \(use)")
            }
            if fixes.count == 2 { break }
        }
        // The fake kit's responder tag lies on the reader from the start: found at once.
        #expect(tags.map(\.state) == [.found] && tags.first?.tag.uid == "04:A1:B2:C3:D4:E5:F6"
                && tags.first?.tag.records.first?.value == "trf:duress:demo-alert-1", "\(tags)")
        #expect(capabilityEvents == Capability.allCases.count && fixes.allSatisfy { $0.hasPosition }, "\(capabilityEvents) \(fixes)")
        #expect(locks.count == 1 && locks.first?.configured == false, "the lock's state once, first: \(locks)")

        // A daemon that does not answer within the client's bound: a timeout, not a hang.
        // (A negative slack puts the client's bound, 0.5 s, before the daemon's own 20 s wait ends.)
        var impatient = kit
        impatient.slack = .milliseconds(-19_500)
        let asked = ContinuousClock.now
        do {
            _ = try await impatient.location(timeout: .seconds(20), maxAge: nil, accuracy: 0.001)
            Issue.record("an answer after the bound")
        } catch let error as FieldHALError {
            #expect(error.kind == .timeout, "\(error)")
        }
        #expect(ContinuousClock.now - asked < .seconds(10), "the client's bound ended it, not the daemon's 20 s")
        _ = await daemon.stop()

        do {
            _ = try await kit.status()
            Issue.record("a daemon answered after it stopped")
        } catch let error as FieldHALError {
            #expect(error.kind == .unavailable && error.advice?.contains("fieldhal run") == true, "\(error)")
        }
    }

    /// `POST /v1/lock/setup`: refused with the lock's own words until the PINs are right,
    /// then once; the lock's new state reaches the event stream at once, and the duress PIN
    /// set up through it unlocks exactly as the PIN does.
    @Test func theLockIsSetUpOnceThroughTheAPI() async throws {
        let place = try Place()
        let daemon = try await startDaemon(place)
        let kit = FieldHALClient(socketPath: place.socket)
        let states = Task {
            var seen: [APILockStatus] = []
            for try await event in kit.events([.lock]) {
                if case .lock(let status) = event { seen.append(status) }
                if seen.count == 2 { break }
            }
            return (seen, ContinuousClock.now)
        }
        for (setup, words) in [(APILockSetup(pin: "2580", pinConfirmation: "2581"), "Passcodes do not match"),
                               (APILockSetup(pin: "2580", pinConfirmation: "2580", duressPin: "2580"), "the duress PIN must differ from the PIN"),
                               (APILockSetup(pin: "1234", pinConfirmation: "1234"), "Passcode cannot be sequential digits")] {
            do {
                _ = try await kit.setUpLock(setup)
                Issue.record("set up with \(setup)")
            } catch let problem as APIProblem {
                #expect(problem.status == 400 && problem.kind == "invalidArgument" && problem.detail.contains(words), "\(problem)")
            }
        }
        #expect(try await kit.lock().configured == false)
        let started = ContinuousClock.now
        let answer = try await kit.setUpLock(APILockSetup(pin: "2580", pinConfirmation: "2580", duressPin: "9173", relockAfter: "1m"))
        #expect(answer.message == "Lock set up with a PIN.")
        let status = try await kit.lock()
        #expect(status.configured && !status.locked && status.relockAfter == "1m", "\(status)")
        do {
            _ = try await kit.setUpLock(APILockSetup(pin: "1357", pinConfirmation: "1357"))
            Issue.record("set up twice")
        } catch let problem as APIProblem {
            #expect(problem.status == 400 && problem.detail == "the lock is already set up" && problem.advice?.contains("lock settings") == true,
                    "\(problem)")
        }
        let pin = try await kit.unlock(pin: "2580"), duress = try await kit.unlock(pin: "9173")
        #expect(pin == duress && pin.outcome == APIUnlockOutcome.unlocked, "\(pin) \(duress)")
        // Not set up, then set up: both on the stream, the second without waiting for a look.
        let (seen, heard) = try await states.value
        #expect(seen.first?.configured == false && seen.dropFirst().first?.configured == true, "\(seen)")
        // A look comes every 60 s: the bound only tells a change told at once from one seen at a look.
        #expect(heard - started < .seconds(30), "\(heard - started)")
        _ = await daemon.stop()
    }

    /// A reload keeps every event stream: the capability it changed arrives as an event, and
    /// fixes continue from the receiver the new configuration opened.
    @Test func aReloadIsHeardOnTheStreamAndDoesNotEndIt() async throws {
        let place = try Place()
        let daemon = try await startDaemon(place)
        let kit = FieldHALClient(socketPath: place.socket)
        let (heard, note) = AsyncStream.makeStream(of: APIEvent.self)
        let listener = Task {
            for try await event in kit.events() { note.yield(event) }
            note.finish()
        }
        var events = heard.makeAsyncIterator()
        var initial = 0
        var fixesBefore = 0
        while initial < Capability.allCases.count || fixesBefore < 1, let event = await events.next() {
            if case .capability = event { initial += 1 } else { fixesBefore += 1 }
        }
        #expect(initial == Capability.allCases.count)

        let original = try String(contentsOfFile: place.config, encoding: .utf8)
        try original.replacingOccurrences(of: "[camera]\nplugin = \"fake\"", with: "[camera]\nplugin = \"fake\"\nenabled = false")
            .write(toFile: place.config, atomically: true, encoding: .utf8)
        kill(daemon.process.processIdentifier, SIGHUP)
        var change: CapabilityStatus?
        var fixesAfter = 0
        let deadline = ContinuousClock.now + .seconds(15)
        while ContinuousClock.now < deadline, change == nil || fixesAfter < 2, let event = await events.next() {
            switch event {
            case .capability(let status): change = status
            case .fix(let fix, _) where change != nil && fix.hasPosition: fixesAfter += 1
            case .fix, .alert, .lock, .tag, .use: break
            }
        }
        #expect(change?.capability == .camera && change?.state == .notConfigured, "\(String(describing: change))")
        #expect(fixesAfter >= 2, "the fixes did not continue after the reload")
        #expect(try await kit.capabilities().capabilities.first { $0.capability == .camera }?.state == .notConfigured)
        listener.cancel()
        _ = await daemon.stop()
    }

    /// Fixes are written to each follower's connection from the receiver's thread
    /// (`EventStreamSocket`, a duplicate of the connection's descriptor): twenty followers
    /// through `FieldHALClient.follow` get fixes, those that go leave no descriptor open in
    /// the daemon, and one still following when the daemon stops gets a stream that ends
    /// properly (the last chunk), not a cut connection.
    @Test func followersComeAndGoAndTheStreamEndsProperly() async throws {
        let place = try Place()
        let daemon = try await startDaemon(place)
        let kit = FieldHALClient(socketPath: place.socket)
        _ = try await kit.status()
        let pid = daemon.process.processIdentifier
        func socketLinks() -> [String] {
            let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []
            return entries.map { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)")) ?? "" }
                .filter { $0.hasPrefix("socket:") }
        }
        func sockets() -> Int { socketLinks().count }
        // A taken-over stream is one socket held by two descriptors (the connection and its
        // duplicate): the same inode twice. Counted this way, a connection that closes
        // meanwhile (the status call's) cannot make the figure miss.
        func sharedSockets() -> Int { Dictionary(grouping: socketLinks(), by: { $0 }).values.filter { $0.count >= 2 }.count }
        let before = sockets()
        let fixes = Mutex<[Int: Int]>([:])
        let followers = (0..<20).map { index in
            kit.follow([.fix], { event in
                if case .fix = event { fixes.withLock { $0[index, default: 0] += 1 } }
            }, end: { _ in })
        }
        let deadline = ContinuousClock.now + .seconds(15)
        while ContinuousClock.now < deadline, fixes.withLock({ $0.count }) < 20 { try await Task.sleep(for: .milliseconds(100)) }
        #expect(fixes.withLock { $0.count } == 20, "every follower gets fixes")
        // Each follower's connection and its duplicate: the streams were taken over.
        #expect(sharedSockets() >= 20, "\(sharedSockets()) sockets held twice for 20 followers")
        for follower in followers { follower.cancel() }
        // (The status call's connection may have closed meanwhile too.)
        while ContinuousClock.now < deadline + .seconds(5), sockets() > before { try await Task.sleep(for: .milliseconds(100)) }
        #expect(sockets() <= before, "the followers' connections are all closed")

        let ended = Mutex<(any Error)??>(nil)
        let last = kit.follow([.fix], { _ in }, end: { error in ended.withLock { $0 = .some(error) } })
        defer { last.cancel() }
        try await Task.sleep(for: .seconds(1.5))
        _ = await daemon.stop()
        let stopped = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < stopped, ended.withLock({ $0 == nil }) { try await Task.sleep(for: .milliseconds(50)) }
        let how = try #require(ended.withLock { $0 }, "the stream did not end with the daemon")
        #expect(how == nil, "the daemon's stream was cut: \(String(describing: how))")
    }

    /// Tags found and lost on the event stream, looked for only while someone follows them;
    /// a kit without a reader says so when `tag` is asked for by name, and leaves it out of
    /// the default stream.
    @Test func tagsAreFoundAndLostOnTheEventStream() async throws {
        let place = try Place()
        let config = try String(contentsOfFile: place.config, encoding: .utf8)
        // The responder's tag leaves after 6 s (the fake's clock starts with the reader), and
        // the second one does not come.
        try config.replacingOccurrences(of: "text = \"trf:duress:demo-alert-1\" }", with: "text = \"trf:duress:demo-alert-1\", leave_ms = 6000 }")
            .replacingOccurrences(of: "arrive_ms = 5000", with: "arrive_ms = 600000")
            .write(toFile: place.config, atomically: true, encoding: .utf8)
        let daemon = try await startDaemon(place)
        let kit = FieldHALClient(socketPath: place.socket)
        var tags: [APITagEvent] = []
        let deadline = ContinuousClock.now + .seconds(20)
        for try await event in kit.events([.tag]) {
            if case .tag(let tag) = event { tags.append(tag) }
            if tags.count == 2 || ContinuousClock.now > deadline { break }
        }
        #expect(tags.map(\.state) == [.found, .lost] && Set(tags.map(\.tag.uid)) == ["04:A1:B2:C3:D4:E5:F6"], "\(tags)")
        #expect(tags.first?.tag.records.first?.value == "trf:duress:demo-alert-1", "\(tags)")
        _ = await daemon.stop()

        // No reader: a 503 that says what to add; the default stream goes on without tags.
        try config.replacingOccurrences(of: "[nfc]\nplugin = \"fake\"", with: "[nfc]\nplugin = \"fake\"\nenabled = false")
            .write(toFile: place.config, atomically: true, encoding: .utf8)
        let readerless = try await startDaemon(place)
        do {
            for try await event in kit.events([.tag]) { Issue.record("an event without a reader: \(event)"); break }
            Issue.record("a tag stream without a reader")
        } catch let problem as APIProblem {
            #expect(problem.status == 503 && problem.kind == "notConfigured" && problem.advice?.contains("[nfc]") == true, "\(problem)")
        }
        var kinds: Set<String> = []
        for try await event in kit.events() {
            kinds.insert(event.kind.rawValue)
            if kinds.contains("fix") { break }
        }
        #expect(!kinds.contains("tag"), "\(kinds)")
        _ = await readerless.stop()
    }

    /// The NFC chip through the daemon, in turns: a client's emulation holds it; a read that
    /// cannot wait long enough is told what holds it; one that can gets it when the holder is
    /// done; a client that hangs up gives it back at once; `fieldhal nfc read` takes its
    /// turn through the daemon too (on its own, it would open the reader and succeed).
    @Test func theNFCChipIsTakenInTurnsThroughTheDaemon() async throws {
        let place = try Place()
        // Nobody taps the kit: an emulation holds the chip for its whole timeout.
        let config = try String(contentsOfFile: place.config, encoding: .utf8)
        try config.replacingOccurrences(of: "reader = \"reads\"", with: "reader = \"absent\"")
            .write(toFile: place.config, atomically: true, encoding: .utf8)
        let daemon = try await startDaemon(place)
        let kit = FieldHALClient(socketPath: place.socket)
        #expect(try await kit.readTag(timeout: .seconds(3)).uid == "04:A1:B2:C3:D4:E5:F6")

        let holder = Task { try await kit.emulateTag([APIRecordInput(uri: "https://transrify.example/ack")], timeout: .seconds(3)) }
        try await Task.sleep(for: .milliseconds(300))
        do {
            _ = try await kit.readTag(timeout: .milliseconds(500))
            Issue.record("a read got the chip while an emulation held it")
        } catch let problem as APIProblem {
            #expect(problem.kind == "busy" && problem.status == 409, "\(problem)")
            #expect(problem.detail.contains("a tag emulation (uid \(getuid())"), "\(problem)")
        }
        let cli = try await CLI.run(["nfc", "read", "--timeout", "0.5", "--config", place.config, "--state-dir", scratch("api-cli-state")])
        #expect(cli.status == 69 && cli.stderr.contains("the chip was in use") && cli.stderr.contains("a tag emulation (uid"), "\(cli)")
        var late: APITag?
        let waited = try await elapsed { late = try await kit.readTag(timeout: .seconds(8)) }
        #expect(late?.uid == "04:A1:B2:C3:D4:E5:F6")
        #expect(try await holder.value.wasRead == false)
        // It waited for the emulation (3 s, begun before it), then read within its own 8 s.
        #expect(waited > .seconds(1), "the read waited \(waited) for an emulation of 3 s begun before it")

        // A client that hangs up mid-emulation: the chip is free at once, not in 20 s.
        let leaver = Process()
        leaver.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        leaver.arguments = [place.client, "--socket", place.socket, "emulate-tag", "--text", "gone", "--timeout-ms", "20000"]
        try leaver.run()
        try await Task.sleep(for: .milliseconds(800))
        kill(leaver.processIdentifier, SIGKILL)
        leaver.waitUntilExit()
        let after = try await elapsed { _ = try await kit.readTag(timeout: .seconds(15)) }
        #expect(after < .seconds(10), "the chip stayed with a client that had hung up: \(after) (its emulation had 19 s to go)")
        let local = try await CLI.run(["nfc", "read", "--json", "--config", place.config, "--state-dir", scratch("api-cli-state")])
        #expect(local.status == 0 && local.stdout.contains("04:A1:B2:C3:D4:E5:F6") && local.stdout.contains("trf:duress:demo-alert-1"), "\(local)")
        _ = await daemon.stop()
    }

    /// `fieldhal haptics play`, `sound play` and `camera snap` use the daemon's devices when it runs: with a
    /// configuration that has neither (only the daemon's socket), they play through the
    /// daemon; with the daemon stopped, the same commands say the kit has none.
    @Test func feedbackCommandsGoThroughTheDaemon() async throws {
        let place = try Place()
        let daemon = try await startDaemon(place)
        let bare = place.directory + "/bare.toml"
        try "[api]\nsocket = \"\(place.socket)\"\n".write(toFile: bare, atomically: true, encoding: .utf8)
        let state = scratch("api-bare-state")
        let buzz = try await CLI.run(["haptics", "play", "warning", "--json", "--config", bare, "--state-dir", state])
        #expect(buzz.status == 0 && buzz.stdout.contains("warning") && buzz.stdout.contains("milliseconds"), "\(buzz)")
        let sound = try await CLI.run(["sound", "play", "--config", bare, "--state-dir", state])
        #expect(sound.status == 0 && sound.stdout.hasPrefix("played soft-alert ("), "\(sound)")
        let jpeg = place.directory + "/still.jpg"
        let snap = try await CLI.run(["camera", "snap", "-o", jpeg, "--width", "320", "--height", "240", "--config", bare, "--state-dir", state])
        #expect(snap.status == 0 && snap.stdout.hasSuffix(": 320x240 JPEG, \((try? Data(contentsOf: URL(fileURLWithPath: jpeg)).count) ?? -1) bytes\n"), "\(snap)")
        // Recordings on the daemon's microphone and camera, written where the command says.
        let wav = place.directory + "/voice.wav", avi = place.directory + "/clip.avi"
        let voice = try await CLI.run(["mic", "record", "--seconds", "0.5", "-o", wav, "--json", "--config", bare, "--state-dir", state])
        #expect(voice.status == 0 && voice.stdout.contains("\"path\" : \"\(wav)\"") && voice.stdout.contains("peakDBFS"), "\(voice)")
        let wavBytes = (try? Data(contentsOf: URL(fileURLWithPath: wav))) ?? Data()
        #expect(wavBytes.count == 44 + 22_050 * 2 && wavBytes.prefix(4) == Data("RIFF".utf8), "\(wavBytes.count) bytes")
        let clip = try await CLI.run(["camera", "record", "--seconds", "0.5", "-o", avi, "--width", "160", "--height", "120", "--fps", "10",
                                      "--config", bare, "--state-dir", state])
        let aviSize = (try? FileManager.default.attributesOfItem(atPath: avi)[.size] as? Int) ?? -1
        #expect(clip.status == 0 && clip.stdout.hasPrefix("\(avi): 160x120 Motion-JPEG AVI, 5 frames") && clip.stdout.contains(", \(aviSize) bytes"),
                "\(clip)")
        // The daemon's fingerprint sensor (a kit without [biometrics] of its own).
        let sensor = try await CLI.run(["bio", "status", "--config", bare, "--state-dir", state])
        #expect(sensor.status == 0 && sensor.stdout == "sensor present; enrolled: right-index-finger\n", "\(sensor)")
        let finger = try await CLI.run(["bio", "verify", "--config", bare, "--state-dir", state])
        #expect(finger.status == 0 && finger.stdout == "match\n", "\(finger)")
        let enrolled = try await CLI.run(["bio", "enroll", "--finger", "left-thumb", "--config", bare, "--state-dir", state])
        #expect(enrolled.status == 0 && enrolled.stdout.hasSuffix("stage 5 passed\nenrolled left-thumb\n"), "\(enrolled)")
        // Evidence into the daemon's queue, listed from there.
        let noted = try await CLI.run(["evidence", "capture", "text", "--text", "through the daemon", "--incident", "inc-api",
                                       "--config", bare, "--state-dir", state])
        #expect(noted.status == 0 && noted.stdout.hasPrefix("queued ") && noted.stdout.contains("TEXT"), "\(noted)")
        let listed = try await CLI.run(["evidence", "queue", "--json", "--config", bare, "--state-dir", state])
        #expect(listed.status == 0 && listed.stdout.contains("\"incident\" : \"inc-api\""), "\(listed)")
        let empty = try await CLI.run(["evidence", "capture", "photo", "--incident", "", "--config", bare, "--state-dir", state])
        #expect(empty.status == 64 && empty.stderr.contains("incidentId: is empty"), "\(empty)")
        // Nothing of them stays in the daemon's scratch folder.
        let daemonScratch = state + "/scratch/\(daemon.process.processIdentifier)"
        let scratchFiles = (try? FileManager.default.contentsOfDirectory(atPath: daemonScratch)) ?? []
        #expect(scratchFiles.isEmpty, "\(scratchFiles)")
        _ = await daemon.stop()
        let alone = try await CLI.run(["haptics", "play", "warning", "--config", bare, "--state-dir", state])
        #expect(alone.status == 69, "\(alone)")
    }

    /// A grant that names a user this machine does not have stops the daemon's start with
    /// the place to fix, and a reload with it keeps the old configuration.
    @Test func aGrantForNobodyIsAConfigurationError() async throws {
        let place = try Place(api: "grants = [{ user = \"no-such-user-fieldhal\", allow = [\"status\"] }]")
        let start = try await CLI.run(["run", "--config", place.config, "--state-dir", scratch("api-state")])
        #expect(start.status == 78, "\(start.status) \(start.stderr)")
        #expect(start.stderr == "fieldhal: \(place.config): api.grants[0]: no user \"no-such-user-fieldhal\" on this machine: "
                + "create the user, name another, or remove the grant\n", "\(start.stderr)")

        try place.write(api: "grants = [{ group = \"0\", allow = [\"telepathy\"] }]")
        let badScope = try await CLI.run(["run", "--config", place.config, "--state-dir", scratch("api-state")])
        #expect(badScope.status == 78 && badScope.stderr.contains("api.grants[0]: no scope \"telepathy\"; the scopes are ")
                && badScope.stderr.contains("nfc.read"), "\(badScope.stderr)")

        try place.write(api: "")
        let daemon = try await startDaemon(place)
        try place.write(api: "grants = [{ user = \"no-such-user-fieldhal\", allow = [\"status\"] }]")
        kill(daemon.process.processIdentifier, SIGHUP)
        #expect(await daemon.waitForLine(containing: "configuration not reloaded, the old one stays", timeout: .seconds(10)) != nil,
                "\(daemon.output)")
        let still = try await CLI.runTool("/usr/bin/python3", [place.client, "--socket", place.socket, "capabilities"])
        #expect(still.status == 0, "\(still.stderr)")
        _ = await daemon.stop()
    }
}

private func elapsed(_ body: () async throws -> Void) async rethrows -> Duration {
    let start = ContinuousClock.now
    try await body()
    return ContinuousClock.now - start
}

/// The fuzzing apart, with a bound of its own: its valid cases wait out recordings, scans and
/// enrollments on the fake kit (about a minute and a half here, more on a loaded machine).
@Suite(.serialized, .timeLimit(.minutes(10)))
struct APIFuzzTests {
    /// schemathesis, from the contract: invalid requests refused with a documented 4xx at
    /// once, valid ones answered as documented within their bound, nothing undocumented.
    /// (lab/api-fuzz installs schemathesis from PyPI into .venv-api-fuzz on first use.)
    @Test func schemathesisFindsNothingOutsideTheContract() async throws {
        // A VIDEO capture that names no length records the configuration's: 10 s of 640x480
        // by default, which took 41 s of JPEG encoding in a debug build on a loaded CI machine
        // (the contract's bound is 30 s). The fuzz checks the route, not the encoder's speed.
        let place = try APITests.Place(api: "\n[transrify]\nevidence_video_seconds = 1\nevidence_video_width = 160\nevidence_video_height = 120")
        let daemon = try await APITests().startDaemon(place)
        let fuzz = try await CLI.runTool("/usr/bin/python3", [CLI.repositoryRoot.appendingPathComponent("lab/api-fuzz").path,
                                                             "--socket", place.socket])
        #expect(fuzz.status == 0, "\(fuzz.stdout.suffix(4000))\(fuzz.stderr.suffix(2000))")
        #expect(fuzz.stdout.contains("api-fuzz: passed"))
        let stopped = await daemon.stop()
        #expect(stopped.status == 0, "the daemon did not survive the fuzzing: \(daemon.output.suffix(20))")
    }
}
