import CMosquitto
import FieldHAL
import FieldHALAPI
import FieldHALSystem
import Foundation
import Logging
import Synchronization

/// The kit on a fleet's MQTT broker (issue 46; docs/fleet.md has the topic tree): its
/// devices' states, its health and its receivers' fixes, with an `online` birth and an
/// `offline` last will on `<prefix>/status`, and Home Assistant's discovery messages.
///
/// Only what does not depend on who signed in is published: devices by whether they are
/// there, fixes at a configured pace from a watch held from the start. A duress sign-in
/// changes none of it (docs/stealth.md).
///
/// libmosquitto runs on a thread of the bridge's own, driven by the bridge's loop rather
/// than libmosquitto's (`mosquitto_loop_forever` gives up for good on a malformed packet or a
/// TLS error; a hostile or broken broker must only cost a reconnection). Every
/// libmosquitto call is made on that thread; other threads hand it messages through
/// `inbox` and a wake-up. Events (device changes, fixes) go through the on-disk queue
/// (`MQTTSpool`) and are removed when the broker acknowledges them (QoS 1); retained
/// states are published again on every connection, so they need no queue.
public final class FleetBridge: Sendable {
    public let settings: MQTTSettings
    private let logger: Logger
    private let spoolDirectory: String
    private let version: String
    private let password: String?
    private let wakeup: WakeupEvent
    private let inbox = Mutex(Inbox())
    private let published = Mutex(Figures())
    private let lastFix = Mutex([String: Date]())
    private let exited = AsyncStream.makeStream(of: Void.self)
    private let commandInput: AsyncStream<[UInt8]>.Continuation

    /// The payloads that arrive on `<prefix>/command` (only with `[mqtt] commands`), for one
    /// reader to answer (`answer`). At most `commandBacklog` wait: past it a command is
    /// dropped, counted and said, so a flood on the topic costs the kit a bounded queue.
    public let commands: AsyncStream<[UInt8]>
    public static let commandBacklog = 16
    /// A command longer than this is dropped unread (a request's body is at most 64 KiB).
    public static let commandLimit = 70 * 1024

    struct Inbox {
        var messages: [Outgoing] = []
        var stopping = false
        var started = false
    }

    enum Outgoing {
        /// Kept on disk until the broker has it (QoS 1, not retained).
        case event(topic: String, payload: [UInt8])
        /// The latest value of a retained topic (QoS 1), published again on every connection.
        case state(topic: String, payload: [UInt8])
    }

    /// What the bridge has done, for metrics, `daemon status` and tests.
    public struct Figures: Sendable, Equatable {
        public var connected = false
        /// Connections made since the start (a reconnection after an outage adds one).
        public var connections = 0
        /// Messages waiting on disk or in flight.
        public var queued = 0
        /// Dropped because the queue was full (or a queued file could not be read).
        public var dropped = 0
        /// Events the broker acknowledged.
        public var delivered = 0
        /// Commands taken from `<prefix>/command`, and those dropped (too long, or too many
        /// waiting).
        public var commands = 0
        public var commandsDropped = 0
    }

    public var figures: Figures { published.withLock { $0 } }

    /// `spoolDirectory`: the on-disk queue (in the state directory). Reads the password
    /// file now, so a missing or readable-by-others one is said at the start.
    public init(settings: MQTTSettings, spoolDirectory: String, version: String, logger: Logger) throws {
        self.settings = settings
        self.spoolDirectory = spoolDirectory
        self.version = version
        self.logger = logger
        wakeup = try WakeupEvent()
        password = try settings.passwordFile.map { try Self.readPassword($0) }
        (commands, commandInput) = AsyncStream.makeStream(of: [UInt8].self, bufferingPolicy: .bufferingOldest(Self.commandBacklog))
    }

    /// Where commands arrive, and where their answers go.
    public var commandTopic: String { "\(settings.topicPrefix)/command" }
    public var answerTopic: String { "\(settings.topicPrefix)/answers" }

    // MARK: What is published

    /// The topic of a device's retained state.
    public func deviceTopic(_ capability: Capability, _ name: String) -> String {
        "\(settings.topicPrefix)/device/\(capability.rawValue)/\(MQTTSettings.segment(name))"
    }

    /// A device's state now (retained), and, when it changed rather than was first seen, an
    /// event on `<prefix>/events/device` that the queue keeps through an outage.
    public func device(_ status: CapabilityStatus, changed: Bool) {
        guard status.state != .notConfigured else { return }
        let name = status.name ?? "default"
        let state = DeviceState(capability: status.capability.rawValue, name: name, state: status.state.rawValue,
                                reason: status.state == .available ? nil : status.reason, plugin: status.plugin, at: changed ? Date() : nil)
        var messages: [Outgoing] = []
        if let prefix = settings.discoveryPrefix {
            messages.append(.state(topic: "\(prefix)/binary_sensor/\(settings.clientID)/\(status.capability.rawValue)_\(MQTTSettings.segment(name))/config",
                                   payload: discovery(status.capability, name, tracker: false)))
            if status.capability == .location {
                messages.append(.state(topic: "\(prefix)/device_tracker/\(settings.clientID)/\(MQTTSettings.segment(name))/config",
                                       payload: discovery(status.capability, name, tracker: true)))
            }
        }
        var retained = state
        retained.at = nil
        messages.append(.state(topic: deviceTopic(status.capability, name), payload: Self.json(retained)))
        if changed { messages.append(.event(topic: "\(settings.topicPrefix)/events/device", payload: Self.json(state))) }
        hand(messages)
    }

    /// The kit's health (retained): what `GET /v1/health` answers.
    public func health(_ health: APIHealth) {
        hand([.state(topic: "\(settings.topicPrefix)/health", payload: Self.json(health))])
    }

    /// A receiver's fix, unless one of its fixes went out less than `fixInterval` ago by the
    /// fixes' own times (by arrival, a 1 Hz receiver's fixes 0.999 s apart would drop every
    /// other one). Called on the receiver's thread: it only hands the message over.
    public func fix(_ fix: Fix, device: String) {
        guard let interval = settings.fixInterval else { return }
        let due = lastFix.withLock { last in
            // A time that went back (a receiver that restarted, a replayed log) starts afresh.
            if let previous = last[device], fix.time >= previous, fix.time.timeIntervalSince(previous) < interval.seconds - 0.001 { return false }
            last[device] = fix.time
            return true
        }
        guard due, let json = try? fix.apiJSON(device: device) else { return }
        hand([.event(topic: "\(settings.topicPrefix)/location/\(MQTTSettings.segment(device))", payload: Array(json.utf8))])
    }

    /// A command's answer, queued like an event (an answer to a long read outlives a
    /// broker's restart).
    public func answer(_ payload: [UInt8]) {
        hand([.event(topic: answerTopic, payload: payload)])
    }

    /// A tag an API client read or saw come and go (`tags = true`), as its event's JSON.
    public func tag(_ payload: [UInt8]) {
        guard settings.tags else { return }
        hand([.event(topic: "\(settings.topicPrefix)/events/tag", payload: payload)])
    }

    private func hand(_ messages: [Outgoing]) {
        inbox.withLock { $0.messages.append(contentsOf: messages) }
        wakeup.signal()
    }

    struct DeviceState: Encodable {
        var capability: String
        var name: String
        var state: String
        var reason: String?
        var plugin: String?
        var at: Date?
    }

    private func discovery(_ capability: Capability, _ name: String, tracker: Bool) -> [UInt8] {
        let object = "\(capability.rawValue)_\(MQTTSettings.segment(name))"
        var config: [String: JSONValue] = [
            "availability_topic": .string("\(settings.topicPrefix)/status"),
            "device": .object(["identifiers": .array([.string(settings.clientID)]), "name": .string(settings.clientID),
                               "manufacturer": .string("FieldHAL"), "sw_version": .string(version)]),
        ]
        if tracker {
            config["name"] = .string("\(name) location")
            config["unique_id"] = .string("\(settings.clientID)_\(object)_tracker")
            config["json_attributes_topic"] = .string("\(settings.topicPrefix)/location/\(MQTTSettings.segment(name))")
            config["source_type"] = .string("gps")
        } else {
            config["name"] = .string("\(capability.rawValue) \(name)")
            config["unique_id"] = .string("\(settings.clientID)_\(object)")
            config["device_class"] = .string("connectivity")
            config["state_topic"] = .string(deviceTopic(capability, name))
            config["value_template"] = .string("{{ value_json.state }}")
            config["payload_on"] = .string("available")
            config["payload_off"] = .string("unavailable")
        }
        return Self.json(JSONValue.object(config))
    }

    static func json(_ value: some Encodable) -> [UInt8] {
        (try? Array(FieldHALAPI.encoder.encode(value))) ?? []
    }

    // MARK: Running

    /// Connects, and keeps connecting, until the task is cancelled; then says `offline`
    /// (a clean stop sends no last will) and disconnects.
    public func run() async throws {
        let link = try Link(bridge: self)
        let start = inbox.withLock { inbox -> Bool in defer { inbox.started = true }; return !inbox.started }
        guard start else { throw FieldHALError(.busy, subject: "the MQTT bridge", detail: "it is already running") }
        let thread = Thread { link.serve() }
        thread.name = DeviceThread.threadName
        thread.start()
        await withTaskCancellationHandler {
            for await _ in exited.stream {}
        } onCancel: {
            inbox.withLock { $0.stopping = true }
            wakeup.signal()
        }
    }

    /// libmosquitto's handle and what the loop keeps, on the bridge's thread only.
    private final class Link: @unchecked Sendable {
        let bridge: FleetBridge
        let mosquitto: OpaquePointer
        let spool: MQTTSpool
        /// Retained topics' latest payloads, published on every connection.
        var retained: [String: [UInt8]] = [:]
        var retainedOrder: [String] = []
        /// libmosquitto's message id → the queued message it carries.
        var inFlight: [Int32: UInt64] = [:]
        var connected = false
        var socketOpen = false
        var retryAt = ContinuousClock.now
        var backoff = Duration.seconds(1)
        var lastProblem: String?
        var offlineMid: Int32?
        var spoolProblem: String?
        /// At most this many queued messages with libmosquitto at once; the rest wait on disk.
        static let window = 32

        init(bridge: FleetBridge) throws {
            self.bridge = bridge
            let settings = bridge.settings
            spool = try MQTTSpool(directory: bridge.spoolDirectory, limit: settings.queueLimit)
            _ = Self.initialiseLibrary
            guard let handle = mosquitto_new(settings.clientID, false, nil) else {
                throw FieldHALError(.io, subject: "the MQTT bridge", detail: "libmosquitto could not make a client: \(SystemError.describe())")
            }
            mosquitto = handle
            do {
                try check(mosquitto_will_set(handle, "\(settings.topicPrefix)/status", 7, "offline", 1, true), "set the last will")
                if let username = settings.username {
                    try check(mosquitto_username_pw_set(handle, username, bridge.password), "set the user name")
                }
                if settings.usesTLS {
                    try check(mosquitto_tls_set(handle, settings.caFile, settings.caFile == nil ? "/etc/ssl/certs" : nil,
                                                settings.certificateFile, settings.keyFile, nil), "set up TLS")
                }
            } catch {
                mosquitto_destroy(handle)
                throw error
            }
            mosquitto_user_data_set(handle, Unmanaged.passUnretained(self).toOpaque())
            mosquitto_connect_callback_set(handle) { _, context, code in
                Link.of(context).connectAnswered(code)
            }
            mosquitto_disconnect_callback_set(handle) { _, context, code in
                Link.of(context).disconnected(code)
            }
            mosquitto_publish_callback_set(handle) { _, context, mid in
                Link.of(context).acknowledged(mid)
            }
            mosquitto_message_callback_set(handle) { _, context, message in
                guard let message else { return }
                Link.of(context).received(message.pointee)
            }
            publishFigures()
        }

        deinit {
            mosquitto_destroy(mosquitto)
            bridge.commandInput.finish()
        }

        static let initialiseLibrary: Void = { _ = mosquitto_lib_init() }()

        static func of(_ context: UnsafeMutableRawPointer?) -> Link {
            Unmanaged<Link>.fromOpaque(context!).takeUnretainedValue()
        }

        func check(_ code: Int32, _ what: String) throws {
            guard code == MOSQ_ERR_SUCCESS.rawValue else {
                throw FieldHALError(.invalidArgument, subject: "the MQTT bridge", detail: "could not \(what): \(Self.describe(code))",
                                    advice: "check the [mqtt] section's files and names")
            }
        }

        static func describe(_ code: Int32) -> String {
            code == MOSQ_ERR_ERRNO.rawValue ? SystemError.describe() : String(cString: mosquitto_strerror(code))
        }

        /// The loop: the broker's socket and the wake-up, libmosquitto's reads, writes and
        /// keep-alive, and a new try at the broker when the time comes.
        func serve() {
            defer {
                bridge.exited.continuation.finish()
            }
            var stopAt: ContinuousClock.Instant?
            while true {
                let (messages, stopping) = bridge.inbox.withLock { inbox in
                    defer { inbox.messages.removeAll() }
                    return (inbox.messages, inbox.stopping)
                }
                for message in messages { take(message) }
                if stopping && stopAt == nil {
                    stopAt = ContinuousClock.now + .seconds(1)
                    guard connected else { break }
                    var mid: Int32 = 0
                    if mosquitto_publish(mosquitto, &mid, "\(bridge.settings.topicPrefix)/status", 7, "offline", 1, true) == MOSQ_ERR_SUCCESS.rawValue {
                        offlineMid = mid
                    } else {
                        break
                    }
                }
                if let stopAt, offlineMid == nil || ContinuousClock.now >= stopAt || !socketOpen { break }
                if !socketOpen && stopAt == nil && ContinuousClock.now >= retryAt { tryBroker() }

                var fds = [pollfd(fd: bridge.wakeup.fileDescriptor, events: Int16(POLLIN), revents: 0)]
                let socket = mosquitto_socket(mosquitto)
                if socket >= 0 {
                    fds.append(pollfd(fd: socket, events: Int16(POLLIN) | (mosquitto_want_write(mosquitto) ? Int16(POLLOUT) : 0), revents: 0))
                }
                let wait = socketOpen ? Duration.seconds(1) : max(.zero, min(.seconds(1), ContinuousClock.now.duration(to: retryAt)))
                // A failed poll (it cannot fail on these two descriptors but by a bug) must not spin.
                if case .failure = SystemCall.poll(&fds, timeout: wait) { Thread.sleep(forTimeInterval: 0.1) }
                if fds[0].revents != 0 { bridge.wakeup.drain() }
                if fds.count > 1 {
                    let events = Int32(fds[1].revents)
                    if events & (POLLIN | POLLERR | POLLHUP) != 0 { _ = mosquitto_loop_read(mosquitto, 1) }
                    if mosquitto_socket(mosquitto) >= 0 && mosquitto_want_write(mosquitto) && events & POLLOUT != 0 { _ = mosquitto_loop_write(mosquitto, 1) }
                }
                if mosquitto_socket(mosquitto) >= 0 { _ = mosquitto_loop_misc(mosquitto) }
                if socketOpen && mosquitto_socket(mosquitto) < 0 { lost(closeReason) }
            }
            if connected {
                _ = mosquitto_disconnect(mosquitto)
                if mosquitto_socket(mosquitto) >= 0 { _ = mosquitto_loop_write(mosquitto, 1) }
            }
            connected = false
            publishFigures()
        }

        /// Starts a connection (without waiting for it: the loop carries it on).
        private func tryBroker() {
            let settings = bridge.settings
            let code = socketOpenedBefore
                ? mosquitto_reconnect_async(mosquitto)
                : mosquitto_connect_async(mosquitto, settings.host, Int32(settings.port), Int32(settings.keepAlive))
            socketOpenedBefore = true
            if code == MOSQ_ERR_SUCCESS.rawValue && mosquitto_socket(mosquitto) >= 0 {
                socketOpen = true
            } else {
                lost("cannot reach it: \(Self.describe(code))")
            }
        }
        /// `mosquitto_connect_async` once (it keeps the host and port), then reconnections.
        private var socketOpenedBefore = false

        /// The connection is gone (or never came): the next try after a backoff that doubles
        /// up to `reconnect_max_s`. Said once per kind of problem, not once per try.
        private func lost(_ problem: String?) {
            let wasConnected = connected
            socketOpen = false
            connected = false
            retryAt = ContinuousClock.now + backoff
            backoff = min(backoff * 2, bridge.settings.reconnectLimit)
            let place = bridge.settings.place
            if wasConnected {
                bridge.logger.warning("mqtt: lost \(place)\(problem.map { " (\($0))" } ?? ""); trying again, \(spool.count) messages kept on disk meanwhile")
                lastProblem = nil
            } else if refused {
                refused = false
            } else if let problem, problem != lastProblem {
                bridge.logger.warning("mqtt: \(place): \(problem); trying again every \(bridge.settings.reconnectLimit.seconds.formatted()) s at most")
                lastProblem = problem
            }
            publishFigures()
        }

        private func connectAnswered(_ code: Int32) {
            guard code == 0 else {
                let problem = String(cString: mosquitto_connack_string(code))
                refused = true
                if problem != lastProblem {
                    bridge.logger.error("mqtt: \(bridge.settings.place) refused the kit: \(problem) — check [mqtt]'s username, password_file and certificates")
                    lastProblem = problem
                }
                return
            }
            connected = true
            closeReason = nil
            backoff = .seconds(1)
            lastProblem = nil
            bridge.logger.info("mqtt: connected to \(bridge.settings.place) as \(bridge.settings.clientID)\(spool.count > 0 ? "; \(spool.count) messages kept on disk go first" : "")")
            bridge.published.withLock { $0.connections += 1 }
            // Commands at QoS 0: the broker keeps none for a kit that is away, so a command
            // is never carried out long after it was sent.
            if !bridge.settings.commands.isEmpty {
                let code = mosquitto_subscribe(mosquitto, nil, bridge.commandTopic, 0)
                if code != MOSQ_ERR_SUCCESS.rawValue { bridge.logger.error("mqtt: could not take commands on \(bridge.commandTopic): \(Self.describe(code))") }
            }
            // The birth, then every retained state as it is now, then the queue.
            _ = mosquitto_publish(mosquitto, nil, "\(bridge.settings.topicPrefix)/status", 6, "online", 1, true)
            for topic in retainedOrder { publishRetained(topic) }
            handQueued()
            publishFigures()
        }

        /// libmosquitto closed the socket (the loop sees it closed and calls `lost`).
        private func disconnected(_ code: Int32) {
            closeReason = code == 0 || refused ? nil : Self.describe(code)
        }
        private var closeReason: String?
        /// The broker answered the CONNECT with a refusal, already said as an error.
        private var refused = false

        private func acknowledged(_ mid: Int32) {
            if mid == offlineMid { offlineMid = nil }
            guard let sequence = inFlight.removeValue(forKey: mid) else { return }
            spool.acknowledged(sequence)
            bridge.published.withLock { $0.delivered += 1 }
            handQueued()
            publishFigures()
        }

        /// A message from the broker: a command when it is on the command topic, else
        /// ignored (the kit subscribed to nothing else; a broker may send anything).
        private func received(_ message: mosquitto_message) {
            guard !bridge.settings.commands.isEmpty, let topic = message.topic, String(cString: topic) == bridge.commandTopic else {
                said("mqtt: the broker sent a message on a topic the kit did not subscribe to; ignored")
                return
            }
            let length = Int(max(0, message.payloadlen))
            guard length <= FleetBridge.commandLimit else {
                bridge.published.withLock { $0.commandsDropped += 1 }
                said("mqtt: a command of \(length) bytes was dropped unread (at most \(FleetBridge.commandLimit / 1024) KiB)")
                return
            }
            let payload = message.payload.map { Array(UnsafeRawBufferPointer(start: $0, count: length)) } ?? []
            switch bridge.commandInput.yield(payload) {
            case .enqueued(let remaining):
                bridge.published.withLock { $0.commands += 1 }
                // The queue was empty: a flood that ended is said again if one comes back.
                if remaining == FleetBridge.commandBacklog - 1 { saidProblems.remove(Self.flood) }
            case .dropped:
                bridge.published.withLock { $0.commandsDropped += 1 }
                said(Self.flood)
            case .terminated: break
            @unknown default: break
            }
        }

        static let flood = "mqtt: commands arrive faster than the kit answers them; past \(FleetBridge.commandBacklog) waiting, each is dropped (fieldhal_mqtt_commands_dropped_total)"

        /// Says `problem` once, not once per message: a flood costs one journal line.
        private func said(_ problem: String) {
            guard saidProblems.insert(problem).inserted else { return }
            bridge.logger.warning("\(problem)")
        }
        private var saidProblems: Set<String> = []

        private func take(_ message: Outgoing) {
            switch message {
            case .event(let topic, let payload):
                do {
                    try spool.append(topic: topic, payload: payload)
                    spoolProblem = nil
                } catch {
                    // Said once while it lasts (a full disk fails every message alike).
                    let problem = "\(error)"
                    if problem != spoolProblem { bridge.logger.error("mqtt: messages are not being kept for the broker: \(problem)") }
                    spoolProblem = problem
                }
                handQueued()
            case .state(let topic, let payload):
                if retained.updateValue(payload, forKey: topic) == nil { retainedOrder.append(topic) }
                if connected { publishRetained(topic) }
            }
            publishFigures()
        }

        private func publishRetained(_ topic: String) {
            guard let payload = retained[topic] else { return }
            _ = payload.withUnsafeBytes { bytes in
                mosquitto_publish(mosquitto, nil, topic, Int32(bytes.count), bytes.baseAddress, 1, true)
            }
        }

        /// Queued messages to libmosquitto, oldest first, up to `window` unacknowledged.
        private func handQueued() {
            while connected && inFlight.count < Self.window, let message = spool.takeOldest() {
                var mid: Int32 = 0
                let code = message.payload.withUnsafeBytes { bytes in
                    mosquitto_publish(mosquitto, &mid, message.topic, Int32(bytes.count), bytes.baseAddress, 1, false)
                }
                guard code == MOSQ_ERR_SUCCESS.rawValue else {
                    spool.giveBack(message.sequence)
                    break
                }
                inFlight[mid] = message.sequence
            }
        }

        private func publishFigures() {
            let figures = (connected, spool.count, spool.dropped)
            bridge.published.withLock {
                $0.connected = figures.0
                $0.queued = figures.1
                $0.dropped = figures.2
            }
        }
    }

    /// The broker's password, from a file only this user may read; trailing newlines go.
    static func readPassword(_ path: String) throws -> String {
        var info = stat()
        guard stat(path, &info) == 0 else { throw SystemError.io("stat", subject: path, advice: "write the broker's password to it, mode 0600") }
        guard info.st_uid == geteuid(), info.st_mode & 0o077 == 0 else {
            throw FieldHALError(.permissionDenied, subject: path, detail: "the MQTT password file may be read by others",
                                advice: "chmod 600 \(path) (and make it the daemon user's)")
        }
        guard let bytes = try RegularFile.read(path, limit: 4096, what: "MQTT password file") else {
            throw FieldHALError(.notConfigured, subject: path, detail: "the MQTT password file is gone")
        }
        var text = String(decoding: bytes, as: UTF8.self)
        while text.hasSuffix("\n") || text.hasSuffix("\r") { text.removeLast() }
        return text
    }
}
