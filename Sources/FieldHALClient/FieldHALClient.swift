import FieldHAL
import FieldHALAPI
import FieldHALSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A Swift client of the kit's hardware API: what a Swift program uses to reach the devices
/// that `fieldhal run` holds, instead of opening them itself.
///
/// One HTTP/1.1 connection per call, on the daemon's Unix socket, made with blocking calls
/// on a thread of its own (never the cooperative pool). Errors are the daemon's typed errors (`APIProblem`,
/// with its advice); a daemon that is not there is `FieldHALError.unavailable` saying so.
///
///     let kit = FieldHALClient(socketPath: "/run/fieldhal/api.sock")
///     let reading = try await kit.location(timeout: .seconds(3))
///     for try await event in kit.events([.fix]) { … }
public struct FieldHALClient: Sendable {
    public let socketPath: String
    /// How long a call may take beyond the wait it asks for (connect, the answer's transfer).
    public var slack: Duration = .seconds(10)

    /// The shipped unit's socket; `FIELDHAL_API_SOCKET` overrides it.
    public static var defaultSocketPath: String {
        ProcessInfo.processInfo.environment["FIELDHAL_API_SOCKET"] ?? "/run/fieldhal/api.sock"
    }

    public init(socketPath: String = FieldHALClient.defaultSocketPath) {
        self.socketPath = socketPath
    }

    /// `GET /v1/status`: the daemon, and who it takes this process to be.
    public func status() async throws -> APIStatus {
        try await get("status", as: APIStatus.self)
    }

    /// `GET /v1/health`: the daemon's verdict and which configured devices are there (no scope needed).
    public func health() async throws -> APIHealth {
        try await get("health", as: APIHealth.self)
    }

    /// `GET /v1/capabilities`.
    public func capabilities() async throws -> APICapabilities {
        try await get("capabilities", as: APICapabilities.self)
    }

    /// `GET /v1/devices`: every configured device, with its name, roles and state.
    public func devices() async throws -> [CapabilityStatus] {
        try await get("devices", as: APIDevices.self).devices
    }

    /// `GET /v1/location`: a live fix within `timeout`, else a cached one no older than
    /// `maxAge` (nil: live only), at `accuracy` metres or better when given.
    public func location(timeout: Duration = .seconds(5), maxAge: Duration? = .seconds(300), accuracy: Double? = nil,
                         device: String? = nil) async throws -> LocationReading {
        var query = [("timeout_ms", "\(timeout.milliseconds)"), ("max_age_ms", "\(maxAge?.milliseconds ?? 0)")] + Self.naming(device)
        if let accuracy { query.append(("accuracy_m", "\(accuracy)")) }
        return try await get("location", query: query, waiting: timeout, as: LocationReading.self)
    }

    /// `GET /v1/events`: events until the daemon ends the stream (it stops) or the caller
    /// stops iterating. Types this client does not know are skipped.
    /// `kinds`: nil for every type this caller may see. `devices`: the receivers and readers
    /// whose fixes and tags to follow, by name (empty: each capability's default device).
    public func events(_ kinds: [APIEvent.Kind]? = nil, devices: [String] = []) -> AsyncThrowingStream<APIEvent, any Error> {
        let (stream, continuation) = AsyncThrowingStream<APIEvent, any Error>.makeStream()
        let subscription = follow(kinds, devices: devices, { continuation.yield($0) }, end: { error in
            if let error { continuation.finish(throwing: error) } else { continuation.finish() }
        })
        continuation.onTermination = { _ in subscription.cancel() }
        return stream
    }

    /// `GET /v1/events` with each event handed to `handler` on the client's reading thread as
    /// it arrives, as `LocationProvider.follow` hands fixes over in-process: for a program
    /// that wants each event with no task woken in between (the event-stream's latency, issue
    /// 20). `end` is called once: nil when the daemon ended the stream, else why it failed;
    /// not after `cancel()`. Both must return quickly and not block: while they run, the
    /// next event waits.
    public func follow(_ kinds: [APIEvent.Kind]? = nil, devices: [String] = [], _ handler: @escaping @Sendable (APIEvent) -> Void,
                       end: @escaping @Sendable ((any Error)?) -> Void) -> Subscription {
        let types = kinds.map { [("types", $0.map(\.rawValue).joined(separator: ","))] } ?? []
        let path = route("events", query: types + devices.map { ("device", $0) })
        let socketPath = socketPath
        let stop = StreamStop()
        let cancelled = LockedValue(false)
        // A thread of its own, blocking: an event costs one wake-up here (`EventStreamReader`
        // says why not the event loop).
        let thread = DeviceThread(name: "fieldhal-events")
        thread.submit {
            let failure: (any Error)?
            do {
                try EventStreamReader.read(socketPath: socketPath, path: path, stop: stop) { event in
                    if !cancelled.value { handler(event) }
                }
                failure = nil
            } catch {
                failure = error
            }
            if !cancelled.value { end(failure) }
        }
        thread.stop()
        return Subscription {
            cancelled.withLock { $0 = true }
            stop.stop()
        }
    }

    // MARK: NFC

    /// `POST /v1/nfc/read`: a tag within `timeout` (the wait for the shared chip included).
    public func readTag(timeout: Duration = .seconds(10), device: String? = nil) async throws -> APITag {
        try await post("nfc/read", APINFCRead(timeoutMs: Int(timeout.milliseconds)), query: Self.naming(device), waiting: timeout, as: APITag.self)
    }

    /// `POST /v1/nfc/write`: `records` written to the next tag within `timeout`.
    public func writeTag(_ records: [APIRecordInput], timeout: Duration = .seconds(10), device: String? = nil) async throws -> APITag {
        try await post("nfc/write", APINFCMessage(records: records, timeoutMs: Int(timeout.milliseconds)), query: Self.naming(device),
                       waiting: timeout, as: APITag.self)
    }

    /// `POST /v1/nfc/emulate`: the kit presents `records` as a tag until a reader has read
    /// them or `timeout` passes (then `wasRead` is false).
    public func emulateTag(_ records: [APIRecordInput], timeout: Duration = .seconds(30), device: String? = nil) async throws -> EmulationOutcome {
        try await post("nfc/emulate", APINFCMessage(records: records, timeoutMs: Int(timeout.milliseconds)), query: Self.naming(device), waiting: timeout,
                       as: EmulationOutcome.self)
    }

    // MARK: Flows

    /// `GET /v1/lock`: the kit's lock.
    public func lock() async throws -> APILockStatus { try await get("lock", as: APILockStatus.self) }

    /// `GET /v1/evidence`: the evidence the user queued that has not reached the server yet.
    public func evidence() async throws -> APIEvidence { try await get("evidence", as: APIEvidence.self) }

    /// `POST /v1/lock/unlock` with the PIN: `rejected` and `paused` are outcomes, not errors.
    public func unlock(pin: String) async throws -> APIUnlockOutcome {
        try await post("lock/unlock", APIUnlock(pin: pin), waiting: .seconds(30), as: APIUnlockOutcome.self)
    }

    /// `POST /v1/lock/unlock` with one fingerprint scan, waiting up to `scanTimeout` for a finger.
    public func unlockWithFingerprint(scanTimeout: Duration = .seconds(10)) async throws -> APIUnlockOutcome {
        try await post("lock/unlock", APIUnlock(fingerprint: true, scanTimeoutMs: Int(scanTimeout.milliseconds)),
                       waiting: scanTimeout, as: APIUnlockOutcome.self)
    }

    /// `POST /v1/lock/setup`: a lock that is not set up yet gets its PIN (and duress PIN).
    public func setUpLock(_ setup: APILockSetup) async throws -> APIMessage {
        try await post("lock/setup", setup, waiting: .seconds(30), as: APIMessage.self)
    }

    /// `POST /v1/lock/settings`: the current PIN, then only what changes.
    public func changeLockSettings(_ settings: APILockSettings) async throws -> APIMessage {
        try await post("lock/settings", settings, waiting: .seconds(30), as: APIMessage.self)
    }

    // MARK: Transrify

    /// `GET /v1/session`.
    public func session() async throws -> APISession { try await get("session", as: APISession.self) }

    /// `POST /v1/session/verify`: the session checked with Transrify; an invalid one is cleared.
    public func verifySession() async throws -> APISessionCheck {
        try await call(.POST, route("session/verify"), body: nil, waiting: .seconds(60), as: APISessionCheck.self)
    }

    /// `POST /v1/session`: signs in with the kit's location (up to 5 s for a fix, then the
    /// Transrify call); the answer is the same whatever the verdict.
    public func signIn(customerRef: String, pin: String) async throws -> APISession {
        try await post("session", APISignIn(customerRef: customerRef, pin: pin), waiting: .seconds(60), as: APISession.self)
    }

    /// `DELETE /v1/session`.
    public func signOut() async throws -> APISession {
        try await call(.DELETE, route("session"), body: nil, waiting: .zero, as: APISession.self)
    }

    /// `GET /v1/alerts`: the active duress alerts near the kit (Transrify asked once).
    public func alerts() async throws -> APIAlerts { try await get("alerts", waiting: .seconds(30), as: APIAlerts.self) }

    /// `POST /v1/alerts/acknowledge` in the app.
    public func acknowledge(alertId: String) async throws -> APIAcknowledged {
        try await post("alerts/acknowledge", APIAcknowledge(method: APIAcknowledge.inApp, alertId: alertId), waiting: .seconds(30),
                       as: APIAcknowledged.self)
    }

    /// `POST /v1/alerts/acknowledge` by reading the duressed kit's tag with the daemon's NFC
    /// chip within `timeout`; `alertId`, when given, must be the tag's.
    public func acknowledgeByNFC(alertId: String? = nil, timeout: Duration = .seconds(30)) async throws -> APIAcknowledged {
        try await post("alerts/acknowledge", APIAcknowledge(method: APIAcknowledge.nfc, alertId: alertId, timeoutMs: Int(timeout.milliseconds)),
                       waiting: timeout, as: APIAcknowledged.self)
    }

    /// `POST /v1/evidence`: one piece captured into the sealed queue with the daemon's devices.
    public func captureEvidence(_ request: APIEvidenceCapture) async throws -> APIEvidenceItem {
        try await post("evidence", request, waiting: .seconds(max(10, request.seconds ?? 10) + 30), as: APIEvidenceItem.self)
    }

    /// `POST /v1/evidence/flush`: uploads what the user queued now.
    public func flushEvidence() async throws -> APIEvidenceFlush {
        try await call(.POST, route("evidence/flush"), body: nil, waiting: .seconds(300), as: APIEvidenceFlush.self)
    }

    // MARK: Camera

    /// `GET /v1/camera/photo`: a still as JPEG bytes (during a recording: its next frame, at
    /// its size).
    /// `GET /v1/camera/formats`: what the daemon's camera offers.
    public func cameraFormats(device: String? = nil) async throws -> [CameraFormat] {
        try await get("camera/formats", query: Self.naming(device), as: APICameraFormats.self).formats
    }

    public func photo(width: Int = 640, height: Int = 480, quality: Int = 85, device: String? = nil) async throws -> [UInt8] {
        var body = Data()
        try await Self.exchange(socketPath: socketPath, path: route("camera/photo", query: [("width", "\(width)"), ("height", "\(height)"),
                                                                                           ("quality", "\(quality)")] + Self.naming(device)),
                                deadline: .now + .seconds(10) + slack) { body += $0 }
        return [UInt8](body)
    }

    // MARK: Recording

    /// `POST /v1/microphone/record`: records on the daemon's microphone and writes the WAV to
    /// `path` (whole, or not at all). The report is the daemon's, with `path` set.
    public func recordAudio(_ request: APIAudioRecord, to path: String, device: String? = nil) async throws -> AudioRecording {
        var report: AudioRecording = try await record("microphone/record", request, milliseconds: request.durationMs, to: path, device: device)
        report.path = path
        return report
    }

    /// `POST /v1/camera/record`: records on the daemon's camera and writes the Motion-JPEG AVI
    /// to `path` (whole, or not at all).
    public func recordVideo(_ request: APIVideoRecord, to path: String, device: String? = nil) async throws -> VideoRecording {
        var report: VideoRecording = try await record("camera/record", request, milliseconds: request.durationMs, to: path, device: device)
        report.path = path
        return report
    }

    private func record<Report: Decodable>(_ name: String, _ request: some Encodable, milliseconds: Int, to path: String,
                                           device: String?) async throws -> Report {
        let partial = path + ".partial-\(getpid())"
        // 0640, as FieldHAL's own recorders make their files: a recording is not for everyone.
        guard FileManager.default.createFile(atPath: partial, contents: nil, attributes: [.posixPermissions: 0o640]),
              let file = FileHandle(forWritingAtPath: partial) else {
            throw FieldHALError(.io, subject: path, detail: "cannot write beside it", advice: "check the directory exists and is writable")
        }
        var header: String?
        do {
            defer { try? file.close() }
            // The recording's length, then its transfer: a minute of slack for a long one.
            try await Self.exchange(socketPath: socketPath, method: .POST, path: route(name, query: Self.naming(device)),
                                    body: try FieldHALAPI.encoder.encode(request),
                                    deadline: .now + .milliseconds(milliseconds) + slack + .seconds(60),
                                    onHead: { header = $0[FieldHALAPI.recordingHeader.lowercased()] }) { chunk in
                try file.write(contentsOf: chunk)
            }
            try file.synchronize()
        } catch {
            unlink(partial)
            throw error
        }
        guard let header, let report = try? FieldHALAPI.decoder.decode(Report.self, from: Data(header.utf8)) else {
            unlink(partial)
            throw FieldHALError(.malformedData, subject: "POST /\(FieldHALAPI.version)/\(name)", detail: "no \(FieldHALAPI.recordingHeader) header with the report",
                                advice: "is the daemon the same FieldHAL version as this client?")
        }
        guard rename(partial, path) == 0 else {
            let reason = SystemError.describe()
            unlink(partial)
            throw FieldHALError(.io, subject: path, detail: "rename: \(reason)")
        }
        return report
    }

    // MARK: Biometrics

    /// `GET /v1/biometrics`: whether a sensor is there and which fingers are enrolled.
    public func biometrics(device: String? = nil) async throws -> BiometricAvailability {
        try await get("biometrics", query: Self.naming(device), as: BiometricAvailability.self)
    }

    /// `POST /v1/biometrics/verify`: one scan within `timeout`.
    public func verifyFinger(timeout: Duration = .seconds(10), device: String? = nil) async throws -> BiometricResult {
        let answer = try await post("biometrics/verify", APIBiometricVerify(timeoutMs: Int(timeout.milliseconds)), query: Self.naming(device), waiting: timeout,
                                    as: APIBiometricResult.self)
        guard let result = answer.biometricResult else {
            throw FieldHALError(.malformedData, subject: "POST /v1/biometrics/verify", detail: "a result \"\(answer.result)\" this client does not know")
        }
        return result
    }

    /// `POST /v1/biometrics/enroll`: enrolls `finger`, handing each stage to `progress` as the
    /// sensor reports it; returns when the enrollment completes. No bound but the person's
    /// patience: cancel the task to give up.
    public func enroll(_ finger: Finger, device: String? = nil, progress: (EnrollStage) -> Void) async throws {
        var pending = Data()
        var completed = false
        try await Self.exchange(socketPath: socketPath, method: .POST, path: route("biometrics/enroll", query: Self.naming(device)),
                                body: try FieldHALAPI.encoder.encode(APIBiometricEnroll(finger: finger.rawValue)), deadline: nil) { chunk in
            pending += chunk
            while let newline = pending.firstIndex(of: 0x0A) {
                let line = pending[pending.startIndex..<newline]
                pending = Data(pending[pending.index(after: newline)...])
                let step = try FieldHALAPI.decoder.decode(APIEnrollStep.self, from: Data(line))
                if let problem = step.error { throw problem }
                if let stage = step.enrollStage {
                    if stage == .completed { completed = true }
                    progress(stage)
                }
            }
        }
        guard completed else {
            throw FieldHALError(.disconnected, subject: "POST /v1/biometrics/enroll", detail: "the daemon ended the enrollment before it completed")
        }
    }

    // MARK: Feedback

    /// `POST /v1/haptics/play`: a named pattern, played to its end on the daemon's haptics.
    public func playHaptics(_ pattern: String, device: String? = nil) async throws -> APIHapticsPlayed {
        try await post("haptics/play", APIHapticsPlay(pattern: pattern), query: Self.naming(device), waiting: .seconds(30), as: APIHapticsPlayed.self)
    }

    /// `POST /v1/speaker/play`: a named sound, played to its end on the daemon's speaker.
    public func playSound(_ sound: String, device: String? = nil) async throws -> APISoundPlayed {
        try await post("speaker/play", APISoundPlay(sound: sound), query: Self.naming(device), waiting: .seconds(30), as: APISoundPlayed.self)
    }

    // MARK: Transport

    private func route(_ name: String, query: [(String, String)] = []) -> String {
        FieldHALAPI.route(name, query: query)
    }

    // MARK: Web door

    /// `GET /v1/web/tokens`: the web door's tokens (never their text).
    public func webTokens() async throws -> [APIWebToken] { try await get("web/tokens", as: APIWebTokens.self).tokens }

    /// `POST /v1/web/tokens`: a new token; its text is in this answer only.
    public func issueWebToken(_ request: APIWebTokenRequest) async throws -> APIWebToken {
        try await post("web/tokens", request, waiting: .zero, as: APIWebToken.self)
    }

    /// `DELETE /v1/web/tokens/{id}`: the token revoked, from the next request on.
    public func revokeWebToken(id: String) async throws -> APIWebToken {
        let escaped = id.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? id
        return try await call(.DELETE, route("web/tokens/\(escaped)"), body: nil, waiting: .zero, as: APIWebToken.self)
    }

    private func get<T: Decodable>(_ name: String, query: [(String, String)] = [], waiting: Duration = .zero, as type: T.Type) async throws -> T {
        try await call(.GET, route(name, query: query), body: nil, waiting: waiting, as: type)
    }

    private func post<T: Decodable>(_ name: String, _ body: some Encodable, query: [(String, String)] = [], waiting: Duration,
                                    as type: T.Type) async throws -> T {
        try await call(.POST, route(name, query: query), body: try FieldHALAPI.encoder.encode(body), waiting: waiting, as: type)
    }

    /// `?device=NAME` when a device is named; the default device otherwise.
    static func naming(_ device: String?) -> [(String, String)] {
        device.map { [("device", $0)] } ?? []
    }

    private func call<T: Decodable>(_ method: HTTPMethod, _ path: String, body request: Data?, waiting: Duration, as type: T.Type) async throws -> T {
        var body = Data()
        try await Self.exchange(socketPath: socketPath, method: method, path: path, body: request, deadline: .now + waiting + slack) { body += $0 }
        do {
            return try FieldHALAPI.decoder.decode(T.self, from: body)
        } catch {
            throw FieldHALError(.malformedData, subject: "\(method) \(path)", detail: "the daemon's answer is not a \(T.self): \(error)",
                                advice: "is the daemon the same FieldHAL version as this client?")
        }
    }

    /// One request: connects, sends `method path` (with a JSON body), and hands a 200's body
    /// to `onChunk` as it arrives; any other status is read whole and thrown as the daemon's
    /// `APIProblem`. On a thread of its own (`SocketExchange`); cancelling the caller's task
    /// closes the connection.
    private static func exchange(socketPath: String, method: HTTPMethod = .GET, path: String, body request: Data? = nil,
                                 deadline: ContinuousClock.Instant?,
                                 onHead: ([String: String]) throws -> Void = { _ in },
                                 _ onChunk: (Data) async throws -> Void) async throws {
        let subject = "\(method.rawValue) \(path)"
        var head = "\(method.rawValue) \(path) HTTP/1.1\r\nHost: fieldhal\r\nConnection: close\r\n"
        if let request { head += "Content-Type: application/json\r\nContent-Length: \(request.count)\r\n" }
        // One write: the daemon answers as soon as the request is whole and then closes.
        var bytes = Array((head + "\r\n").utf8)
        if let request { bytes += request }
        var refused: (status: Int, body: Data)?
        var answered = false
        for try await part in SocketExchange.parts(socketPath: socketPath, request: bytes, subject: subject, deadline: deadline) {
            switch part {
            case .head(let status, let headers):
                answered = true
                if !(200...299).contains(status) { refused = (status, Data()) } else { try onHead(headers) }
            case .body(let chunk):
                if var problem = refused {
                    // An error body is small; a hostile one is cut at 1 MiB.
                    problem.body += chunk.prefix(max(0, 1 << 20 - problem.body.count))
                    refused = problem
                } else {
                    try await onChunk(Data(chunk))
                }
            case .end:
                break
            }
        }
        try Task.checkCancellation()
        guard answered else {
            throw FieldHALError(.protocolError, subject: subject, detail: "the daemon closed the connection without an answer")
        }
        if let refused {
            if let problem = try? FieldHALAPI.decoder.decode(APIErrorBody.self, from: refused.body) { throw problem.error }
            throw FieldHALError(.protocolError, subject: subject, detail: "HTTP \(refused.status) without an error body")
        }
    }
}

/// The methods the API uses.
enum HTTPMethod: String, Sendable {
    case GET, POST, DELETE
}

/// Server-Sent Events from chunks of bytes: lines end at LF (a chunk may end mid-line, or
/// mid-character), events at a blank line; comments (`:`) are keep-alives.
struct ServerSentEvents {
    private var pending: [UInt8] = []
    private var kind: String?
    private var data: [UInt8] = []
    private var hasData = false

    /// The most an event may hold, its unfinished line included: a daemon that sends more
    /// without ending it is not followed into memory (a fix is 300 bytes).
    static let eventLimit = 1 << 20

    /// The events completed by `chunk`: each one's type and its data lines joined by "\n".
    /// Read as bytes (no `Data`, no Foundation's character sets): on an idle client each
    /// event is parsed cold, and every microsecond is on the event's way to the caller.
    mutating func feed(_ chunk: some Collection<UInt8>) throws(FieldHALError) -> [(kind: String, data: [UInt8])] {
        // What was kept from the last chunk has no line end: look only at what is new.
        var searchFrom = pending.count
        pending.append(contentsOf: chunk)
        var events: [(String, [UInt8])] = []
        var lineStart = 0
        while let newline = pending[searchFrom...].firstIndex(of: 0x0A) {
            searchFrom = newline + 1
            var lineEnd = newline
            if lineEnd > lineStart, pending[lineEnd - 1] == 0x0D { lineEnd -= 1 }
            let line = pending[lineStart..<lineEnd]
            lineStart = newline + 1
            if line.isEmpty {
                if let kind { events.append((kind, data)) }
                kind = nil
                data = []
                hasData = false
            } else if line.first == 0x3A {  // ":": a comment
                continue
            } else if let value = Self.value(of: Self.event, in: line) {
                kind = String(decoding: value.trimmingSpaces(), as: UTF8.self)
            } else if let value = Self.value(of: Self.dataField, in: line) {
                if hasData { data.append(0x0A) }
                data.append(contentsOf: value.drop { $0 == 0x20 })
                hasData = true
            }
        }
        pending.removeFirst(lineStart)
        guard pending.count + data.count <= Self.eventLimit else {
            throw FieldHALError(.protocolError, subject: "GET /v1/events", detail: "an event over \(Self.eventLimit) bytes",
                                advice: "is it a FieldHAL daemon on this socket?")
        }
        return events
    }

    private static let event = Array("event:".utf8)
    private static let dataField = Array("data:".utf8)

    private static func value(of field: [UInt8], in line: ArraySlice<UInt8>) -> ArraySlice<UInt8>? {
        guard line.count >= field.count, line.prefix(field.count).elementsEqual(field) else { return nil }
        return line.dropFirst(field.count)
    }
}

extension Duration {
    fileprivate var milliseconds: Int64 { FieldHALAPI.milliseconds(self) }
}
