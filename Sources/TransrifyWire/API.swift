import Foundation

/// The Transrify API's wire types (seed 000, Requirements 3, 18–20, 24–27): what the
/// client sends and the lab server answers. JSON, camelCase.
public enum TransrifyAPI {
    public static let loginPath = "/v1/sessions/login"
    public static let verifyPath = "/v1/sessions/verify"
    public static let duressAlertPath = "/v1/alerts/duress"
    public static let nearbyAlertsPath = "/v1/alerts/nearby"
    public static let ackPath = "/v1/alerts/ack"
    public static let presignPath = "/v1/evidence/presign"
    /// The seed's path, without `/v1` (Req 20.1); configurable in the client.
    public static let finalizePath = "/evidence/finalize"
}

public enum Verdict: String, Codable, Sendable {
    case normal = "NORMAL"
    case duress = "DURESS"
    case fail = "FAIL"
}

public struct Geolocation: Codable, Sendable, Equatable {
    public var lat: Double
    public var lon: Double
    public init(lat: Double, lon: Double) {
        self.lat = lat
        self.lon = lon
    }
}

extension Geolocation {
    /// Great-circle distance in metres (haversine, mean Earth radius): the lab server's
    /// `nearby` radius and a responder's banner use the same figure.
    public func distanceMeters(to other: Geolocation) -> Double {
        let radius = 6_371_008.8, toRadians = Double.pi / 180
        let dLat = (other.lat - lat) * toRadians, dLon = (other.lon - lon) * toRadians
        let h = sin(dLat / 2) * sin(dLat / 2) + cos(lat * toRadians) * cos(other.lat * toRadians) * sin(dLon / 2) * sin(dLon / 2)
        return 2 * radius * asin(min(1, sqrt(h)))
    }
}

public struct DeviceInfo: Codable, Sendable, Equatable {
    /// "linux" for FieldHAL (the seed's "ios" / "android", Req 3.3).
    public var platform: String
    public var version: String
    public init(platform: String = "linux", version: String) {
        self.platform = platform
        self.version = version
    }
}

public struct LoginRequest: Codable, Sendable {
    public var tenantKey: String
    public var customerRef: String
    public var pin: String
    public var device: DeviceInfo
    public var geo: Geolocation?
    public init(tenantKey: String, customerRef: String, pin: String, device: DeviceInfo, geo: Geolocation?) {
        self.tenantKey = tenantKey
        self.customerRef = customerRef
        self.pin = pin
        self.device = device
        self.geo = geo
    }
}

public struct LoginResponse: Codable, Sendable, Equatable {
    public var verdict: Verdict
    public var recommendedAction: String?
    public var sessionId: String?
    public var token: String?
    public init(verdict: Verdict, recommendedAction: String?, sessionId: String?, token: String?) {
        self.verdict = verdict
        self.recommendedAction = recommendedAction
        self.sessionId = sessionId
        self.token = token
    }
}

public struct VerifyResponse: Codable, Sendable, Equatable {
    public var valid: Bool
    public init(valid: Bool) { self.valid = valid }
}

public struct DuressAlertRequest: Codable, Sendable {
    public var sessionId: String
    public var tenantKey: String
    public var alertKind: String
    public var geo: Geolocation?
    public var device: DeviceInfo
    public init(sessionId: String, tenantKey: String, geo: Geolocation?, device: DeviceInfo) {
        self.sessionId = sessionId
        self.tenantKey = tenantKey
        self.alertKind = "DURESS"
        self.geo = geo
        self.device = device
    }
}

public struct DuressAlertResponse: Codable, Sendable, Equatable {
    public var alertId: String
    public init(alertId: String) { self.alertId = alertId }
}

public struct NearbyAlertsRequest: Codable, Sendable {
    public var tenantKey: String
    public var geo: Geolocation?
    public var radiusMeters: Int
    /// Unix milliseconds.
    public var timestamp: Int64
    /// The asking kit's session (optional, beyond the seed): a server leaves the alerts of
    /// that session's own user out, so that a duressed kit never hears its own alert.
    public var sessionId: String?
    public init(tenantKey: String, geo: Geolocation?, radiusMeters: Int, timestamp: Int64, sessionId: String? = nil) {
        self.tenantKey = tenantKey
        self.geo = geo
        self.radiusMeters = radiusMeters
        self.timestamp = timestamp
        self.sessionId = sessionId
    }
}

public struct Alert: Codable, Sendable, Equatable {
    public var alertId: String
    public var alertKind: String
    public var customerRef: String
    public var geo: Geolocation?
    /// Unix milliseconds.
    public var createdAt: Int64
    public init(alertId: String, alertKind: String, customerRef: String, geo: Geolocation?, createdAt: Int64) {
        self.alertId = alertId
        self.alertKind = alertKind
        self.customerRef = customerRef
        self.geo = geo
        self.createdAt = createdAt
    }
}

public struct NearbyAlertsResponse: Codable, Sendable, Equatable {
    public var alerts: [Alert]
    public init(alerts: [Alert]) { self.alerts = alerts }
}

public enum AckMethod: String, Codable, Sendable {
    case push = "PUSH", inApp = "INAPP", nfc = "NFC"
}

public struct AckRequest: Codable, Sendable {
    public var tenantKey: String
    public var alertId: String
    public var customerRef: String
    public var method: AckMethod
    public init(tenantKey: String, alertId: String, customerRef: String, method: AckMethod) {
        self.tenantKey = tenantKey
        self.alertId = alertId
        self.customerRef = customerRef
        self.method = method
    }
}

public struct AckResponse: Codable, Sendable, Equatable {
    public var acknowledged: Bool
    public init(acknowledged: Bool) { self.acknowledged = acknowledged }
}

public enum EvidenceKind: String, Codable, Sendable, CaseIterable {
    case video = "VIDEO", audio = "AUDIO", photo = "PHOTO", nearby = "NEARBY", text = "TEXT"
}

public struct PresignRequest: Codable, Sendable {
    public var tenantKey: String
    public var incidentId: String
    public var contentType: String
    public init(tenantKey: String, incidentId: String, contentType: String) {
        self.tenantKey = tenantKey
        self.incidentId = incidentId
        self.contentType = contentType
    }
}

public struct PresignResponse: Codable, Sendable, Equatable {
    /// A signed, expiring PUT URL.
    public var url: String
    /// The object's key, for finalize.
    public var key: String
    public init(url: String, key: String) {
        self.url = url
        self.key = key
    }
}

public struct FinalizeRequest: Codable, Sendable {
    public var tenantKey: String
    public var incidentId: String
    public var kind: EvidenceKind
    public var key: String
    public var size: Int64
    /// Lower-case hex.
    public var sha256: String
    /// An optional field (FieldHAL's, beyond seed 000): where this item stands in a
    /// recording sent in segments. A server that does not know it ignores it.
    public var segment: EvidenceSegment?
    public init(tenantKey: String, incidentId: String, kind: EvidenceKind, key: String, size: Int64, sha256: String,
                segment: EvidenceSegment? = nil) {
        self.tenantKey = tenantKey
        self.incidentId = incidentId
        self.kind = kind
        self.key = key
        self.size = size
        self.sha256 = sha256
        self.segment = segment
    }
}

/// One segment of a recording (audio or video sent in pieces as it is recorded): its
/// recording, its place, its time, and the SHA-256 of the segment before it — a hash chain
/// the server checks for a missing, reordered or altered segment.
public struct EvidenceSegment: Codable, Sendable, Equatable {
    public var recording: String
    public var sequence: Int
    /// Milliseconds since 1970 (the wire's other times are too).
    public var startedAtMs: Int64
    public var durationMs: Int64
    /// Lower-case hex; absent on a recording's first segment.
    public var previousSha256: String?
    public init(recording: String, sequence: Int, startedAtMs: Int64, durationMs: Int64, previousSha256: String?) {
        self.recording = recording
        self.sequence = sequence
        self.startedAtMs = startedAtMs
        self.durationMs = durationMs
        self.previousSha256 = previousSha256
    }
}

/// The closing item of an incident whose audio and video were sent in segments: every other
/// item of the incident, so the server can tell what never arrived — a segment the hash
/// chain cannot show missing (the last ones), a photo, a location. FieldHAL's, beyond seed
/// 000: it travels as a TEXT item of content type `contentType` (presign, PUT, finalize
/// like any other), and a server that does not know it keeps it as a text.
public struct EvidenceManifest: Codable, Sendable, Equatable {
    public static let contentType = "application/vnd.fieldhal.evidence-manifest+json"
    /// A manifest larger than this is not one (a lab server reads it whole).
    public static let maximumBytes = 1 << 20

    public struct Item: Codable, Sendable, Equatable {
        public var kind: EvidenceKind
        public var size: Int64
        /// Lower-case hex.
        public var sha256: String
        public var segment: EvidenceSegment?
        public init(kind: EvidenceKind, size: Int64, sha256: String, segment: EvidenceSegment? = nil) {
            (self.kind, self.size, self.sha256, self.segment) = (kind, size, sha256, segment)
        }
    }

    public var incidentId: String
    /// When the recordings ended, milliseconds since 1970.
    public var closedAtMs: Int64
    /// In the order they were queued.
    public var items: [Item]
    public init(incidentId: String, closedAtMs: Int64, items: [Item]) {
        (self.incidentId, self.closedAtMs, self.items) = (incidentId, closedAtMs, items)
    }
}

public struct FinalizeResponse: Codable, Sendable, Equatable {
    public var evidenceId: String
    public init(evidenceId: String) { self.evidenceId = evidenceId }
}

/// The body of every non-2xx answer.
public struct APIErrorBody: Codable, Sendable, Equatable {
    public var code: String
    public var message: String
    public init(code: String, message: String) {
        self.code = code
        self.message = message
    }
}

/// The lab server's own view of a tenant (`GET /lab/v1/state`, header `X-Tenant-Key`): not
/// part of the Transrify API, for demos and lab checks.
public struct LabState: Codable, Sendable {
    public struct Session: Codable, Sendable {
        public var sessionId: String, customerRef: String, mode: String
        public init(sessionId: String, customerRef: String, mode: String) {
            (self.sessionId, self.customerRef, self.mode) = (sessionId, customerRef, mode)
        }
    }

    public struct Ack: Codable, Sendable {
        public var alertId: String, customerRef: String, method: String
        public init(alertId: String, customerRef: String, method: String) {
            (self.alertId, self.customerRef, self.method) = (alertId, customerRef, method)
        }
    }

    public struct Evidence: Codable, Sendable {
        public var evidenceId: String, incidentId: String, kind: String, key: String, size: Int64, sha256: String, finalizeCalls: Int
        /// Where it stands in a recording sent in segments, when it is one.
        public var segment: EvidenceSegment?
        /// When the server confirmed it (its first finalize), milliseconds since 1970.
        public var finalizedAtMs: Int64?
        public init(evidenceId: String, incidentId: String, kind: String, key: String, size: Int64, sha256: String, finalizeCalls: Int,
                    segment: EvidenceSegment? = nil, finalizedAtMs: Int64? = nil) {
            (self.evidenceId, self.incidentId, self.kind, self.key) = (evidenceId, incidentId, kind, key)
            (self.size, self.sha256, self.finalizeCalls, self.segment, self.finalizedAtMs) = (size, sha256, finalizeCalls, segment, finalizedAtMs)
        }
    }

    /// A recording sent in segments, as the lab server has checked it: its segments in order,
    /// and what is wrong with the chain so far, if anything (a gap, a segment whose
    /// predecessor's SHA-256 is not the one it names, two segments in one place).
    public struct Recording: Codable, Sendable, Equatable {
        public var recording: String, incidentId: String, kind: String
        public var segments: Int
        public var seconds: Double
        public var problems: [String]
        /// The segments its incident's manifest lists: known once the recording has ended
        /// (absent while it goes on, and for a kit that was stopped before it could say).
        public var listed: Int?
        public init(recording: String, incidentId: String, kind: String, segments: Int, seconds: Double, problems: [String], listed: Int? = nil) {
            (self.recording, self.incidentId, self.kind) = (recording, incidentId, kind)
            (self.segments, self.seconds, self.problems, self.listed) = (segments, seconds, problems, listed)
        }
        /// Every segment the manifest lists has arrived, in a whole chain.
        public var isComplete: Bool { listed == segments && problems.isEmpty }
    }

    /// An incident's manifest as the lab server has checked it against what arrived.
    public struct Manifest: Codable, Sendable, Equatable {
        public var incidentId: String
        /// The manifest item's own evidence id.
        public var evidenceId: String
        /// Items it lists, and how many of them the server has (by kind and SHA-256).
        public var listed: Int
        public var arrived: Int
        /// What is missing, or why the manifest could not be read.
        public var problems: [String]
        public init(incidentId: String, evidenceId: String, listed: Int, arrived: Int, problems: [String]) {
            (self.incidentId, self.evidenceId, self.listed, self.arrived, self.problems) = (incidentId, evidenceId, listed, arrived, problems)
        }
        public var isComplete: Bool { problems.isEmpty }
    }

    public var sessions: [Session]
    public var alerts: [Alert]
    public var acks: [Ack]
    public var evidence: [Evidence]
    /// Absent from a lab server older than segments.
    public var recordings: [Recording]?
    /// Absent from a lab server older than manifests.
    public var manifests: [Manifest]?

    public init(sessions: [Session], alerts: [Alert], acks: [Ack], evidence: [Evidence], recordings: [Recording]? = nil,
                manifests: [Manifest]? = nil) {
        (self.sessions, self.alerts, self.acks, self.evidence) = (sessions, alerts, acks, evidence)
        (self.recordings, self.manifests) = (recordings, manifests)
    }

    /// Checks each manifest (`manifests`: the manifest item's evidence id and what it said,
    /// nil when it could not be read) against the evidence of its incident: every item it
    /// lists has arrived (the same kind and SHA-256).
    public static func manifests(_ manifests: [(evidenceId: String, incidentId: String, manifest: EvidenceManifest?)],
                                 of evidence: [Evidence]) -> [Manifest] {
        manifests.map { entry in
            guard let manifest = entry.manifest else {
                return Manifest(incidentId: entry.incidentId, evidenceId: entry.evidenceId, listed: 0, arrived: 0,
                                problems: ["the manifest is not a readable EvidenceManifest"])
            }
            var problems: [String] = []
            if manifest.incidentId != entry.incidentId {
                problems.append("the manifest names incident \(manifest.incidentId), not its own")
            }
            // A segment is matched by its place as well as its hash (a silent microphone records
            // the same bytes second after second); other items by kind and hash, each once.
            func place(_ kind: String, _ sha256: String, _ segment: EvidenceSegment?) -> String {
                "\(kind) \(sha256.lowercased())" + (segment.map { " \($0.recording) \($0.sequence)" } ?? "")
            }
            var present: [String: Int] = [:]
            for item in evidence where item.incidentId == entry.incidentId {
                present[place(item.kind, item.sha256, item.segment), default: 0] += 1
            }
            var arrived = 0
            for item in manifest.items {
                let key = place(item.kind.rawValue, item.sha256, item.segment)
                if let count = present[key], count > 0 {
                    present[key] = count - 1
                    arrived += 1
                } else if let segment = item.segment {
                    problems.append("\(item.kind.rawValue) segment \(segment.sequence) of recording \(segment.recording) has not arrived")
                } else {
                    problems.append("the \(item.kind.rawValue) item \(item.sha256.lowercased().prefix(12))… has not arrived")
                }
            }
            return Manifest(incidentId: entry.incidentId, evidenceId: entry.evidenceId, listed: manifest.items.count, arrived: arrived, problems: problems)
        }
    }

    /// Checks recordings' segments (from `evidence`, any order) as the lab server does: each
    /// recording's sequence numbers run 0, 1, 2, … without a gap or a repeat, and each
    /// segment names its predecessor's SHA-256 (the first names none).
    /// With `manifests`, a recording a manifest lists says how many segments it has in all
    /// (`listed`), and the last ones missing are problems too: the chain alone cannot show them.
    public static func recordings(of evidence: [Evidence], manifests: [EvidenceManifest] = []) -> [Recording] {
        var listed: [String: Int] = [:]
        for manifest in manifests {
            for item in manifest.items {
                guard let segment = item.segment else { continue }
                listed[segment.recording] = max(listed[segment.recording] ?? 0, segment.sequence + 1)
            }
        }
        var order: [String] = []
        var byRecording: [String: [(item: Evidence, segment: EvidenceSegment)]] = [:]
        for item in evidence {
            guard let segment = item.segment else { continue }
            if byRecording[segment.recording] == nil { order.append(segment.recording) }
            byRecording[segment.recording, default: []].append((item, segment))
        }
        return order.map { name in
            let segments = byRecording[name, default: []].sorted { $0.segment.sequence < $1.segment.sequence }
            var problems: [String] = []
            var previous: (item: Evidence, segment: EvidenceSegment)?
            for (item, segment) in segments {
                let expected = previous.map { $0.segment.sequence + 1 } ?? 0
                if segment.sequence < expected {
                    problems.append("segment \(segment.sequence) arrived twice")
                    continue
                }
                if segment.sequence > expected {
                    problems.append(expected == segment.sequence - 1 ? "segment \(expected) is missing" : "segments \(expected)–\(segment.sequence - 1) are missing")
                } else if segment.previousSha256 != previous?.item.sha256 {
                    problems.append("segment \(segment.sequence) does not follow segment \(expected - 1) (its SHA-256 is not the one named)")
                }
                previous = (item, segment)
            }
            let arrived = Set(segments.map(\.segment.sequence)).count
            if let total = listed[name], let last = previous?.segment.sequence, last + 1 < total {
                problems.append(last + 2 == total ? "segment \(total - 1) is missing (the manifest lists \(total))"
                                                  : "segments \(last + 1)–\(total - 1) are missing (the manifest lists \(total))")
            }
            return Recording(recording: name, incidentId: segments[0].item.incidentId, kind: segments[0].item.kind, segments: arrived,
                             seconds: Double(segments.reduce(Int64(0)) { $0 + $1.segment.durationMs }) / 1000, problems: problems,
                             listed: listed[name])
        }
    }
}

/// The alerts WebSocket channel (Req 35): `GET /v1/alerts/ws?tenantKey=…` upgraded to a
/// WebSocket. The server speaks, the client listens: first a `snapshot` of the tenant's
/// active alerts (so a client that reconnects misses nothing), then one `alert` message per
/// new alert. Text frames, one JSON object each.
public struct AlertChannelMessage: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable { case snapshot, alert }
    public var type: Kind
    public var alerts: [Alert]

    public init(type: Kind, alerts: [Alert]) {
        self.type = type
        self.alerts = alerts
    }
}

extension TransrifyAPI {
    public static let alertsChannelPath = "/v1/alerts/ws"
}
