import CSodium
import Foundation
import Hummingbird
import HummingbirdWebSocket
import Logging
import Synchronization
import Transrify

/// A faithful, persistent Transrify API for labs and tests: tenants with keys, users with a
/// normal and a duress PIN, sessions, duress alerts with `nearby`, acks, presigned PUT
/// URLs served by the server itself, and finalize checking size and SHA-256.
///
/// State lives in `directory`: `lab.sqlite` and `objects/`. Listens on 127.0.0.1 unless told.
public final class LabServer: Sendable {
    public struct Configuration: Sendable {
        public var host = "127.0.0.1"
        /// 0: any free port (the running server reports it).
        public var port = 0
        public var directory: String
        public var presignLifetime: Duration = .seconds(900)
        /// How far back `nearby` looks.
        public var alertMaxAge: Duration = .seconds(3600)
        public var maxObjectBytes: Int64 = 4 << 30
        /// Listen on an address other machines reach, in plain HTTP. The lab server hands out
        /// a demo tenant key and demo PINs and shows each session's verdict on
        /// `/lab/v1/state`: on a shared network anyone could read who signed in under duress.
        /// Only for a closed lab network; off by default.
        public var insecurePublicLab = false

        public init(directory: String) { self.directory = directory }

        /// Whether `host` is reachable only from this machine: `localhost`, 127.0.0.0/8 or ::1.
        public static func isLoopback(_ host: String) -> Bool {
            if host == "localhost" { return true }
            var v4 = in_addr()
            if inet_pton(AF_INET, host, &v4) == 1 { return UInt32(bigEndian: v4.s_addr) >> 24 == 127 }
            var v6 = in6_addr()
            if inet_pton(AF_INET6, host, &v6) == 1 {
                return withUnsafeBytes(of: &v6) { bytes in bytes.prefix(15).allSatisfy { $0 == 0 } && bytes[15] == 1 }
            }
            return false
        }
    }

    /// Why a configuration cannot be served.
    public struct ConfigurationError: Error, CustomStringConvertible {
        public let description: String
    }

    let configuration: Configuration
    let store: LabStore
    /// Signs presigned URLs; made per server start (old URLs die with the process).
    private let signingKey: [UInt8]
    private let rateWindows = Mutex<[String: (start: Date, count: Int)]>([:])
    private let injected = Mutex<[String: [Int]]>([:])
    private let baseURL = Mutex<String>("")
    let channels = AlertChannelHub()

    public init(_ configuration: Configuration) throws {
        guard configuration.insecurePublicLab || Configuration.isLoopback(configuration.host) else {
            throw ConfigurationError(description: """
                refusing to listen on \(configuration.host): the lab server speaks plain HTTP and shows every \
                session's verdict (normal or duress) and its demo key to whoever asks; listen on 127.0.0.1, \
                or pass --insecure-public-lab on a closed lab network only
                """)
        }
        self.configuration = configuration
        try FileManager.default.createDirectory(atPath: configuration.directory + "/objects", withIntermediateDirectories: true)
        store = try LabStore(path: configuration.directory + "/lab.sqlite")
        var key = [UInt8](repeating: 0, count: Int(crypto_auth_hmacsha256_KEYBYTES))
        randombytes_buf(&key, key.count)
        signingKey = key
    }

    // MARK: Lab controls (tests, `seed`)

    public func addTenant(key: String, name: String, rateLimitPerMinute: Int = 600) throws {
        try store.addTenant(key: key, name: name, rateLimitPerMinute: rateLimitPerMinute)
    }

    public func setSuspended(tenantKey: String, _ suspended: Bool) throws { try store.setSuspended(tenantKey, suspended) }

    public func addUser(tenantKey: String, customerRef: String, pin: String, duressPin: String) throws {
        try store.addUser(tenantKey: tenantKey, customerRef: customerRef, pin: pin, duressPin: duressPin)
    }

    /// The next requests to `path` are answered with these statuses instead (503, 429, …).
    public func injectFailures(_ path: String, statuses: [Int]) {
        injected.withLock { $0[path, default: []] += statuses }
    }

    public func acks(alertId: String) throws -> [LabStore.AckRecord] { try store.acks(alertId: alertId) }
    public func evidence() throws -> [LabStore.EvidenceRecord] { try store.evidence() }
    /// What `GET /lab/v1/state` answers for the tenant: its evidence with each segment's
    /// place, and its recordings' chains as checked.
    public func state(tenantKey: String) throws -> LabState { try store.state(tenantKey: tenantKey) }

    /// Writes each recording of an incident as one file in `directory` (created if need be):
    /// `<incident>-audio.wav`, `<incident>-video.avi`, numbered when a kind has several
    /// recordings. Throws when the incident has no recording in segments.
    public func export(incidentId: String, to directory: String) throws -> [RecordingExport.Exported] {
        let (evidence, manifests) = try store.incident(incidentId)
        // Audio and video are what a kit records in segments; anything else claiming to be a
        // segment is left out rather than stopping the export of the rest.
        let recordings = LabState.recordings(of: evidence, manifests: manifests)
            .filter { [EvidenceKind.audio.rawValue, EvidenceKind.video.rawValue].contains($0.kind) }
        guard !recordings.isEmpty else {
            throw RecordingExport.Failure(evidence.isEmpty ? "the lab has no evidence of incident \(incidentId)"
                                                           : "incident \(incidentId) has no audio or video recorded in segments (\(evidence.count) items)",
                                         nothingToExport: true)
        }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var exported: [RecordingExport.Exported] = []
        for recording in recordings {
            let parts = evidence.compactMap { item in
                item.segment.flatMap { $0.recording == recording.recording ? RecordingExport.Part(segment: $0, path: configuration.directory + "/objects/" + item.key) : nil }
            }
            let sameKind = recordings.filter { $0.kind == recording.kind }
            let number = sameKind.count > 1 ? "-\((sameKind.firstIndex { $0.recording == recording.recording } ?? 0) + 1)" : ""
            // The incident id is the kit's to choose: only its safe characters name a file.
            let safe = String(incidentId.map { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") ? $0 : "_" })
            let name = "\(safe)-\(recording.kind.lowercased())\(number).\(recording.kind == EvidenceKind.audio.rawValue ? "wav" : "avi")"
            let path = (directory as NSString).appendingPathComponent(name)
            let seconds = try RecordingExport.join(kind: recording.kind, parts, to: path)
            exported.append(.init(recording: recording.recording, kind: recording.kind, path: path, segments: recording.segments, seconds: seconds,
                                  problems: recording.problems))
        }
        return exported
    }
    public func alerts(tenantKey: String) throws -> [Alert] {
        try store.nearbyAlerts(tenantKey: tenantKey, geo: nil, radiusMeters: 10_000, maxAgeMilliseconds: .max / 2)
    }
    public func sessionMode(_ sessionId: String) throws -> String? { try store.session(sessionId)?.mode }

    /// Off: the server closes every open alerts channel and refuses new ones with 503, as a
    /// network that drops WebSockets would; on: they are accepted again.
    public func setAlertChannelAvailable(_ available: Bool) { channels.setAccepting(available) }
    /// Lab fault: every open alert channel receives `text` as it is.
    public func sendOnAlertChannels(raw text: String) { channels.sendRaw(text) }
    /// How many alert channels (WebSockets) are open.
    public var openAlertChannels: Int { channels.openCount }

    /// The demo tenant and users that `fieldhal-labserver seed` creates.
    public func seedDemo() throws -> (tenantKey: String, users: [(customerRef: String, pin: String, duressPin: String)]) {
        let tenantKey = "lab-tenant-demo-key"
        try addTenant(key: tenantKey, name: "Demo tenant")
        let users = [("alice01", "2468", "1357"), ("bob02", "8024", "9753")]
        for (ref, pin, duress) in users { try addUser(tenantKey: tenantKey, customerRef: ref, pin: pin, duressPin: duress) }
        return (tenantKey, users.map { (customerRef: $0.0, pin: $0.1, duressPin: $0.2) })
    }

    // MARK: Running

    /// Serves until the task is cancelled; `onListening` gets the bound port.
    public func run(logLevel: Logger.Level = .warning, onListening: @escaping @Sendable (Int) async -> Void = { _ in }) async throws {
        var logger = Logger(label: "fieldhal-labserver")
        logger.logLevel = logLevel
        let app = Application(
            router: makeRouter(),
            server: .http1WebSocketUpgrade(webSocketRouter: makeWebSocketRouter()),
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "fieldhal-labserver"),
            onServerRunning: { [self] channel in
                let port = channel.localAddress?.port ?? configuration.port
                baseURL.withLock { $0 = "http://\(configuration.host):\(port)" }
                await onListening(port)
            },
            logger: logger
        )
        try await app.runService(gracefulShutdownSignals: [])
    }

    /// Starts serving in a task of its own and returns once it listens. In-process servers
    /// (tests, demos) log only critical errors: stopping one cancels its connections, which
    /// Hummingbird reports as errors.
    public func start() async throws -> RunningLabServer {
        let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
        let task = Task { [self] in
            defer { continuation.finish() }
            try await run(logLevel: .critical) { continuation.yield($0) }
        }
        for await port in ports { return RunningLabServer(port: port, task: task, server: self) }
        _ = try await task.value
        throw LabError.internalError("the lab server stopped before listening")
    }

    // MARK: Routes

    func makeRouter() -> Router<BasicRequestContext> {
        let router = Router()
        router.post(.init(TransrifyAPI.loginPath)) { [self] request, context in
            try await handle(TransrifyAPI.loginPath) { try await login(request.decode(as: LoginRequest.self, context: context)) }
        }
        router.get(.init(TransrifyAPI.verifyPath)) { [self] request, _ in
            try await handle(TransrifyAPI.verifyPath) {
                guard let sessionId = request.uri.queryParameters.get("sessionId") else {
                    throw APIError(.badRequest, "BAD_REQUEST", "sessionId is required")
                }
                return try json(VerifyResponse(valid: try store.session(sessionId) != nil))
            }
        }
        router.post(.init(TransrifyAPI.duressAlertPath)) { [self] request, context in
            try await handle(TransrifyAPI.duressAlertPath) { try await duressAlert(request.decode(as: DuressAlertRequest.self, context: context)) }
        }
        router.post(.init(TransrifyAPI.nearbyAlertsPath)) { [self] request, context in
            try await handle(TransrifyAPI.nearbyAlertsPath) { try await nearby(request.decode(as: NearbyAlertsRequest.self, context: context)) }
        }
        router.post(.init(TransrifyAPI.ackPath)) { [self] request, context in
            try await handle(TransrifyAPI.ackPath) { try await ack(request.decode(as: AckRequest.self, context: context)) }
        }
        router.post(.init(TransrifyAPI.presignPath)) { [self] request, context in
            try await handle(TransrifyAPI.presignPath) { try await presign(request.decode(as: PresignRequest.self, context: context)) }
        }
        router.put("/lab/objects/:key") { [self] request, context in
            try await handle("/lab/objects") { try await storeObject(request, key: context.parameters.get("key") ?? "") }
        }
        router.get("/lab/v1/state") { [self] request, _ in
            try await handle("/lab/v1/state") {
                let key = request.headers[.init("X-Tenant-Key")!] ?? ""
                guard try store.tenant(key) != nil else { throw APIError(.unauthorized, "INVALID_TENANT_KEY", "unknown tenant key") }
                var state = try store.state(tenantKey: key)
                state.alerts = try alerts(tenantKey: key)
                return try json(state)
            }
        }
        router.post(.init(TransrifyAPI.finalizePath)) { [self] request, context in
            try await handle(TransrifyAPI.finalizePath) { try await finalize(request.decode(as: FinalizeRequest.self, context: context)) }
        }
        return router
    }

    /// The alerts channel (Req 35): the tenant key as a query parameter, checked before the
    /// upgrade; then a snapshot of the active alerts and one message per new alert.
    func makeWebSocketRouter() -> Router<BasicWebSocketRequestContext> {
        let router = Router(context: BasicWebSocketRequestContext.self)
        router.ws(.init(TransrifyAPI.alertsChannelPath)) { [self] request, _ in
            guard channels.isAccepting else { throw HTTPError(.serviceUnavailable, message: "alert channel unavailable (lab)") }
            do {
                try checkTenant(request.uri.queryParameters.get("tenantKey") ?? "")
            } catch let error as APIError {
                throw HTTPError(error.status, message: error.message)
            }
            return .upgrade([:])
        } onUpgrade: { [self] inbound, outbound, context in
            let tenantKey = context.request.uri.queryParameters.get("tenantKey") ?? ""
            let own = try ownCustomerRef(sessionId: context.request.uri.queryParameters.get("sessionId"), tenantKey: tenantKey)
            // Subscribe before the snapshot: an alert in between comes twice, never not at all.
            let (id, alerts) = channels.subscribe(tenantKey: tenantKey, excludingCustomerRef: own)
            defer { channels.close(id) }
            let snapshot = try store.nearbyAlerts(tenantKey: tenantKey, geo: nil, radiusMeters: 10_000,
                                                  maxAgeMilliseconds: Int64(configuration.alertMaxAge.components.seconds) * 1000,
                                                  excludingCustomerRef: own)
            try await outbound.write(.text(Self.text(AlertChannelMessage(type: .snapshot, alerts: snapshot))))
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for await outgoing in alerts {
                        switch outgoing {
                        case .alert(let alert): try await outbound.write(.text(Self.text(AlertChannelMessage(type: .alert, alerts: [alert]))))
                        case .raw(let text): try await outbound.write(.text(text))
                        }
                    }
                    // Closed by the lab: the close handshake ends the client's side and so `inbound`.
                    try? await outbound.close(.goingAway, reason: "alert channel closed by the server")
                }
                // The client only listens; its close (or a dead connection) ends `inbound`.
                for try await _ in inbound {}
                channels.close(id)
                try await group.waitForAll()
            }
        }
        return router
    }

    private static func text(_ message: AlertChannelMessage) throws -> String {
        String(decoding: try JSONEncoder().encode(message), as: UTF8.self)
    }

    /// Injected failures first, then the handler; every error becomes a JSON error body.
    private func handle(_ path: String, _ body: () async throws -> Response) async throws -> Response {
        if let status = injected.withLock({ queue -> Int? in
            guard var statuses = queue[path], !statuses.isEmpty else { return nil }
            let first = statuses.removeFirst()
            queue[path] = statuses
            return first
        }) {
            let code = status == 429 ? "RATE_LIMIT_EXCEEDED" : "INJECTED_FAILURE"
            return try json(APIErrorBody(code: code, message: "injected by the lab"), status: .init(code: status))
        }
        do {
            return try await body()
        } catch let error as APIError {
            return try json(APIErrorBody(code: error.code, message: error.message), status: error.status)
        } catch let error as HTTPError {
            return try json(APIErrorBody(code: "BAD_REQUEST", message: "\(error)"), status: error.status)
        }
    }

    /// Tenant key known, tenant active, under its rate limit.
    private func checkTenant(_ key: String) throws {
        guard let tenant = try store.tenant(key) else { throw APIError(.unauthorized, "INVALID_TENANT_KEY", "unknown tenant key") }
        guard !tenant.suspended else { throw APIError(.forbidden, "TENANT_SUSPENDED", "tenant suspended") }
        let allowed = rateWindows.withLock { windows -> Bool in
            let now = Date()
            var window = windows[key] ?? (now, 0)
            if now.timeIntervalSince(window.start) >= 60 { window = (now, 0) }
            window.count += 1
            windows[key] = window
            return window.count <= tenant.rateLimitPerMinute
        }
        guard allowed else { throw APIError(.tooManyRequests, "RATE_LIMIT_EXCEEDED", "more than \(tenant.rateLimitPerMinute) requests a minute") }
    }

    private func login(_ request: LoginRequest) async throws -> Response {
        try checkTenant(request.tenantKey)
        let verdict = try store.verdict(tenantKey: request.tenantKey, customerRef: request.customerRef, pin: request.pin)
        guard verdict != .fail else { return try json(LoginResponse(verdict: .fail, recommendedAction: "DENY", sessionId: nil, token: nil)) }
        let session = try store.createSession(tenantKey: request.tenantKey, customerRef: request.customerRef, mode: verdict,
                                              geo: request.geo, device: request.device)
        return try json(LoginResponse(verdict: verdict, recommendedAction: verdict == .normal ? "ALLOW" : "ALLOW_LIMITED",
                                      sessionId: session.sessionId, token: session.token))
    }

    private func duressAlert(_ request: DuressAlertRequest) async throws -> Response {
        try checkTenant(request.tenantKey)
        guard request.alertKind == "DURESS" else { throw APIError(.badRequest, "BAD_REQUEST", "alertKind must be DURESS") }
        guard let session = try store.session(request.sessionId), session.tenantKey == request.tenantKey else {
            throw APIError(.notFound, "SESSION_NOT_FOUND", "no such session for this tenant")
        }
        let alertId = try store.addAlert(session: session, sessionId: request.sessionId, geo: request.geo)
        if let alert = try store.alert(alertId) { channels.publish(alert, tenantKey: request.tenantKey) }
        return try json(DuressAlertResponse(alertId: alertId))
    }

    private func nearby(_ request: NearbyAlertsRequest) async throws -> Response {
        try checkTenant(request.tenantKey)
        guard (100...10_000).contains(request.radiusMeters) else {
            throw APIError(.badRequest, "INVALID_RADIUS", "radiusMeters must be 100–10000")
        }
        let alerts = try store.nearbyAlerts(tenantKey: request.tenantKey, geo: request.geo, radiusMeters: request.radiusMeters,
                                            maxAgeMilliseconds: Int64(configuration.alertMaxAge.components.seconds) * 1000,
                                            excludingCustomerRef: try ownCustomerRef(sessionId: request.sessionId, tenantKey: request.tenantKey))
        return try json(NearbyAlertsResponse(alerts: alerts))
    }

    /// The user of the asking session, whose own alerts `nearby` and the channel leave out: a
    /// duressed kit must never be told of its own alert (Req 24: the alert is silent at the
    /// device). A real server should do the same; the kit filters too. An unknown or ended
    /// session filters nothing (the kit's own filter still holds).
    private func ownCustomerRef(sessionId: String?, tenantKey: String) throws -> String? {
        guard let sessionId, let session = try store.session(sessionId), session.tenantKey == tenantKey else { return nil }
        return session.customerRef
    }

    private func ack(_ request: AckRequest) async throws -> Response {
        try checkTenant(request.tenantKey)
        guard try store.alertTenant(request.alertId) == request.tenantKey else {
            throw APIError(.notFound, "ALERT_NOT_FOUND", "no such alert for this tenant")
        }
        try store.addAck(alertId: request.alertId, customerRef: request.customerRef, method: request.method)
        return try json(AckResponse(acknowledged: true))
    }

    private func presign(_ request: PresignRequest) async throws -> Response {
        try checkTenant(request.tenantKey)
        let key = "obj-" + LabStore.randomID()
        try store.addObject(key: key, tenantKey: request.tenantKey, incidentId: request.incidentId, contentType: request.contentType)
        let expires = Int64(Date().timeIntervalSince1970) + configuration.presignLifetime.components.seconds
        let url = baseURL.withLock { $0 } + "/lab/objects/\(key)?expires=\(expires)&signature=\(signature(key: key, expires: expires))"
        return try json(PresignResponse(url: url, key: key))
    }

    private func signature(key: String, expires: Int64) -> String {
        let message = Array("PUT\n\(key)\n\(expires)".utf8)
        var mac = [UInt8](repeating: 0, count: Int(crypto_auth_hmacsha256_BYTES))
        crypto_auth_hmacsha256(&mac, message, UInt64(message.count), signingKey)
        return mac.map { String(format: "%02x", $0) }.joined()
    }

    /// The presigned PUT: signature and expiry checked, the body streamed to a temporary
    /// file while hashing, then renamed into place and recorded.
    private func storeObject(_ request: Request, key: String) async throws -> Response {
        let query = request.uri.queryParameters
        guard let expiresText = query.get("expires"), let expires = Int64(expiresText), let given = query.get("signature") else {
            throw APIError(.forbidden, "SIGNATURE_INVALID", "missing expires or signature")
        }
        let expected = Array(signature(key: key, expires: expires).utf8), received = Array(given.utf8)
        guard expected.count == received.count, sodium_memcmp(expected, received, expected.count) == 0 else {
            throw APIError(.forbidden, "SIGNATURE_INVALID", "bad signature")
        }
        guard Int64(Date().timeIntervalSince1970) <= expires else { throw APIError(.forbidden, "URL_EXPIRED", "the presigned URL expired") }
        guard try store.object(key) != nil else { throw APIError(.notFound, "OBJECT_NOT_FOUND", "no presigned object \(key)") }

        let final = configuration.directory + "/objects/" + key
        let temporary = final + ".part-" + LabStore.randomID(bytes: 4)
        guard FileManager.default.createFile(atPath: temporary, contents: nil), let file = FileHandle(forWritingAtPath: temporary) else {
            throw APIError(.internalServerError, "STORAGE_ERROR", "cannot create \(temporary)")
        }
        var state = crypto_hash_sha256_state()
        crypto_hash_sha256_init(&state)
        var size: Int64 = 0
        do {
            for try await buffer in request.body {
                size += Int64(buffer.readableBytes)
                guard size <= configuration.maxObjectBytes else { throw APIError(.contentTooLarge, "OBJECT_TOO_LARGE", "over \(configuration.maxObjectBytes) bytes") }
                let bytes = Array(buffer.readableBytesView)
                crypto_hash_sha256_update(&state, bytes, UInt64(bytes.count))
                try file.write(contentsOf: bytes)
            }
            try file.synchronize()
            try file.close()
        } catch {
            try? file.close()
            unlink(temporary)
            throw error
        }
        guard rename(temporary, final) == 0 else {
            unlink(temporary)
            throw APIError(.internalServerError, "STORAGE_ERROR", "cannot store \(key)")
        }
        var digest = [UInt8](repeating: 0, count: Int(crypto_hash_sha256_BYTES))
        crypto_hash_sha256_final(&state, &digest)
        try store.objectStored(key: key, size: size, sha256: digest.map { String(format: "%02x", $0) }.joined())
        return Response(status: .ok)
    }

    private func finalize(_ request: FinalizeRequest) async throws -> Response {
        try checkTenant(request.tenantKey)
        guard let object = try store.object(request.key), object.tenantKey == request.tenantKey else {
            throw APIError(.notFound, "OBJECT_NOT_FOUND", "no object \(request.key) for this tenant")
        }
        guard let size = object.size, let sha256 = object.sha256 else {
            throw APIError(.conflict, "OBJECT_NOT_UPLOADED", "nothing was PUT to \(request.key)")
        }
        guard size == request.size, sha256 == request.sha256.lowercased(), object.incidentId == request.incidentId else {
            throw APIError(.conflict, "OBJECT_MISMATCH", "stored \(size) bytes, SHA-256 \(sha256); finalize claims \(request.size), \(request.sha256)")
        }
        // An incident's manifest is kept beside its record (the object is checked above: these
        // are the bytes the kit hashed). One too large to be a manifest is kept as evidence
        // and reported as unreadable.
        var manifest: [UInt8]?
        if object.contentType == EvidenceManifest.contentType {
            manifest = size <= EvidenceManifest.maximumBytes
                ? (FileManager.default.contents(atPath: configuration.directory + "/objects/" + request.key).map { Array($0) } ?? [])
                : []
        }
        return try json(FinalizeResponse(evidenceId: try store.finalize(request, manifest: manifest)))
    }

    private func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        let data = try JSONEncoder().encode(value)
        return Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}

/// An API error answer: status, the API's code, a message.
struct APIError: Error {
    var status: HTTPResponse.Status
    var code: String
    var message: String
    init(_ status: HTTPResponse.Status, _ code: String, _ message: String) {
        self.status = status
        self.code = code
        self.message = message
    }
}

/// A lab server serving in a task of its own.
public struct RunningLabServer: Sendable {
    public let port: Int
    let task: Task<Void, any Error>
    public let server: LabServer

    public var baseURL: URL { URL(string: "http://127.0.0.1:\(port)")! }

    public func stop() async {
        task.cancel()
        _ = try? await task.value
    }
}
