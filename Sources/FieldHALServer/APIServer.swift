import EventLoopExecutor
import FieldHAL
import FieldHALAPI
import FieldHALSystem
import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
#if canImport(Glibc)
import Glibc
#endif

/// The kit's hardware API (issue 20): HTTP/1.1 and JSON on a Unix socket, so that a program
/// in any language uses the kit the daemon holds — `curl --unix-socket`, Python's
/// `http.client`, Go's `net/http` — without opening a device itself. The contract is
/// `api/openapi.yaml`; the values are `FieldHALAPI`'s.
///
/// Callers are known by the kernel's peer credentials and authorised by `APIAuthorisation`.
/// The socket itself is open to everyone (0666): the decision is made per request, by who
/// the caller is, and a refusal says how to be allowed.
public struct APIServer: Sendable {
    public let socketPath: String
    public let host: APIHost
    /// How often an idle event stream gets a comment line, so that a client (and any proxy)
    /// knows the daemon is alive.
    public var keepAlive: Duration = .seconds(15)
    /// How long a connection may sit without a whole request.
    public var idleTimeout: Duration = .seconds(10)
    /// What a caller may hold open, and how long it may take over a request head.
    public var limits = CallerGateLimits()
    /// Open connections per caller, for the gate.
    let ledger = ConnectionLedger()
    /// The listener's duplicate of each connection's descriptor, for the event streams.
    let adopted = AdoptedConnections()
    /// Whether event streams are written straight to their connections from where each
    /// event arises (`EventStreamSocket`). False keeps every stream on its connection's
    /// event loop: the path a stream takes when its connection cannot be taken over, kept
    /// testable by this.
    public var writesEventsDirectly = true
    /// The last fix event written per receiver, so that a fix fanned out to a hundred
    /// streams is encoded once, not a hundred times, on the receiver's thread.
    private let lastFixEvents = LockedValue<[String: (fix: Fix, text: String)]>([:])

    /// Where recordings are made before they are streamed: private to the daemon's user
    /// (`PrivateScratch.base`: the unit's RuntimeDirectory, or inside the state directory).
    public let scratchBase: String

    public init(socketPath: String, host: APIHost, scratchBase: String) {
        self.socketPath = socketPath
        self.host = host
        self.scratchBase = scratchBase
    }

    /// Serves until cancelled; calls `onListening` once the socket accepts connections.
    /// Refuses to take the socket of another daemon that answers on it; a stale socket file
    /// (left by a daemon killed with SIGKILL) is replaced. The socket file is removed on return.
    public func run(onListening: @escaping @Sendable () async -> Void = {}) async throws {
        Self.raiseDescriptorLimit()
        try Self.claim(socketPath)
        Self.clearScratch(scratchBase)
        var quiet = Logger(label: "fieldhal.api")
        // Hummingbird reports a connection cancelled at shutdown as an error: the daemon's
        // journal gets our own lines, not the server library's.
        quiet.logLevel = .critical
        let path = socketPath
        let limits = self.limits, ledger = self.ledger, host = self.host
        // A client that connects and says nothing (or half a request) is let go; a long
        // answer (an event stream, a wait for a tag) is never idle in this sense. Each
        // connection passes the caller gate first (`CallerGate`).
        let gate = GatedHTTP1Channel(
            inner: HTTP1Channel(responder: Self.responder(makeRouter(), logger: quiet), configuration: .init(
                additionalChannelHandlers: [RequestHeadGuard(deadline: limits.headDeadline)], idleTimeout: TimeAmount(idleTimeout))),
            limits: limits, ledger: ledger,
            admit: { caller, ledger in Self.admission(of: caller, authorisation: host.authorisation, limits: limits, ledger: ledger) })
        // A backlog deeper than a flood's sockets: a local user connecting again as fast
        // as the gate closes it cannot fill the queue a granted client waits in (the kernel
        // caps it at net.core.somaxconn, 4096 by default).
        let listener = try UnixSocketListener(path: path, backlog: Int32(limits.backlog))
        defer { unlink(path) }
        await onListening()
        // One loop for the connections: a connection handed to another loop costs a
        // wake-up across threads, and under a reconnect storm from a user without a grant
        // that alone doubled a granted client's wait (docs/decisions.md).
        await listener.serve(gate, on: MultiThreadedEventLoopGroup.singleton.next(), adopted: adopted, logger: quiet)
    }

    /// Each request answered by `router`, as Hummingbird's `Application` answers the web
    /// door's: an error no route turned into a problem is a bare 500, and every response
    /// carries its `Date`.
    /// A request's body that stopped parsing while its response was being written.
    struct ResponseCut: Error {}

    static func responder(_ router: Router<APIRequestContext>, logger: Logger) -> HTTPChannelHandler.Responder {
        let routes = router.buildResponder()
        return { request, writer, channel in
            let context = APIRequestContext(source: .init(channel: channel, logger: logger))
            var response: Response
            do {
                response = try await routes.respond(to: request, context: context)
            } catch let error as HTTPParserError {
                throw error
            } catch {
                response = Response(status: .internalServerError)
            }
            response.headers[.date] = HTTPDate.now
            do {
                try await writer.write(response: response.head, body: response.body)
            } catch is HTTPParserError {
                // Thrown as it is, it would make a second response: the connection is closed.
                throw ResponseCut()
            }
        }
    }

    /// The scope each route needs, for the gate's refusals (the routes check the same).
    /// `events` without `types` asks for fixes first.
    static let routeScopes: [String: APIScope] = [
        "status": .status, "metrics": .status, "capabilities": .status, "devices": .status, "location": .location, "events": .location,
        "nfc/read": .nfcRead, "nfc/write": .nfcWrite, "nfc/emulate": .nfcEmulate,
        "haptics/play": .haptics, "speaker/play": .speaker,
        "camera/photo": .camera, "camera/formats": .camera, "camera/preview": .camera, "camera/record": .camera, "microphone/record": .microphone,
        "biometrics": .biometrics, "biometrics/verify": .biometrics, "biometrics/enroll": .biometrics,
        "lock": .lock, "lock/unlock": .lock, "lock/setup": .lock, "lock/settings": .lock,
        "evidence": .evidence, "evidence/flush": .evidence,
        "session": .transrify, "session/verify": .transrify, "alerts": .alerts, "alerts/acknowledge": .alerts,
    ].reduce(into: [:]) { $0["/\(FieldHALAPI.version)/\($1.key)"] = $1.value }

    /// The gate's decision for one connection: root and the daemon's own user are always let
    /// in, uncounted; a caller with some scope may hold `perCaller` connections; a caller with
    /// none gets its 403 on at most `unscopedAtOnce` connections at once, and past either
    /// bound the connection is closed at once.
    static func admission(of caller: PeerCredentials?, authorisation: APIAuthorisation, limits: CallerGateLimits,
                          ledger: ConnectionLedger) -> GatedHTTP1Channel.Admission {
        guard let caller else { return .admitted(countedAs: nil) }
        if caller.uid == 0 || caller.uid == authorisation.serviceUID { return .admitted(countedAs: nil) }
        if authorisation.scopes(for: caller).isEmpty {
            guard ledger.take(caller.uid, limit: limits.unscopedAtOnce) else { return .dropped }
            // The refusal the route itself would give ("may not use location", with the grant
            // that allows it), or one for everything when the route is unknown.
            return .refused({ line in
                let path = line?.split(separator: " ").last.map(String.init)
                if let line, let scope = path.flatMap({ Self.routeScopes[$0] }),
                   let refusal = authorisation.refusal(scope, for: caller, doing: line) {
                    return refusal
                }
                return authorisation.refusalOfEverything(for: caller, doing: line ?? "connection")
            }, countedAs: caller.uid)
        }
        guard ledger.take(caller.uid, limit: limits.perCaller) else { return .dropped }
        return .admitted(countedAs: caller.uid)
    }

    /// The soft limit on open files raised to the hard one (systemd gives 1024 soft and a
    /// high hard limit; the unit sets both with LimitNOFILE): the daemon uses no select(), so
    /// a high limit costs nothing, and a busy kit's streams and recordings never meet it.
    static func raiseDescriptorLimit() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = min(limit.rlim_max, 65_536)
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }

    /// Makes `path` free to bind, or says who holds it.
    static func claim(_ path: String) throws {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        guard info.st_mode & S_IFMT == S_IFSOCK else {
            throw FieldHALError(.busy, subject: path, detail: "exists and is not a socket",
                                advice: "move the file away or set [api] socket to another path")
        }
        if let pid = try answeringPeer(path) {
            throw FieldHALError(.busy, subject: path, detail: "another daemon (pid \(pid)) serves the API here",
                                advice: "stop it (systemctl stop fieldhal) or set [api] socket to another path")
        }
        unlink(path)
    }

    /// The pid of the process listening on `path`, or nil when nobody does (ECONNREFUSED).
    private static func answeringPeer(_ path: String) throws -> Int32? {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw FieldHALError(.io, subject: path, detail: "socket(): \(SystemError.describe())") }
        defer { close(fd) }
        var address = try UnixSocketListener.address(path)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else { return nil }
        var credentials = KernelCredentials()
        var length = socklen_t(MemoryLayout<KernelCredentials>.size)
        getsockopt(fd, SOL_SOCKET, KernelCredentials.option, &credentials, &length)
        return credentials.pid
    }

    // MARK: Routes

    /// The routes, the same on both doors; through the web door, each request passes the
    /// door's checks first (`WebDoorMiddleware`: Host, Origin, token, preflight).
    /// `door` names the door in the request counts (`socket`, `web`, `mqtt`).
    func makeRouter(webDoor: WebDoorSettings? = nil, door: String? = nil) -> Router<APIRequestContext> {
        let router = Router(context: APIRequestContext.self)
        // Outermost, so that every answer is counted, the web door's refusals included.
        router.middlewares.add(RequestCounter(door: door ?? (webDoor == nil ? "socket" : "web"), host: host))
        if let webDoor { router.middlewares.add(WebDoorMiddleware(settings: webDoor, host: host)) }
        router.middlewares.add(APIErrorMiddleware())
        // `APIErrorMiddleware.routes` knows each route's method, to answer another with 405.
        let v1 = router.group(RouterPath("/\(FieldHALAPI.version)"))
        v1.get("status") { _, context in
            let caller = try await context.caller(host)
            try host.authorise(.status, caller, doing: "GET /v1/status")
            let identity = host.identity
            return try json(APIStatus(version: identity.version, api: FieldHALAPI.version, pid: identity.pid,
                                      startedAt: identity.startedAt, configuration: identity.configurationFile,
                                      caller: host.describe(caller)))
        }
        // No scope: any caller the daemon lets in (an updater's health check, a fleet's
        // probe with any grant or token) learns only the verdict and which devices are there.
        v1.get("health") { request, context in
            _ = try await context.caller(host)
            _ = try Self.query(request, taking: [])
            return try json(host.health)
        }
        v1.get("metrics") { request, context in
            try host.authorise(.status, try await context.caller(host), doing: "GET /v1/metrics")
            _ = try Self.query(request, taking: [])
            return host.metricsResponse()
        }
        v1.get("capabilities") { _, context in
            try host.authorise(.status, try await context.caller(host), doing: "GET /v1/capabilities")
            return try json(host.capabilities)
        }
        v1.get("location") { request, context in
            let caller = try await context.caller(host)
            try host.authorise(.location, caller, doing: "GET /v1/location")
            let query = try Self.query(request, taking: ["device", "timeout_ms", "max_age_ms", "accuracy_m"])
            let fixRequest = try Self.fixRequest(query)
            let named = try Self.deviceName(query)
            try host.checkGrant(.location, named: named, scope: .location, caller, doing: "GET /v1/location")
            let provider = try host.locationProvider(named: named)
            do {
                return try json(try await provider.currentFix(fixRequest))
            } catch var error as FieldHALError where error.kind == .noFix {
                // The core's advice speaks of the request; a caller of the API has parameters.
                error.advice = "check the antenna has a view of the sky, or raise timeout_ms or max_age_ms, or ask for less with accuracy_m"
                throw error
            }
        }
        v1.get("events") { request, context in
            let caller = try await context.caller(host)
            let query = try Self.query(request, taking: ["types", "device"])
            var kinds = try Self.eventKinds(query)
            if query.get("types") == nil {
                // Without `types`: every type this caller may see (a kiosk granted location
                // gets fixes), and a refusal only when it may see none.
                let allowed = kinds.filter { host.authorisation.scopes(for: caller).contains($0.scope) }
                if !allowed.isEmpty { kinds = allowed }
                // …and of those, the ones this kit has: no reader, no tag events.
                let present = kinds.filter { kind in
                    switch kind {
                    case .fix: (try? host.location()) != nil
                    case .tag: host.nfc.hasReader
                    case .capability, .alert, .lock, .use: true
                    }
                }
                if !present.isEmpty { kinds = present }
            }
            for kind in kinds { try host.authorise(kind.scope, caller, doing: "GET /v1/events?types=\(kind.rawValue)") }
            var sources = try host.eventSources(kinds, named: try Self.deviceNames(query), caller)
            if kinds.contains(.use) {
                // Each use only to a caller who may use its device: a kiosk granted the
                // haptics does not learn what the fingerprint sensor said.
                sources.mayFollowUse = { [host] use in host.authorisation.maySee(use, caller) }
            }
            if case .web(let grant) = caller, case .token(let id, _) = grant.who { sources.token = id }
            let followed = kinds.map(\.rawValue).joined(separator: ",") + "|" + (try Self.deviceNames(query)).joined(separator: ",")
            return try events(kinds, sources, caller: caller, query: followed, lastEventID: request.headers[.init("Last-Event-ID")!], on: try Self.connection(context))
        }
        addDeviceRoutes(to: v1)
        addNFCRoutes(to: v1)
        addFeedbackRoutes(to: v1)
        addCameraRoutes(to: v1)
        addRecordingRoutes(to: v1)
        addBiometricsRoutes(to: v1)
        addFlowRoutes(to: v1)
        addWebTokenRoutes(to: v1)
        return router
    }

    private func json(_ value: some Encodable) throws -> Response { try Self.json(value) }

    /// The request's connection, for answers that stream on it.
    static func connection(_ context: APIRequestContext) throws -> any Channel {
        guard let channel = context.channel else {
            throw APIProblem(kind: APIProblem.forbidden, subject: "request", detail: "a stream needs a connection; a message has none",
                             advice: "follow it over the kit's socket or web door", status: 403)
        }
        return channel
    }

    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        Response(status: status, headers: [.contentType: "application/json"],
                 body: .init(byteBuffer: ByteBuffer(bytes: try FieldHALAPI.encoder.encode(value))))
    }

    /// The query's `name` as a whole number in `range` (400 otherwise), or `value` without it.
    static func wholeNumber(_ query: Parameters, _ name: String, default value: Int, range: ClosedRange<Int>) throws -> Int {
        guard let text = query.get(name) else { return value }
        guard let number = Int(text), range.contains(number) else {
            throw FieldHALError(.invalidArgument, subject: name, detail: "\"\(TerminalText.escaped(text))\" is not a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }

    /// `timeout_ms` (default 5000, at most 60000), `max_age_ms` (default 300000; 0: live
    /// fixes only), `accuracy_m` (default: any).
    static func fixRequest(_ query: Parameters) throws -> FixRequest {
        let timeout = try wholeNumber(query, "timeout_ms", default: 5000, range: 0...60_000)
        let maxAge = try wholeNumber(query, "max_age_ms", default: 300_000, range: 0...86_400_000)
        var accuracy: Double?
        if let text = query.get("accuracy_m") {
            guard let metres = Double(text), metres.isFinite, metres > 0 else {
                throw FieldHALError(.invalidArgument, subject: "accuracy_m", detail: "\"\(text)\" is not a positive number of metres")
            }
            accuracy = metres
        }
        return FixRequest(timeout: .milliseconds(timeout), maxAge: maxAge == 0 ? nil : .milliseconds(maxAge), requiredAccuracy: accuracy)
    }

    /// Every `device=NAME` of the query, in order, each a name that can be one (400 otherwise).
    static func deviceNames(_ query: Parameters) throws -> [String] {
        var names: [String] = []
        for name in query.getAll("device") {
            if let problem = KitConfiguration.problem(withDeviceName: name) {
                throw FieldHALError(.invalidArgument, subject: "device", detail: problem)
            }
            if !names.contains(name) { names.append(name) }
        }
        return names
    }

    /// `types=fix,capability,alert,lock,tag,use` (default: every type but `use`, which is asked for by name).
    static func eventKinds(_ query: Parameters) throws -> [APIEvent.Kind] {
        guard let text = query.get("types") else { return APIEvent.Kind.unasked }
        var kinds: [APIEvent.Kind] = []
        for name in text.split(separator: ",") {
            guard let kind = APIEvent.Kind(rawValue: String(name)) else {
                throw FieldHALError(.invalidArgument, subject: "types", detail: "no event type \"\(name)\"",
                                    advice: "the types are " + APIEvent.Kind.allCases.map(\.rawValue).joined(separator: ", "))
            }
            if !kinds.contains(kind) { kinds.append(kind) }
        }
        guard !kinds.isEmpty else {
            throw FieldHALError(.invalidArgument, subject: "types", detail: "names no event type",
                                advice: "leave it out for all, or name some of " + APIEvent.Kind.allCases.map(\.rawValue).joined(separator: ", "))
        }
        return kinds
    }

    /// Server-Sent Events: each capability's state first (when asked for), then fixes and
    /// changes as they come, one event per write so that a client sees each at once. Each
    /// event has an id (`EventSession`); a client that comes back with `Last-Event-ID`
    /// within the grace gets what came meanwhile, and a `gap` event for what it cannot.
    ///
    /// The response starts on its connection's event loop, then writes straight to the
    /// connection (`EventStreamSocket`): a fix is encoded once where the provider hands it
    /// over (its device thread) and written from there, so it wakes no other thread in the
    /// daemon. When the connection cannot be taken over, events are queued to the loop,
    /// which writes them.
    private func events(_ kinds: [APIEvent.Kind], _ sources: EventSources, caller: Caller, query: String, lastEventID: String?,
                        on channel: any Channel) throws -> Response {
        let keepAlive = keepAlive
        let writesEventsDirectly = writesEventsDirectly
        let adopted = self.adopted
        let executor = EventLoopTaskExecutor(channel.eventLoop)
        let sessions = host.eventSessions
        let resumption = sessions.resumption(of: lastEventID, caller: caller, query: query)
        let follow = { @Sendable [self] (session: EventSession) in self.follow(kinds, sources, into: session, sessions: sessions) }
        let body = ResponseBody { writer in
            try await withTaskExecutorPreference(executor) {
                // The stream always opens with a comment, so that the head is out before the
                // stream is handed over.
                try await writer.write(ByteBuffer(string: ": events\n\n"))
                let direct = writesEventsDirectly ? EventStreamSocket.takeOver(channel, from: adopted) : nil
                let (merged, sink) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .bufferingNewest(64))
                let connection = sessions.nextConnection()
                let outlet = EventSession.Outlet(connection: connection, send: { text in
                    if let direct { _ = direct.send(text) } else { sink.yield(text) }
                }, end: {
                    if let direct { direct.end(cleanly: true) } else { sink.finish() }
                })
                let session: EventSession
                var after: UInt64 = 0
                switch resumption {
                case .resume(let resumed, let number):
                    session = resumed
                    after = number
                case .fresh(let gap):
                    if let gap { outlet.send(gap) }
                    session = sessions.open(caller: caller, query: query)
                    follow(session)
                }
                // The client gone: SwiftNIO read its end and closed the connection.
                if let direct { channel.closeFuture.whenComplete { _ in direct.end(cleanly: false) } }
                _ = session.attach(outlet, after: after, lastEventID: lastEventID)
                let metrics = host.metrics
                metrics.followerCame()
                defer { metrics.followerLeft() }
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        while true {
                            try await Task.sleep(for: keepAlive)
                            outlet.send(": keep-alive\n\n")
                        }
                    }
                    if let direct {
                        group.addTask { await direct.flushWhenStalled() }
                        await withTaskCancellationHandler {
                            await direct.ended()
                        } onCancel: {
                            direct.end(cleanly: true)
                        }
                    } else {
                        do {
                            for await text in merged { try await writer.write(ByteBuffer(string: text)) }
                        } catch {
                            session.detach(connection)
                            throw error
                        }
                    }
                    group.cancelAll()
                }
                session.detach(connection)
                // A session left waiting for its client is closed after the grace.
                if !session.isClosed {
                    Task { [sessions] in
                        try? await Task.sleep(for: sessions.grace + .milliseconds(100))
                        sessions.expire()
                    }
                }
                guard direct == nil else {
                    // The body was written past SwiftNIO and ended there: the connection is
                    // closed rather than given back (SwiftNIO would write a last chunk of its own).
                    throw EventStreamSocket.HandedOver()
                }
                try await writer.finish(nil)
            }
        }
        return Response(status: .ok, headers: [.contentType: "text/event-stream", .cacheControl: "no-store"], body: body)
    }

    /// Follows what `kinds` and `sources` name into `session` until a source ends (its
    /// device closed by a reload, or the daemon stopping: the session closes cleanly and the
    /// client reconnects to the new state) or the session closes. Not a child of a request:
    /// the session outlives its connections.
    private func follow(_ kinds: [APIEvent.Kind], _ sources: EventSources, into session: EventSession, sessions: EventSessions) {
        let host = self.host
        let changes = kinds.contains(.capability) ? host.capabilityEvents() : nil
        let initial = kinds.contains(.capability) ? host.capabilities.capabilities : []
        let flowKinds = Set(kinds).intersection([.alert, .lock])
        let flowChanges = flowKinds.isEmpty ? nil : host.flowEvents()
        // The lock's state first, as the capabilities': a client starts from where it stands.
        let lockNow = kinds.contains(.lock) ? (try? host.flows?.lockStatus()) : nil
        let uses = sources.mayFollowUse.map { (events: host.useEvents(), mayFollow: $0) }
        let revocations = sources.token.map { (id: $0, ids: host.revocations()) }
        let tagWatches = sources.readers.map { (name: $0.name, watch: $0.watch.watch()) }
        let lastFixEvents = lastFixEvents
        /// A receiver's fix as an event, encoded once for every stream that follows it.
        let fixEvent = { @Sendable (fix: Fix, device: String) -> String? in
            if let cached = lastFixEvents.withLock({ $0[device].flatMap { $0.fix == fix ? $0 : nil } }) { return cached.text }
            guard let text = try? APIEvent.fix(fix, device: device).serverSentEvent(encoder: FieldHALAPI.encoder) else { return nil }
            lastFixEvents.withLock { $0[device] = (fix, text) }
            return text
        }
        for status in initial { if let text = try? APIEvent.capability(status).serverSentEvent() { session.emit(text) } }
        if let lockNow, let text = try? APIEvent.lock(lockNow).serverSentEvent() { session.emit(text) }
        for tags in tagWatches {
            guard let present = tags.watch.present else { continue }
            let event = APITagEvent(state: .found, tag: APITag(present), device: tags.name())
            if let text = try? APIEvent.tag(event).serverSentEvent() { session.emit(text) }
        }
        let (sourceEnded, endSources) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let ended: @Sendable () -> Void = { endSources.yield() }
        // Fixes from where each arises (the receiver's thread), straight into the session.
        let fixes = sources.receivers.map { receiver in
            receiver.watch.follow({ fix in
                if let text = fixEvent(fix, receiver.name()) { session.emit(text) }
            }, end: { _ in ended() })
        }
        let task = Task {
            defer { for subscription in fixes { subscription.cancel() } }
            await withTaskGroup(of: Void.self) { group in
                if let changes {
                    group.addTask {
                        defer { ended() }
                        do { for try await status in changes { if let text = try? APIEvent.capability(status).serverSentEvent() { session.emit(text) } } } catch {}
                    }
                }
                if let flowChanges {
                    group.addTask {
                        defer { ended() }
                        do {
                            for try await event in flowChanges where flowKinds.contains(event.kind) {
                                if let text = try? event.serverSentEvent() { session.emit(text) }
                            }
                        } catch {}
                    }
                }
                if let uses {
                    group.addTask {
                        defer { ended() }
                        do {
                            for try await use in uses.events where uses.mayFollow(use) {
                                if let text = try? APIEvent.use(use).serverSentEvent() { session.emit(text) }
                            }
                        } catch {}
                    }
                }
                if let revocations {
                    // A revoked token's stream ends at once, and is not resumed.
                    group.addTask {
                        do { for try await id in revocations.ids where id == revocations.id { ended(); return } } catch {}
                    }
                }
                for tags in tagWatches {
                    group.addTask {
                        defer { ended() }
                        do {
                            for try await change in tags.watch.changes {
                                if let text = try? APIEvent.tag(APITagEvent(change, device: tags.name())).serverSentEvent() { session.emit(text) }
                            }
                        } catch {}
                    }
                }
                group.addTask {
                    for await _ in sourceEnded { return }
                }
                // The first to end (a source, or the session closed: this task cancelled) ends all.
                _ = await group.next()
                group.cancelAll()
            }
            sessions.close(session, clean: !Task.isCancelled)
        }
        session.following.withLock { $0 = task }
        if session.isClosed { task.cancel() }
    }
}

extension APITagEvent {
    /// A change of a reader's field as the API says it.
    public init(_ change: TagPresence.Change, device: String) {
        switch change {
        case .found(let tag): self.init(state: .found, tag: APITag(tag), device: device)
        case .lost(let tag): self.init(state: .lost, tag: APITag(tag), device: device)
        }
    }
}

/// The receivers and readers an event stream follows, each with its name: read as each
/// event goes out, because the default device's watch follows whichever device is the
/// default after a reload.
struct EventSources: Sendable {
    var receivers: [(name: @Sendable () -> String, watch: SharedLocation)] = []
    var readers: [(name: @Sendable () -> String, watch: TagPresence)] = []
    /// For `use` events: whether the caller may see a use (its scopes and grants cover the device).
    var mayFollowUse: (@Sendable (DeviceUse) -> Bool)?
    /// Through the web door, the caller's token: its revocation ends the stream.
    var token: String?
}

extension APIHost {
    /// What a stream of `kinds` follows: for fixes the receivers `names` names, for tags the
    /// readers (a type whose capability has none of the names: its default device). A name
    /// that is neither is `noSuchDevice`; each device is checked against the caller's grant.
    /// Before the response starts, so that a missing device is a plain error, not a stream
    /// that ends.
    func eventSources(_ kinds: [APIEvent.Kind], named names: [String], _ caller: Caller) throws -> EventSources {
        let kit = try heldKit()
        var sources = EventSources()
        var used = Set<String>()
        func pick(_ capability: Capability) -> [String?] {
            let have = Set(kit.names(of: capability))
            let picked = names.filter { have.contains($0) }
            used.formUnion(picked)
            return picked.isEmpty ? [nil] : picked
        }
        /// A named device keeps its name; the default one is whichever is the default now.
        func label(_ capability: Capability, _ name: String?, _ found: String) -> @Sendable () -> String {
            guard name == nil || name == kit.status(of: capability).name else { return { found } }
            return { [self] in status(of: capability)?.name ?? found }
        }
        if kinds.contains(.fix) {
            for name in pick(.location) {
                try checkGrant(.location, named: name, scope: .location, caller, doing: "GET /v1/events?types=fix")
                let receiver = try location(named: name)
                sources.receivers.append((label(.location, name, receiver.name), receiver.watch))
            }
        }
        if kinds.contains(.tag) {
            for name in pick(.nfcReader) {
                try checkGrant(.nfcReader, named: name, scope: .nfcRead, caller, doing: "GET /v1/events?types=tag")
                let reader = try tagPresence(named: name)
                sources.readers.append((label(.nfcReader, name, reader.name), reader.watch))
            }
        }
        if let stray = names.first(where: { !used.contains($0) }) {
            let followed = (kinds.contains(.fix) ? [Capability.location] : []) + (kinds.contains(.tag) ? [Capability.nfcReader] : [])
            let offered = followed.flatMap { kit.names(of: $0) }
            throw FieldHALError(.noSuchDevice, subject: "device",
                                detail: followed.isEmpty ? "only fix and tag events come from a named device"
                                    : "this kit has no \(followed.map(\.description).joined(separator: " or ")) named \"\(TerminalText.escaped(stray))\"",
                                advice: offered.isEmpty ? "leave device out" : "its devices for these events: \(offered.joined(separator: ", "))")
        }
        return sources
    }
}

extension APIHost {
    /// The tag presence watch, or why this kit has none.
    func tagPresence() throws -> TagPresence {
        guard nfc.hasReader else {
            throw FieldHALError(.notConfigured, subject: "nfc", detail: "this kit has no NFC reader to watch for tags",
                                advice: "add an [nfc] section to \(identity.configurationFile), then reload the daemon")
        }
        return tags
    }
}

extension APIHost {
    /// Throws the refusal when `caller` may not use `scope`.
    func authorise(_ scope: APIScope, _ caller: Caller, doing what: String) throws {
        if let refusal = authorisation.refusal(scope, for: caller, doing: what) { throw refusal }
    }

    /// The device `query`'s `?device=` names for `capability` (the default one when none),
    /// once the caller's grant is found to cover it: a kiosk granted the front reader is
    /// refused the others.
    func device(_ capability: Capability, _ query: Parameters, scope: APIScope, _ caller: Caller,
                doing what: String) throws -> String {
        let key = try device(capability, named: try APIServer.deviceName(query))
        if let refusal = authorisation.refusal(scope, for: caller, doing: what, device: key) { throw refusal }
        return key.name
    }

    /// The same check for routes whose devices are shared (the location watch, the NFC chips):
    /// a name the kit lacks is `noSuchDevice`; no name, the default device's grant, when the
    /// kit has one (otherwise the route says what is missing).
    func checkGrant(_ capability: Capability, named name: String?, scope: APIScope, _ caller: Caller, doing what: String) throws {
        let key: DeviceKey
        if let name {
            key = try device(capability, named: name)
        } else {
            guard let found = try? device(capability, named: nil) else { return }
            key = found
        }
        if let refusal = authorisation.refusal(scope, for: caller, doing: what, device: key) { throw refusal }
    }
}

extension APIHost {
    /// The caller as `GET /v1/status` shows it: who, and what they may do.
    func describe(_ caller: Caller) -> APICaller {
        let scopes = authorisation.scopes(for: caller).sorted()
        switch caller {
        case .peer(let peer):
            return APICaller(uid: peer.uid, gid: peer.gid, pid: peer.pid, user: peer.userName, scopes: scopes)
        case .web(let grant):
            guard case .token(let id, let origin) = grant.who else { return APICaller(scopes: scopes) }
            return APICaller(token: id, origin: origin, devices: grant.devices?.sorted(), scopes: scopes)
        }
    }
}

/// A request and the connection it came on: on the Unix socket the connection's peer is the
/// caller; through the web door, the token the door checked (`WebDoorMiddleware`).
public struct APIRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The connection the request came on; nil for a request that came as a message (the
    /// MQTT bridge's commands, `APIMessageDoor`), which no hang-up can cancel.
    let channel: (any Channel)?
    /// Set by the web door once the request's token and origin are checked, and by the
    /// message door for its grant.
    var webCaller: APIAuthorisation.Grant?

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
    }

    /// A request without a connection, from a caller known by `grant`.
    init(message grant: APIAuthorisation.Grant, logger: Logger) {
        coreContext = .init(source: MessageSource(logger: logger))
        channel = nil
        webCaller = grant
    }

    private struct MessageSource: RequestContextSource {
        let logger: Logger
    }

    func caller(_ host: APIHost) async throws -> Caller {
        if let webCaller { return .web(webCaller) }
        do {
            guard let channel else { throw FieldHALError(.notConfigured, subject: "caller", detail: "the request has no connection") }
            return .peer(try await PeerCredentials.of(channel))
        } catch {
            throw APIProblem(kind: APIProblem.forbidden, subject: "caller", detail: "the kernel did not say who is calling (\(error))",
                             advice: "connect over the daemon's Unix socket", status: 403)
        }
    }
}

/// Counts each answer by door, route and status for `/metrics`.
struct RequestCounter: RouterMiddleware {
    typealias Context = APIRequestContext
    let door: String
    let host: APIHost

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let response = try await next(request, context)
        host.metrics.answered(door: door, path: request.uri.path, status: Int(response.status.code))
        return response
    }
}

/// Every failure becomes the API's JSON error body, unknown routes included, so that a client
/// reads one shape for every error.
struct APIErrorMiddleware: RouterMiddleware {
    typealias Context = APIRequestContext

    /// Each route's method: the router answers another method on a route with 404, which
    /// would tell a client the route does not exist.
    static let routes: [String: [HTTPRequest.Method]] = [
        "status": [.get], "metrics": [.get], "health": [.get], "capabilities": [.get], "devices": [.get], "location": [.get], "events": [.get],
        "nfc/read": [.post], "nfc/write": [.post], "nfc/emulate": [.post], "haptics/play": [.post], "speaker/play": [.post],
        "camera/photo": [.get], "camera/formats": [.get], "camera/preview": [.get], "session/verify": [.post], "camera/record": [.post], "microphone/record": [.post], "biometrics": [.get], "biometrics/verify": [.post],
        "biometrics/enroll": [.post], "lock": [.get], "lock/unlock": [.post], "lock/setup": [.post], "lock/settings": [.post], "evidence": [.get, .post], "evidence/flush": [.post],
        "session": [.get, .post, .delete], "alerts": [.get], "alerts/acknowledge": [.post], "web/tokens": [.get, .post],
    ].reduce(into: [:]) { $0["/\(FieldHALAPI.version)/\($1.key)"] = $1.value }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let problem as APIProblem {
            return Self.response(problem)
        } catch let error as FieldHALError {
            return Self.response(APIProblem(error))
        } catch let error as any HTTPResponseError {
            var status = Int(error.status.code)
            let allowed = Self.routes[request.uri.path]
            if status == 404, let allowed, !allowed.contains(request.method) { status = 405 }
            let method = allowed?.map(\.rawValue).joined(separator: ", ") ?? "GET"
            let (kind, detail, advice): (String, String, String?) = switch status {
            case 404: (APIProblem.notFound, "no such route in API \(FieldHALAPI.version)", "the routes are in api/openapi.yaml and docs/api.md")
            case 405: (APIProblem.methodNotAllowed, "only \(method) \(allowed?.count == 1 ? "is" : "are") served here", "use \(method)")
            default: ("http", error.status.reasonPhrase, nil)
            }
            var response = Self.response(APIProblem(kind: kind, subject: "\(request.method) \(request.uri.path)", detail: detail,
                                                    advice: advice, status: status))
            if status == 405 { response.headers[.allow] = method }
            return response
        } catch let error as HTTPParserError {
            // A body cut short or badly framed, found while the route read it: the caller's
            // request, never the daemon's failure.
            return Self.response(RequestHeadGuard.problem(for: error, subject: "request body"))
        } catch is CancellationError {
            return Self.response(APIProblem(FieldHALError(.cancelled, subject: "\(request.method) \(request.uri.path)", detail: "the daemon is stopping")))
        } catch {
            return Self.response(APIProblem(kind: FieldHALError.Kind.io.rawValue, subject: "\(request.method) \(request.uri.path)",
                                            detail: "\(error)", status: 500))
        }
    }

    static func response(_ problem: APIProblem) -> Response {
        let body = (try? FieldHALAPI.encoder.encode(APIErrorBody(error: problem))) ?? Data("{}".utf8)
        return Response(status: .init(code: problem.status), headers: [.contentType: "application/json"],
                        body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }
}
