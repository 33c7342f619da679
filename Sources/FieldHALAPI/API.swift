import FieldHAL
import Foundation

/// The kit's hardware API (issue 20): what `fieldhal run` serves on its Unix socket and what
/// its clients send and receive. HTTP/1.1 and JSON; the contract is `api/openapi.yaml`, and
/// every type here is one of its schemas under the same name.
///
/// This module holds values only (no server, no client), so that the daemon, the Swift
/// client and the tests agree on the wire form by construction.
public enum FieldHALAPI {
    /// The path prefix of this version. A change that breaks a client gets a new one.
    public static let version = "v1"

    /// JSON as the API writes it: ISO 8601 times with fractions, keys sorted (stable output
    /// for scripts and tests).
    public static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(InternetTime.text(date))
        }
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }

    /// `2026-11-24T17:41:38.354Z`, as `InternetTime` writes it (by integer arithmetic: a
    /// format style showed in the event stream's latency); the style reads what it does not.
    static let timeStyle = Date.ISO8601FormatStyle.iso8601.year().month().day().time(includingFractionalSeconds: true).timeZone(separator: .omitted)

    /// The request target of route `name` (`/v1/name?query`), as every client writes it.
    public static func route(_ name: String, query: [(String, String)] = []) -> String {
        var components = URLComponents()
        components.path = "/\(version)/\(name)"
        if !query.isEmpty { components.queryItems = query.map { URLQueryItem(name: $0.0, value: $0.1) } }
        return components.string ?? components.path
    }

    /// A wait in the API's unit (whole milliseconds, as `timeout_ms` and `timeoutMs` take it).
    public static func milliseconds(_ duration: Duration) -> Int64 {
        duration.wholeMilliseconds
    }

    public static var decoder: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let text = try decoder.singleValueContainer().decode(String.self)
            if let date = InternetTime.date(text) ?? (try? Date(text, strategy: timeStyle)) {
                return date
            }
            if let date = try? Date(text, strategy: .iso8601) { return date }
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not an ISO 8601 time: \(text)"))
        }
        return decoder
    }
}

/// What a caller may do. Root, the daemon's own user and members of the control group may
/// do everything; anyone else only what `[api] grants` gives them.
public enum APIScope: String, Sendable, Codable, CaseIterable, Comparable {
    /// `GET /v1/status`, `GET /v1/capabilities`, capability events.
    case status
    /// Fixes: `GET /v1/location`, fix events.
    case location
    case nfcRead = "nfc.read"
    case nfcWrite = "nfc.write"
    case nfcEmulate = "nfc.emulate"
    case camera
    case microphone
    case haptics
    case speaker
    case biometrics
    case lock
    /// Transrify sign-in, session, sign-out.
    case transrify
    case alerts
    case evidence

    public static func < (lhs: APIScope, rhs: APIScope) -> Bool { lhs.rawValue < rhs.rawValue }
}

extension DeviceUse.Request {
    /// The scope a caller needs to make this request, and to see it made.
    public var scope: APIScope {
        switch self {
        case .hapticsPlay: .haptics
        case .speakerPlay: .speaker
        case .biometricsAvailability, .biometricsVerify: .biometrics
        case .cameraPhoto, .cameraRecord: .camera
        case .microphoneRecord: .microphone
        case .nfcWrite: .nfcWrite
        }
    }
}

/// Who the daemon takes the caller to be, from the socket's peer credentials.
public struct APICaller: Sendable, Codable, Equatable {
    /// A program on the Unix socket: who the kernel says it is.
    public var uid: UInt32?
    public var gid: UInt32?
    public var pid: Int32?
    /// The user's name, when the user database has one.
    public var user: String?
    /// A page through the web door: its token's id and origin, and the devices the token is
    /// limited to (nil: every device).
    public var token: String?
    public var origin: String?
    public var devices: [String]?
    /// What this caller may do, sorted.
    public var scopes: [APIScope]

    public init(uid: UInt32, gid: UInt32, pid: Int32, user: String?, scopes: [APIScope]) {
        self.uid = uid
        self.gid = gid
        self.pid = pid
        self.user = user
        self.scopes = scopes
    }

    public init(token: String? = nil, origin: String? = nil, devices: [String]? = nil, scopes: [APIScope]) {
        self.token = token
        self.origin = origin
        self.devices = devices
        self.scopes = scopes
    }
}

/// `GET /v1/status`.
public struct APIStatus: Sendable, Codable, Equatable {
    /// FieldHAL's version (`fieldhal --version`).
    public var version: String
    /// The API version this daemon serves (`v1`).
    public var api: String
    public var pid: Int32
    public var startedAt: Date
    /// The configuration file the daemon runs with.
    public var configuration: String
    public var caller: APICaller

    public init(version: String, api: String, pid: Int32, startedAt: Date, configuration: String, caller: APICaller) {
        self.version = version
        self.api = api
        self.pid = pid
        self.startedAt = startedAt
        self.configuration = configuration
        self.caller = caller
    }
}

/// `GET /v1/health`: the daemon's verdict on itself and on each configured device, for an
/// updater's health check or a fleet's probe. No scope is needed, so it says nothing a
/// caller with no grant should learn: no reasons, paths, identities, sessions or evidence —
/// only whether each device the configuration names is there. What a duress changes is
/// never in it: the devices stay where they were.
public struct APIHealth: Sendable, Codable, Equatable {
    public enum Verdict: String, Sendable, Codable {
        /// Serving, and every configured device available.
        case healthy
        /// Serving, with at least one configured device unavailable (unplugged, failing).
        case degraded
    }

    public struct Device: Sendable, Codable, Equatable {
        public var capability: Capability
        /// Its name in the configuration (`front` for `[camera.front]`, `default` for `[camera]`).
        public var name: String
        public var available: Bool

        public init(capability: Capability, name: String, available: Bool) {
            self.capability = capability
            self.name = name
            self.available = available
        }
    }

    public var verdict: Verdict
    /// FieldHAL's version, for an updater that checks the new one runs.
    public var version: String
    public var devices: [Device]

    public init(version: String, devices: [Device]) {
        self.version = version
        self.devices = devices
        verdict = devices.allSatisfy(\.available) ? .healthy : .degraded
    }
}

/// `GET /v1/capabilities`: how each capability came out of the daemon's loading of the kit.
public struct APICapabilities: Sendable, Codable, Equatable {
    public var capabilities: [CapabilityStatus]
    /// When the kit was loaded (at the daemon's start, and again on SIGHUP).
    public var loadedAt: Date

    public init(capabilities: [CapabilityStatus], loadedAt: Date) {
        self.capabilities = capabilities
        self.loadedAt = loadedAt
    }
}

/// `GET /v1/devices`: every device the configuration names, capability by capability, each
/// capability's in the file's order, with its name, roles, state and whether it is the
/// default (what a request that names no device gets).
public struct APIDevices: Sendable, Codable, Equatable {
    public var devices: [CapabilityStatus]

    public init(devices: [CapabilityStatus]) {
        self.devices = devices
    }
}

/// Every error the API returns: the same typed error the CLI prints, as JSON, with the
/// HTTP status it came with.
public struct APIErrorBody: Sendable, Codable, Equatable {
    public var error: APIProblem

    public init(error: APIProblem) {
        self.error = error
    }
}

/// One error: `kind` is a `FieldHALError.Kind`, or one of the API's own (`forbidden`,
/// `notFound`, `methodNotAllowed`); `subject`, `detail` and `advice` read as the CLI's do.
public struct APIProblem: Error, Sendable, Codable, Equatable, CustomStringConvertible {
    public var kind: String
    public var subject: String
    public var detail: String
    public var advice: String?
    /// The HTTP status, repeated for clients that only keep the body.
    public var status: Int

    public init(kind: String, subject: String, detail: String, advice: String? = nil, status: Int) {
        self.kind = kind
        self.subject = subject
        self.detail = detail
        self.advice = advice
        self.status = status
    }

    public var description: String {
        var text = subject.isEmpty ? detail : "\(subject): \(detail)"
        if let advice { text += " — \(advice)" }
        return text
    }

    /// The API's kinds beside `FieldHALError.Kind`'s.
    public static let forbidden = "forbidden"
    public static let notFound = "notFound"
    public static let methodNotAllowed = "methodNotAllowed"

    /// The flows' kinds: what Transrify or the lock answered. `message`-only problems (empty
    /// subject) carry the words the person at the device sees, and nothing more.
    /// A customer reference and PIN refused (401).
    public static let invalidCredentials = "invalidCredentials"
    /// Transrify asks the kit to wait (429).
    public static let rateLimited = "rateLimited"
    /// The kit could not reach Transrify (502).
    public static let network = "network"
    /// The kit's configuration or keys do not allow it: no tenant key, an invalid one (503).
    public static let configuration = "configuration"
    /// The organisation's tenant is suspended (403).
    public static let suspended = "suspended"
    /// The flow could not finish; the message says what stays as it was (502).
    public static let failed = "failed"
}

extension APIProblem {
    /// A FieldHAL error with the HTTP status that says the same thing.
    public init(_ error: FieldHALError) {
        self.init(kind: error.kind.rawValue, subject: error.subject, detail: error.detail, advice: error.advice,
                  status: Self.status(for: error.kind))
    }

    /// 4xx for what the caller can change, 5xx for the kit's own state.
    public static func status(for kind: FieldHALError.Kind) -> Int {
        switch kind {
        case .invalidArgument, .malformedData, .stale: 400
        case .permissionDenied: 403
        case .busy: 409
        case .noSuchDevice: 404
        case .notConfigured, .unavailable, .deviceNotFound, .disconnected, .noFix: 503
        case .timeout: 504
        case .cancelled: 499
        case .unsupported: 501
        case .io, .protocolError: 502
        }
    }
}

/// One Server-Sent Event of `GET /v1/events`: `event: <type>` and one `data:` line of JSON.
public enum APIEvent: Sendable, Equatable {
    /// A fix from one of the kit's receivers (scope `location`), with the receiver's name
    /// (nil from a daemon older than named devices).
    case fix(Fix, device: String? = nil)
    /// A capability's state (scope `status`): each one once when the stream opens, then on
    /// every change.
    case capability(CapabilityStatus)
    /// A nearby duress alert the daemon announced (scope `alerts`): what its journal line,
    /// haptic and sound announce, once per alert (the kit's own user's alerts never).
    case alert(APIAlert)
    /// The lock's state (scope `lock`): once when the stream opens, then whenever it locks,
    /// unlocks, is set up or turned off.
    case lock(APILockStatus)
    /// A tag came into the reader's field or left it (scope `nfc.read`): a tag present when
    /// the stream opens is found first. Only while someone follows these does the daemon
    /// look for tags (once a second, a quarter of a second each time).
    case tag(APITagEvent)
    /// A device used through the API (stream scope `status`; each use only to a caller whose
    /// scopes and grants cover its device): a pattern played, a clip, a verification, a
    /// still, a tag written, with what the device answered or how it failed. Sent only when
    /// asked for by name (`types=use`): `fieldhal record` keeps them in a trace.
    case use(DeviceUse)

    public enum Kind: String, Sendable, CaseIterable {
        case fix
        case capability
        case alert
        case lock
        case tag
        case use

        /// What a stream without `types` follows: every kind but `use`, which is asked for.
        public static let unasked: [Kind] = [.fix, .capability, .alert, .lock, .tag]

        public var scope: APIScope {
            switch self {
            case .fix: .location
            case .capability: .status
            case .alert: .alerts
            case .lock: .lock
            case .tag: .nfcRead
            case .use: .status
            }
        }
    }

    public var kind: Kind {
        switch self {
        case .fix: .fix
        case .capability: .capability
        case .alert: .alert
        case .lock: .lock
        case .tag: .tag
        case .use: .use
        }
    }

    /// The event as it goes on the wire, with its blank line. A stream passes its own
    /// `encoder`, made once: making one per event showed in a fix's latency.
    public func serverSentEvent(encoder: JSONEncoder = FieldHALAPI.encoder) throws -> String {
        if case .fix(let fix, let device) = self { return "event: fix\ndata: \(try fix.apiJSON(device: device, encoder: encoder))\n\n" }
        let data: Data = switch self {
        case .fix(let fix, let device): try encoder.encode(FixEventData(fix: fix, device: device))
        case .capability(let status): try encoder.encode(status)
        case .alert(let alert): try encoder.encode(alert)
        case .lock(let status): try encoder.encode(status)
        case .tag(let event): try encoder.encode(event)
        case .use(let use): try encoder.encode(use)
        }
        return "event: \(kind.rawValue)\ndata: \(String(decoding: data, as: UTF8.self))\n\n"
    }

    /// An event from its type and its `data:` line; nil for a type this client does not know
    /// (a newer daemon may send more).
    public init?(kind: String, data: Data, decoder: JSONDecoder = FieldHALAPI.decoder) throws {
        switch Kind(rawValue: kind) {
        case .fix:
            let (fix, device) = try Fix.apiEvent(data, decoder: decoder)
            self = .fix(fix, device: device)
        case .capability: self = .capability(try decoder.decode(CapabilityStatus.self, from: data))
        case .alert: self = .alert(try decoder.decode(APIAlert.self, from: data))
        case .lock: self = .lock(try decoder.decode(APILockStatus.self, from: data))
        case .tag: self = .tag(try decoder.decode(APITagEvent.self, from: data))
        case .use: self = .use(try decoder.decode(DeviceUse.self, from: data))
        case nil: return nil
        }
    }
}
