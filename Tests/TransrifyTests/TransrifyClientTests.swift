import CSodium
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization
import Testing
import Transrify
@testable import TransrifyLabServer

/// Records the client's backoff waits instead of sleeping (a fake clock).
final class RecordingClock: RetryClock {
    let waits = Mutex<[Duration]>([])
    func sleep(for duration: Duration) async throws { waits.withLock { $0.append(duration) } }
}

/// A lab server in a scratch directory, seeded with one tenant and one user.
struct Lab {
    static let tenantKey = "tenant-test-key"
    static let user = (ref: "alice01", pin: "2468", duress: "1357")
    let running: RunningLabServer
    var server: LabServer { running.server }

    static func start(rateLimitPerMinute: Int = 600) async throws -> Lab {
        let directory = NSTemporaryDirectory() + "fieldhal-lab-\(UUID().uuidString)"
        let server = try LabServer(LabServer.Configuration(directory: directory))
        try server.addTenant(key: tenantKey, name: "Test tenant", rateLimitPerMinute: rateLimitPerMinute)
        try server.addUser(tenantKey: tenantKey, customerRef: user.ref, pin: user.pin, duressPin: user.duress)
        return Lab(running: try await server.start())
    }

    func client(tenantKey: String? = Lab.tenantKey, clock: RecordingClock = RecordingClock()) -> TransrifyClient {
        var client = TransrifyClient(baseURL: running.baseURL, tenantKey: tenantKey)
        client.clock = clock
        return client
    }

    func stop() async { await running.stop() }
}

let device = DeviceInfo(version: "0.3.0")

func transrifyError(_ body: () async throws -> Void) async -> TransrifyError? {
    do {
        try await body()
        Issue.record("expected a TransrifyError")
    } catch let error as TransrifyError {
        return error
    } catch {
        Issue.record("not a TransrifyError: \(error)")
    }
    return nil
}

@Suite(.serialized, .timeLimit(.minutes(2)))
struct TransrifyClientTests {
    @Test func verdictsNormalDuressAndFail() async throws {
        let lab = try await Lab.start()
        defer { Task { await lab.stop() } }
        let client = lab.client()
        let normal = try await client.login(customerRef: Lab.user.ref, pin: Lab.user.pin, device: device, geo: Geolocation(lat: 52.52, lon: 13.40))
        let duress = try await client.login(customerRef: Lab.user.ref, pin: Lab.user.duress, device: device, geo: nil)
        let fail = try await client.login(customerRef: Lab.user.ref, pin: "0000", device: device, geo: nil)
        let unknown = try await client.login(customerRef: "nobody99", pin: Lab.user.pin, device: device, geo: nil)
        #expect(normal.verdict == .normal && normal.sessionId != nil && normal.token != nil)
        #expect(duress.verdict == .duress && duress.sessionId != nil)
        #expect(fail.verdict == .fail && fail.sessionId == nil)
        #expect(unknown.verdict == .fail)
        #expect(try lab.server.sessionMode(duress.sessionId!) == "DURESS")
        #expect(try await client.verify(sessionId: normal.sessionId!).valid)
        #expect(try await !client.verify(sessionId: "no-such-session").valid)
    }

    @Test func errorCodesMapToTheSeedsMessagesWordForWord() async throws {
        let lab = try await Lab.start()
        defer { Task { await lab.stop() } }
        let wrongKey = await transrifyError { _ = try await lab.client(tenantKey: "wrong").login(customerRef: "alice01", pin: "2468", device: device, geo: nil) }
        #expect(wrongKey?.kind == .http(status: 401, code: "INVALID_TENANT_KEY"))
        #expect(wrongKey?.userMessage == "Configuration error. Please contact support.")
        try lab.server.setSuspended(tenantKey: Lab.tenantKey, true)
        let suspended = await transrifyError { _ = try await lab.client().login(customerRef: "alice01", pin: "2468", device: device, geo: nil) }
        #expect(suspended?.kind == .http(status: 403, code: "TENANT_SUSPENDED"))
        #expect(suspended?.userMessage == "Service unavailable. Please contact support.")
    }

    @Test func noTenantKeyFailsBeforeAnythingIsSent() async throws {
        let lab = try await Lab.start()
        defer { Task { await lab.stop() } }
        lab.server.injectFailures(TransrifyAPI.loginPath, statuses: [500])  // would be consumed by any request
        let error = await transrifyError { _ = try await lab.client(tenantKey: nil).login(customerRef: "alice01", pin: "2468", device: device, geo: nil) }
        #expect(error?.kind == .missingTenantKey)
        // The injected failure is still queued: the server saw no request.
        let next = await transrifyError { _ = try await lab.client().login(customerRef: "alice01", pin: "2468", device: device, geo: nil) }
        #expect(next?.status == 500)
    }

    @Test func networkErrorsSayCheckYourConnection() async throws {
        let lab = try await Lab.start()
        let client = lab.client()
        await lab.stop()
        let error = await transrifyError { _ = try await client.login(customerRef: "alice01", pin: "2468", device: device, geo: nil) }
        #expect(error?.kind == .network)
        #expect(error?.userMessage == "Network error. Please check your connection.")
    }

    /// Req 22: 429 → retry after 800–1200 ms, then double, at most 2 retries.
    @Test func rateLimitRetriesTwiceWithJitteredBackoffThenGivesUp() async throws {
        let lab = try await Lab.start()
        defer { Task { await lab.stop() } }
        let clock = RecordingClock()
        lab.server.injectFailures(TransrifyAPI.loginPath, statuses: [429, 429, 429])
        let error = await transrifyError { _ = try await lab.client(clock: clock).login(customerRef: "alice01", pin: "2468", device: device, geo: nil) }
        #expect(error?.kind == .rateLimited)
        #expect(error?.userMessage == "Too many requests. Please try again in a moment.")
        let waits = clock.waits.withLock { $0 }
        #expect(waits.count == 2)
        #expect(waits.first.map { $0 >= .milliseconds(800) && $0 <= .milliseconds(1200) } == true, "\(waits)")
        #expect(waits.last.map { $0 >= .milliseconds(1600) && $0 <= .milliseconds(2400) } == true, "\(waits)")
        // Two 429s then an answer: the request succeeds on the third attempt.
        lab.server.injectFailures(TransrifyAPI.loginPath, statuses: [429, 429])
        let success = try await lab.client(clock: clock).login(customerRef: "alice01", pin: "2468", device: device, geo: nil)
        #expect(success.verdict == .normal)
    }

    @Test func backoffJitterStaysInItsBand() {
        var client = TransrifyClient(baseURL: URL(string: "http://127.0.0.1:1")!, tenantKey: "k")
        for value in [0.0, 0.5, 0.999_999] {
            client.jitter = { value }
            #expect((.milliseconds(800)...(.milliseconds(1200))).contains(client.backoff(beforeRetry: 1)))
            #expect((.milliseconds(1600)...(.milliseconds(2400))).contains(client.backoff(beforeRetry: 2)))
        }
    }

    @Test func theServersOwnRateLimitAnswers429WithItsCode() async throws {
        let lab = try await Lab.start(rateLimitPerMinute: 1)
        defer { Task { await lab.stop() } }
        let clock = RecordingClock()
        _ = try await lab.client(clock: clock).login(customerRef: "alice01", pin: "2468", device: device, geo: nil)
        let error = await transrifyError { _ = try await lab.client(clock: clock).login(customerRef: "alice01", pin: "2468", device: device, geo: nil) }
        #expect(error?.kind == .rateLimited)
        #expect(clock.waits.withLock { $0.count } == 2)
    }

    @Test func duressAlertNearbyAndAck() async throws {
        let lab = try await Lab.start()
        defer { Task { await lab.stop() } }
        let client = lab.client()
        let here = Geolocation(lat: 52.5200, lon: 13.4050)
        let session = try await client.login(customerRef: Lab.user.ref, pin: Lab.user.duress, device: device, geo: here)
        let alert = try await client.sendDuressAlert(sessionId: session.sessionId!, geo: here, device: device)
        let near = try await client.nearbyAlerts(geo: Geolocation(lat: 52.5245, lon: 13.4050), radiusMeters: 1000, timestamp: 0)  // 500 m north
        #expect(near.alerts.map(\.alertId) == [alert.alertId])
        #expect(near.alerts.first?.customerRef == Lab.user.ref)
        #expect(near.alerts.first?.alertKind == "DURESS")
        let far = try await client.nearbyAlerts(geo: Geolocation(lat: 52.60, lon: 13.4050), radiusMeters: 1000, timestamp: 0)  // 9 km
        #expect(far.alerts.isEmpty)
        let badRadius = await transrifyError { _ = try await client.nearbyAlerts(geo: here, radiusMeters: 50, timestamp: 0) }
        #expect(badRadius?.kind == .http(status: 400, code: "INVALID_RADIUS"))
        #expect(try await client.acknowledge(alertId: alert.alertId, customerRef: "bob02", method: .nfc).acknowledged)
        #expect(try lab.server.acks(alertId: alert.alertId) == [LabStore.AckRecord(customerRef: "bob02", method: "NFC")])
        let unknown = await transrifyError { _ = try await client.acknowledge(alertId: "nope", customerRef: "bob02", method: .inApp) }
        #expect(unknown?.kind == .http(status: 404, code: "ALERT_NOT_FOUND"))
    }

    @Test func presignPutAndFinalizeCheckSizeAndSHA256() async throws {
        let lab = try await Lab.start()
        defer { Task { await lab.stop() } }
        let client = lab.client()
        let content = Data("evidence bytes".utf8)
        let presigned = try await client.presign(incidentId: "incident-1", contentType: "text/plain")
        var put = URLRequest(url: URL(string: presigned.url)!)
        put.httpMethod = "PUT"
        let (_, response) = try await URLSession.shared.upload(for: put, from: content)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        let wrongDigest = String(repeating: "0", count: 64)
        let mismatch = await transrifyError { _ = try await client.finalize(incidentId: "incident-1", kind: .text, key: presigned.key, size: 14, sha256: wrongDigest) }
        #expect(mismatch?.kind == .http(status: 409, code: "OBJECT_MISMATCH"))
        let realSHA = sha256Hex(content)
        let done = try await client.finalize(incidentId: "incident-1", kind: .text, key: presigned.key, size: Int64(content.count), sha256: realSHA)
        let again = try await client.finalize(incidentId: "incident-1", kind: .text, key: presigned.key, size: Int64(content.count), sha256: realSHA)
        #expect(done.evidenceId == again.evidenceId, "a repeated finalize returns the same evidence")
        #expect(try lab.server.evidence().map(\.finalizeCalls) == [2])
        // A tampered signature is refused.
        var forged = URLRequest(url: URL(string: presigned.url.replacingOccurrences(of: "signature=", with: "signature=00"))!)
        forged.httpMethod = "PUT"
        let (_, refused) = try await URLSession.shared.upload(for: forged, from: content)
        #expect((refused as? HTTPURLResponse)?.statusCode == 403)
    }

    @Test func anExpiredPresignedURLIsRefused() async throws {
        var configuration = LabServer.Configuration(directory: NSTemporaryDirectory() + "fieldhal-lab-\(UUID().uuidString)")
        configuration.presignLifetime = .seconds(-1)
        let server = try LabServer(configuration)
        try server.addTenant(key: Lab.tenantKey, name: "Expired")
        let running = try await server.start()
        defer { Task { await running.stop() } }
        let client = TransrifyClient(baseURL: running.baseURL, tenantKey: Lab.tenantKey)
        let presigned = try await client.presign(incidentId: "i", contentType: "text/plain")
        var put = URLRequest(url: URL(string: presigned.url)!)
        put.httpMethod = "PUT"
        let (body, response) = try await URLSession.shared.upload(for: put, from: Data("late".utf8))
        #expect((response as? HTTPURLResponse)?.statusCode == 403)
        #expect(try JSONDecoder().decode(APIErrorBody.self, from: body).code == "URL_EXPIRED")
    }

    @Test func hostileRepliesAreTypedErrorsNotCrashes() async throws {
        let lab = try await Lab.start()
        defer { Task { await lab.stop() } }
        lab.server.injectFailures(TransrifyAPI.loginPath, statuses: [502])
        let error = await transrifyError { _ = try await lab.client().login(customerRef: "alice01", pin: "2468", device: device, geo: nil) }
        #expect(error?.kind == .http(status: 502, code: "INJECTED_FAILURE"))
        // A 2xx whose body is not the endpoint's type (verify's body for login's path).
        let wrongType = await transrifyError {
            let _: DuressAlertResponse = try await lab.client().send("GET", TransrifyAPI.verifyPath,
                                                                      query: [URLQueryItem(name: "sessionId", value: "x")], body: nil as LoginRequest?)
        }
        #expect(wrongType?.kind == .malformedResponse)
    }
}

func sha256Hex(_ data: Data) -> String {
    var digest = [UInt8](repeating: 0, count: Int(crypto_hash_sha256_BYTES))
    let bytes = [UInt8](data)
    crypto_hash_sha256(&digest, bytes, UInt64(bytes.count))
    return digest.map { String(format: "%02x", $0) }.joined()
}

@Suite struct UncancellableTests {
    /// A cancelled caller returns at once; the operation itself is not cancelled.
    @Test func cancellationReachesTheCallerNotTheOperation() async throws {
        let operationSawCancellation = Mutex<Bool?>(nil)
        let caller = Task {
            try await uncancellable {
                try? await Task.sleep(for: .seconds(5))
                operationSawCancellation.withLock { $0 = Task.isCancelled }
                return 1
            }
        }
        try await Task.sleep(for: .milliseconds(50))
        let cancelled = ContinuousClock.now
        caller.cancel()
        let result = await caller.result
        // Well before the 5 s operation ends, even on a loaded machine (the full suite once
        // kept both cooperative threads busy for a second: 1.04 s against a 1 s bound).
        #expect(ContinuousClock.now - cancelled < .seconds(3))
        #expect(throws: CancellationError.self) { try result.get() }
        try await Task.sleep(for: .milliseconds(5200))
        #expect(operationSawCancellation.withLock { $0 } == false)
        #expect(try await uncancellable { 7 } == 7)
    }
}
