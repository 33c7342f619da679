import Foundation

/// Why a Transrify request failed, with the message the seed prescribes for the user.
public struct TransrifyError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// No tenant key in the vault: nothing was sent (Req 16.5).
        case missingTenantKey
        /// The request never got an HTTP answer: DNS, refused, reset, timed out.
        case network
        /// 429 after the allowed retries (Req 22).
        case rateLimited
        /// Any other non-2xx answer, with the API's error code when it sent one (Req 23.5).
        case http(status: Int, code: String?)
        /// A 2xx answer whose body is not what the endpoint returns, or a body past the size limit.
        case malformedResponse
        /// An address the transport policy refuses: cleartext outside development, evidence
        /// to a host that is not the API's or a configured storage host, a redirect to
        /// another origin. Nothing was sent there.
        case refusedURL
    }

    public var kind: Kind
    /// What went wrong, for logs and technicians (never shown in place of `userMessage`).
    public var detail: String

    public init(_ kind: Kind, detail: String) {
        self.kind = kind
        self.detail = detail
    }

    /// The seed's message, word for word (Requirements 5 and 22).
    public var userMessage: String {
        switch kind {
        case .network: "Network error. Please check your connection."
        case .rateLimited: "Too many requests. Please try again in a moment."
        case .missingTenantKey: "Configuration error. Please contact support."
        case .http(_, let code?) where code == "INVALID_TENANT_KEY": "Configuration error. Please contact support."
        case .http(_, let code?) where code == "TENANT_SUSPENDED": "Service unavailable. Please contact support."
        case .http(_, let code?) where code == "RATE_LIMIT_EXCEEDED": "Too many attempts. Please wait a minute."
        case .http, .malformedResponse, .refusedURL: "Something went wrong. Please try again."
        }
    }

    public var status: Int? {
        if case .http(let status, _) = kind { return status }
        return nil
    }

    public var description: String { "\(userMessage) (\(detail))" }
}

/// How the client waits between retries; tests pass a recording fake.
public protocol RetryClock: Sendable {
    func sleep(for duration: Duration) async throws
}

public struct ContinuousRetryClock: RetryClock {
    public init() {}
    public func sleep(for duration: Duration) async throws { try await Task.sleep(for: duration) }
}

/// The one generic request function of the Transrify API (Req 23) and the endpoints on it.
public struct TransrifyClient: Sendable {
    public var baseURL: URL
    /// From the vault; `nil` or empty fails every request before it is sent.
    public var tenantKey: String?
    public var finalizePath = TransrifyAPI.finalizePath
    /// Where requests and evidence may go; TLS only unless the configuration is development.
    public var transport = TransportPolicy.strict
    public var requestTimeout: TimeInterval = 15
    /// 429s retried before giving up (Req 22.4).
    public var maxRateLimitRetries = 2
    public var clock: any RetryClock = ContinuousRetryClock()
    /// A number in 0..<1 for the backoff's jitter.
    public var jitter: @Sendable () -> Double = { Double.random(in: 0..<1) }
    /// The largest response body accepted: a hostile server cannot make the client hoard.
    public static let maxResponseBytes = 1 << 20

    public init(baseURL: URL, tenantKey: String?, transport: TransportPolicy? = nil) {
        self.baseURL = baseURL
        self.tenantKey = tenantKey
        // Without a policy given, a loopback http:// base (the lab server, tests) keeps working
        // and anything else must be TLS.
        self.transport = transport ?? TransportPolicy(allowsCleartext: TransportPolicy.isLoopback(baseURL))
    }

    /// The URL evidence may be PUT to (see `TransportPolicy.uploadURL`).
    public func uploadURL(_ text: String) throws -> URL {
        try transport.uploadURL(text, apiBase: baseURL)
    }

    /// The wait before retry `attempt` (1-based): 1 s × 2^(attempt−1), ±20 % jitter, so the
    /// first retry comes after 800–1200 ms (Req 22.3).
    public func backoff(beforeRetry attempt: Int) -> Duration {
        let base = 1000.0 * Double(1 << (attempt - 1))
        return .milliseconds(Int((base * (0.8 + 0.4 * jitter())).rounded()))
    }

    // MARK: Endpoints

    public func login(customerRef: String, pin: String, device: DeviceInfo, geo: Geolocation?) async throws -> LoginResponse {
        let key = try requireTenantKey()
        return try await send("POST", TransrifyAPI.loginPath,
                              body: LoginRequest(tenantKey: key, customerRef: customerRef, pin: pin, device: device, geo: geo))
    }

    public func verify(sessionId: String) async throws -> VerifyResponse {
        _ = try requireTenantKey()
        return try await send("GET", TransrifyAPI.verifyPath, query: [URLQueryItem(name: "sessionId", value: sessionId)],
                              body: nil as LoginRequest?)
    }

    public func sendDuressAlert(sessionId: String, geo: Geolocation?, device: DeviceInfo) async throws -> DuressAlertResponse {
        let key = try requireTenantKey()
        return try await send("POST", TransrifyAPI.duressAlertPath,
                              body: DuressAlertRequest(sessionId: sessionId, tenantKey: key, geo: geo, device: device))
    }

    /// `sessionId`: the asking kit's session, so that the server can leave its user's own alerts out.
    public func nearbyAlerts(geo: Geolocation?, radiusMeters: Int, timestamp: Int64, sessionId: String? = nil) async throws -> NearbyAlertsResponse {
        let key = try requireTenantKey()
        return try await send("POST", TransrifyAPI.nearbyAlertsPath,
                              body: NearbyAlertsRequest(tenantKey: key, geo: geo, radiusMeters: radiusMeters, timestamp: timestamp,
                                                        sessionId: sessionId))
    }

    public func acknowledge(alertId: String, customerRef: String, method: AckMethod) async throws -> AckResponse {
        let key = try requireTenantKey()
        return try await send("POST", TransrifyAPI.ackPath,
                              body: AckRequest(tenantKey: key, alertId: alertId, customerRef: customerRef, method: method))
    }

    public func presign(incidentId: String, contentType: String) async throws -> PresignResponse {
        let key = try requireTenantKey()
        return try await send("POST", TransrifyAPI.presignPath,
                              body: PresignRequest(tenantKey: key, incidentId: incidentId, contentType: contentType))
    }

    public func finalize(incidentId: String, kind: EvidenceKind, key objectKey: String, size: Int64, sha256: String,
                         segment: EvidenceSegment? = nil) async throws -> FinalizeResponse {
        let key = try requireTenantKey()
        return try await send("POST", finalizePath,
                              body: FinalizeRequest(tenantKey: key, incidentId: incidentId, kind: kind, key: objectKey, size: size, sha256: sha256,
                                                    segment: segment))
    }

    /// The lab server's view of this tenant (not a Transrify endpoint: labs and demos only).
    public func labState() async throws -> LabState {
        let key = try requireTenantKey()
        return try await send("GET", "/lab/v1/state", body: nil as LoginRequest?, headers: ["X-Tenant-Key": key])
    }

    // MARK: The generic request

    private func requireTenantKey() throws -> String {
        guard let tenantKey, !tenantKey.isEmpty else {
            throw TransrifyError(.missingTenantKey, detail: "no tenant key stored — run `fieldhal tenant set-key`")
        }
        return tenantKey
    }

    /// Sends JSON, decodes JSON; retries 429 with backoff; maps everything else to
    /// `TransrifyError`.
    public func send<Body: Encodable, Response: Decodable>(
        _ method: String, _ path: String, query: [URLQueryItem] = [], body: Body?, headers: [String: String] = [:]
    ) async throws -> Response {
        var components = URLComponents(url: baseURL.appendingPathComponent(path), resolvingAgainstBaseURL: false)
        if !query.isEmpty { components?.queryItems = query }
        guard let url = components?.url else { throw TransrifyError(.network, detail: "cannot build a URL from \(baseURL) and \(path)") }
        guard transport.allows(scheme: url.scheme) else {
            throw TransrifyError(.refusedURL, detail: "\(method) \(path): \(url.scheme ?? "no")://\(url.host ?? "") is not TLS; nothing was sent — use an https:// URL")
        }
        let headers = [("Content-Type", "application/json"), ("Accept", "application/json")] + headers.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        let payload = try body.map { try JSONEncoder().encode($0) }

        var attempt = 0
        while true {
            let (data, status) = try await perform(method, url, headers: headers, body: payload)
            if status == 429, attempt < maxRateLimitRetries {
                attempt += 1
                try await clock.sleep(for: backoff(beforeRetry: attempt))
                continue
            }
            guard (200..<300).contains(status) else {
                let code = (try? JSONDecoder().decode(APIErrorBody.self, from: data))?.code
                if status == 429 { throw TransrifyError(.rateLimited, detail: "\(method) \(path): 429 after \(attempt) retries") }
                throw TransrifyError(.http(status: status, code: code), detail: "\(method) \(path): HTTP \(status)\(code.map { " \($0)" } ?? "")")
            }
            do {
                return try JSONDecoder().decode(Response.self, from: data)
            } catch {
                throw TransrifyError(.malformedResponse, detail: "\(method) \(path): HTTP \(status) with a body that is not a \(Response.self)")
            }
        }
    }

    private func perform(_ method: String, _ url: URL, headers: [(String, String)], body: Data?) async throws -> (Data, Int) {
        let what = "\(method) \(url.path)"
        let deadline = Duration.milliseconds(Int((requestTimeout * 1000).rounded()))
        do {
            let answer = try await uncancellable {
                try await HTTPSession.send(method, url, headers: headers, body: body.map { .bytes($0) } ?? .empty,
                                           limit: Self.maxResponseBytes, deadline: deadline)
            }
            return (answer.body, answer.status)
        } catch is CancellationError {
            throw CancellationError()
        } catch let failure as HTTPSession.Failure {
            throw TransrifyError(failure: failure, what)
        } catch {
            throw TransrifyError(.network, detail: "\(what): \(error.localizedDescription)")
        }
    }
}

extension TransrifyError {
    /// What an exchange's failure means to the user: no answer is a network error; an answer
    /// past its size limit is malformed; a redirect elsewhere was refused.
    public init(failure: HTTPSession.Failure, _ what: String) {
        switch failure {
        case .transport: self.init(.network, detail: "\(what): \(failure)")
        case .tooLarge: self.init(.malformedResponse, detail: "\(what): \(failure)")
        case .crossOriginRedirect: self.init(.refusedURL, detail: "\(what): \(failure)")
        }
    }
}
