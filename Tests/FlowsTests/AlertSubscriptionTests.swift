import FieldHAL
import FieldHALFlows
#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import Transrify
import TransrifyAlertChannel
import TransrifyLabServer

/// What a subscription reported, in order, with the instant each event arrived.
final class EventLog: Sendable {
    private let events = LockedValue<[(String, ContinuousClock.Instant)]>([])

    func record(_ event: AlertSubscription.Event) {
        let line = switch event {
        case .announce(let banner): "announce \(banner.alert.alertId)"
        case .transport(let transport, let reason): "transport \(transport.rawValue)" + (reason.map { ": \($0)" } ?? "")
        case .problem(let text): "problem \(text)"
        }
        events.withLock { $0.append((line, .now)) }
    }

    var lines: [String] { events.value.map(\.0) }

    /// The first event line starting with `prefix` after index `from`, waiting up to `timeout`.
    func wait(for prefix: String, after from: Int = 0, timeout: Duration = .seconds(10)) async -> (index: Int, at: ContinuousClock.Instant)? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let all = events.value
            if let index = all.indices.first(where: { $0 >= from && all[$0].0.hasPrefix(prefix) }) { return (index, all[index].1) }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return nil
    }
}

/// Req 25 and 35 against the lab server: the WebSocket channel, and polling whenever the
/// channel is missing or down.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct AlertSubscriptionTests {
    struct Lab {
        let running: RunningLabServer
        let client: TransrifyClient
        var channelURL: URL { URL(string: "ws://127.0.0.1:\(running.port)\(TransrifyAPI.alertsChannelPath)")! }

        static func start() async throws -> Lab {
            let server = try LabServer(LabServer.Configuration(directory: scratchDirectory("lab")))
            try server.addTenant(key: "tenant+key/1", name: "T")
            try server.addUser(tenantKey: "tenant+key/1", customerRef: "alice01", pin: "2468", duressPin: "1357")
            let running = try await server.start()
            return Lab(running: running, client: TransrifyClient(baseURL: running.baseURL, tenantKey: "tenant+key/1"))
        }

        /// Kit A signs in with the duress PIN and its alert goes out, as `AfterSignIn` does.
        func duressAlert() async throws -> String {
            let there = Geolocation(lat: 52.5200, lon: 13.4050)
            let session = try await client.login(customerRef: "alice01", pin: "1357", device: DeviceInfo(version: "t"), geo: there)
            return try await client.sendDuressAlert(sessionId: session.sessionId!, geo: there, device: DeviceInfo(version: "t")).alertId
        }

        func subscription(pollEvery interval: Int, channel: AlertChannel?) throws -> AlertSubscription {
            let watcher = AlertWatcher(client: client, settings: try AlertSettings(radiusMeters: nil, pollIntervalMilliseconds: interval), own: nil)
            var subscription = AlertSubscription(watcher: watcher, channel: channel) { Geolocation(lat: 52.5245, lon: 13.4050) }
            subscription.reconnectDelays = [.milliseconds(200)]
            return subscription
        }
    }

    @Test func theChannelDeliversAnAlertAtOnceWithoutPolling() async throws {
        let lab = try await Lab.start()
        defer { Task { await lab.running.stop() } }
        let log = EventLog()
        // Polling once an hour: only the channel can deliver within the test.
        let subscription = try lab.subscription(pollEvery: 3_600_000, channel: AlertChannel(url: lab.channelURL, tenantKey: "tenant+key/1"))
        let task = Task { await subscription.run { log.record($0) } }
        #expect(await log.wait(for: "transport WebSocket") != nil, "\(log.lines)")
        let sent = ContinuousClock.now
        let alertId = try await lab.duressAlert()
        let announced = await log.wait(for: "announce \(alertId)")
        #expect(announced != nil, "\(log.lines)")
        // The bound only separates "pushed" from "polled" (an hour here); the latency
        // figures come from `fieldhal-bench alerts`, not from a test on a loaded CI box.
        if let announced { #expect(announced.at - sent < .seconds(10), "channel latency \(announced.at - sent)") }
        #expect(lab.running.server.openAlertChannels == 1)
        task.cancel()
        await task.value
        // Cancelling closes the channel: the server sees it go.
        for _ in 0..<100 where lab.running.server.openAlertChannels > 0 { try await Task.sleep(for: .milliseconds(20)) }
        #expect(lab.running.server.openAlertChannels == 0)
        #expect(!log.lines.contains { $0.hasPrefix("transport polling") || $0.hasPrefix("problem") }, "\(log.lines)")
    }

    @Test func aLostChannelFallsBackToPollingUntilItComesBack() async throws {
        let lab = try await Lab.start()
        defer { Task { await lab.running.stop() } }
        lab.running.server.setAlertChannelAvailable(false)
        let log = EventLog()
        let subscription = try lab.subscription(pollEvery: 1000, channel: AlertChannel(url: lab.channelURL, tenantKey: "tenant+key/1"))
        let task = Task { await subscription.run { log.record($0) } }
        defer { task.cancel() }

        // Refused at the start: polling, said once however many retries fail.
        let fellBack = try #require(await log.wait(for: "transport polling: alerts WebSocket"), "\(log.lines)")
        #expect(log.lines[fellBack.index].contains("refused the upgrade"))
        let first = try await lab.duressAlert()
        #expect(await log.wait(for: "announce \(first)", timeout: .seconds(3)) != nil, "polled within one interval: \(log.lines)")
        try await Task.sleep(for: .milliseconds(600))
        #expect(log.lines.filter { $0.hasPrefix("transport polling") }.count == 1, "\(log.lines)")

        // The channel comes back: the subscription reconnects by itself.
        lab.running.server.setAlertChannelAvailable(true)
        let reopened = try #require(await log.wait(for: "transport WebSocket", timeout: .seconds(3)), "\(log.lines)")
        let second = try await lab.duressAlert()
        let viaChannel = await log.wait(for: "announce \(second)", after: reopened.index, timeout: .seconds(3))
        #expect(viaChannel != nil, "\(log.lines)")

        // Lost while open: polling at once, and the alert raised meanwhile still arrives.
        lab.running.server.setAlertChannelAvailable(false)
        let lost = try #require(await log.wait(for: "transport polling", after: reopened.index, timeout: .seconds(3)), "\(log.lines)")
        let third = try await lab.duressAlert()
        #expect(await log.wait(for: "announce \(third)", after: lost.index, timeout: .seconds(3)) != nil, "\(log.lines)")
        #expect(!log.lines.contains { $0.hasPrefix("problem") }, "\(log.lines)")
    }

    /// A broken server's garbage: a plain error, polling at once, a reconnect; nothing lost.
    @Test func garbageOnTheChannelFallsBackAndReconnects() async throws {
        let lab = try await Lab.start()
        defer { Task { await lab.running.stop() } }
        let log = EventLog()
        let subscription = try lab.subscription(pollEvery: 3_600_000, channel: AlertChannel(url: lab.channelURL, tenantKey: "tenant+key/1"))
        let task = Task { await subscription.run { log.record($0) } }
        defer { task.cancel() }
        #expect(await log.wait(for: "transport WebSocket") != nil, "\(log.lines)")
        // The kit says so once its upgrade is answered; the server's hub may count the
        // channel a moment later (a loaded CI machine sent the garbage to no one).
        for _ in 0..<250 where lab.running.server.openAlertChannels == 0 { try await Task.sleep(for: .milliseconds(20)) }
        #expect(lab.running.server.openAlertChannels == 1)
        lab.running.server.sendOnAlertChannels(raw: "{\"type\":\"alert\",\"alerts\":[{\"alertId\":")
        let fellBack = try #require(await log.wait(for: "transport polling"), "\(log.lines)")
        #expect(log.lines[fellBack.index].contains("a message that is not an alert"), "\(log.lines)")
        let back = try #require(await log.wait(for: "transport WebSocket", after: fellBack.index), "\(log.lines)")
        let alertId = try await lab.duressAlert()
        #expect(await log.wait(for: "announce \(alertId)", after: back.index) != nil, "\(log.lines)")
    }

    @Test func withoutAChannelItPollsAndDebounces() async throws {
        let lab = try await Lab.start()
        defer { Task { await lab.running.stop() } }
        let alertId = try await lab.duressAlert()
        let log = EventLog()
        let subscription = try lab.subscription(pollEvery: 1000, channel: nil)
        let task = Task { await subscription.run { log.record($0) } }
        #expect(await log.wait(for: "announce \(alertId)") != nil)
        try await Task.sleep(for: .milliseconds(2500))  // two more polls: the same alert is not announced again
        task.cancel()
        await task.value
        #expect(log.lines == ["transport polling", "announce \(alertId)"])
    }

    @Test func channelFailuresAreSaidPlainly() async throws {
        let lab = try await Lab.start()
        defer { Task { await lab.running.stop() } }
        let wrongKey = AlertChannel(url: lab.channelURL, tenantKey: "not-a-tenant")
        await #expect(throws: AlertChannelError.refused("ws://127.0.0.1:\(lab.running.port)/v1/alerts/ws?tenantKey=…")) {
            try await wrongKey.listen(onOpen: {}, onAlerts: { _ in })
        }
        let nobody = AlertChannel(url: URL(string: "ws://127.0.0.1:1/v1/alerts/ws")!, tenantKey: "t")
        do {
            try await nobody.listen(onOpen: {}, onAlerts: { _ in })
            Issue.record("connected to port 1")
        } catch let error as AlertChannelError {
            #expect("\(error)".hasPrefix("alerts WebSocket ws://127.0.0.1:1/v1/alerts/ws: cannot connect"), "\(error)")
        }
        #expect(throws: AlertChannelError.invalidURL("http://x/ws")) { try AlertChannel.validated("http://x/ws") }
        #expect(try AlertChannel.validated("wss://alerts.example/v1/alerts/ws").scheme == "wss")
    }
    /// A sign-in restarts the alert subscription, so a listening channel is stopped by
    /// cancellation on every sign-in. Stopping must leave nothing to run on the connection's
    /// event loop once `listen` has shut it down: SwiftNIO says so on standard error, which
    /// is the daemon's journal, and a stealth run saw that line after one sign-in and not
    /// after the other (a cancelled connection used to close itself from detached tasks).
    @Test func stoppingAChannelLeavesNothingBehindOnItsLoop() async throws {
        let lab = try await Lab.start()
        defer { Task { await lab.running.stop() } }
        let channel = AlertChannel(url: lab.channelURL, tenantKey: "tenant+key/1")
        let said = try await capturingStandardError {
            for _ in 0..<200 {
                let opened = AsyncStream<Void>.makeStream()
                let listening = Task {
                    try await channel.listen(onOpen: { opened.continuation.yield() }, onAlerts: { _ in })
                }
                var iterator = opened.stream.makeAsyncIterator()
                await iterator.next()
                let stopped = ContinuousClock.now
                listening.cancel()
                if case .failure(let error) = await listening.result { Issue.record("a stopped channel threw \(error)") }
                #expect(ContinuousClock.now - stopped < .seconds(3))
            }
            try await Task.sleep(for: .milliseconds(500))  // time for anything left over to run
        }
        #expect(!said.contains("EventLoop"), "\(said)")
    }

    /// A sign-out at the moment the kit signs in stops a channel still in its upgrade. Its
    /// loop was shut down under the upgrade, and swift-websocket was then sometimes left
    /// waiting on a future that the dead loop never completed: the daemon heard no alert
    /// again and could not stop (seen in the soak, once in about 50 sign-ins). Now the
    /// upgrade is given a moment to finish, the channel closes cleanly, and nothing is left.
    @Test func aStopDuringTheUpgradeEndsTheListenCleanly() async throws {
        let lab = try await Lab.start()
        defer { Task { await lab.running.stop() } }
        let channel = AlertChannel(url: lab.channelURL, tenantKey: "tenant+key/1")
        var hung = 0
        let said = try await capturingStandardError {
            for round in 0..<100 {
                let listening = Task { try await channel.listen(onOpen: {}, onAlerts: { _ in }) }
                if round % 2 == 1 { await Task.yield() }  // a stop just before, and just after, the connect starts
                listening.cancel()
                if await !ended(listening, within: .seconds(30)) { hung += 1 }
            }
            try await Task.sleep(for: .milliseconds(500))  // time for anything left over to run
        }
        #expect(hung == 0)
        #expect(!said.contains("EventLoop"), "\(said)")
    }

    /// A server that accepts the connection and never answers the upgrade: the channel gives
    /// up within its open timeout (and the subscription polls); a cancel while the upgrade
    /// hangs returns at once. Before, both waited for ever and the kit heard no alerts at all.
    @Test func anUpgradeThatNeverComesIsGivenUpOn() async throws {
        let silent = try SilentListener()
        defer { silent.close() }
        var channel = AlertChannel(url: URL(string: "ws://127.0.0.1:\(silent.port)/v1/alerts/ws")!, tenantKey: "t")
        channel.openTimeout = .seconds(1)
        let started = ContinuousClock.now
        do {
            try await channel.listen(onOpen: { Issue.record("opened") }, onAlerts: { _ in })
            Issue.record("listen returned without an error")
        } catch let error as AlertChannelError {
            #expect("\(error)".contains("no upgrade within 1"), "\(error)")
        }
        let waited = ContinuousClock.now - started
        #expect(waited >= .seconds(1) && waited < .seconds(20), "\(waited): not at its 1 s, or hung")

        // Cancelled while the upgrade hangs: after the upgrade's grace, the loop goes down
        // under it and the listen returns (a hang here is the failure, not a slow return).
        channel.openTimeout = .seconds(60)
        let listening = Task { try await channel.listen(onOpen: {}, onAlerts: { _ in }) }
        try await Task.sleep(for: .milliseconds(300))
        listening.cancel()
        #expect(await ended(listening, within: .seconds(30)))

        // The subscription falls back to polling when the channel hangs.
        let lab = try await Lab.start()
        defer { Task { await lab.running.stop() } }
        let log = EventLog()
        let subscription = try lab.subscription(pollEvery: 3_600_000, channel: channel.with(openTimeout: .seconds(1)))
        let task = Task { await subscription.run { log.record($0) } }
        let fallback = await log.wait(for: "transport polling", timeout: .seconds(10))
        task.cancel()
        await task.value
        #expect(fallback != nil, "\(log.lines)")
        #expect(log.lines.first?.contains("no upgrade within") == true, "\(log.lines)")
    }
}

/// Whether `task` ends within `limit`, waited for without awaiting it (a task that never
/// ends would otherwise hang the test with it).
func ended<Success: Sendable>(_ task: Task<Success, any Error>, within limit: Duration) async -> Bool {
    let (done, signal) = AsyncStream<Bool>.makeStream()
    let watcher = Task { _ = await task.result; signal.yield(true) }
    let timer = Task { try? await Task.sleep(for: limit); signal.yield(false) }
    var iterator = done.makeAsyncIterator()
    let result = await iterator.next() ?? false
    watcher.cancel()
    timer.cancel()
    return result
}

/// Runs `body` with standard error (the descriptor: C and Swift writers alike) going to
/// a file, and returns what was written there; it is copied to the real standard error
/// too, so that nothing another test said meanwhile is lost.
func capturingStandardError(_ body: () async throws -> Void) async throws -> String {
    let path = scratchDirectory("stderr")
    let file = open(path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0o600)
    let saved = dup(2)
    guard file >= 0, saved >= 0 else { throw POSIXError(.EBADF) }
    dup2(file, 2)
    close(file)
    var failure: (any Error)?
    do { try await body() } catch { failure = error }
    dup2(saved, 2)
    close(saved)
    let said = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    FileHandle.standardError.write(Data(said.utf8))
    unlink(path)
    if let failure { throw failure }
    return said
}

extension AlertChannel {
    func with(openTimeout: Duration) -> AlertChannel {
        var copy = self
        copy.openTimeout = openTimeout
        return copy
    }
}

/// A TCP listener on loopback that accepts connections and never says a word.
final class SilentListener: Sendable {
    let port: Int
    private let socket: Int32

    init() throws {
        let listener = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) == 0 && getsockname(listener, $0, &length) == 0 }
        }
        guard bound, listen(listener, 16) == 0 else {
            Glibc.close(listener)
            throw POSIXError(.EADDRINUSE)
        }
        socket = listener
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    /// The kernel completes the handshakes (the backlog): nobody needs to accept.
    func close() { _ = Glibc.close(socket) }
}
