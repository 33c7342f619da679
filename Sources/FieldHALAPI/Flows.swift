import Foundation

/// `GET /v1/lock`: the kit's lock as `fieldhal lock status --json` shows it.
public struct APILockStatus: Sendable, Codable, Equatable {
    public var configured: Bool
    public var locked: Bool
    public var biometricsEnabled: Bool
    /// Seconds until PIN attempts are accepted again; 0 when they are.
    public var pinLockedForSeconds: Int
    public var biometricsLockedForSeconds: Int
    /// After repeated failures: the emergency reset is offered.
    public var offerEmergencyReset: Bool
    /// `immediate`, `1m`, `2m`, `5m`, `10m` or `never`.
    public var relockAfter: String
    public var message: String

    public init(configured: Bool, locked: Bool, biometricsEnabled: Bool, pinLockedForSeconds: Int, biometricsLockedForSeconds: Int,
                offerEmergencyReset: Bool, relockAfter: String, message: String) {
        self.configured = configured
        self.locked = locked
        self.biometricsEnabled = biometricsEnabled
        self.pinLockedForSeconds = pinLockedForSeconds
        self.biometricsLockedForSeconds = biometricsLockedForSeconds
        self.offerEmergencyReset = offerEmergencyReset
        self.relockAfter = relockAfter
        self.message = message
    }
}

/// `GET /v1/evidence`: the evidence waiting to upload that the user queued (what `fieldhal
/// evidence list` shows).
public struct APIEvidence: Sendable, Codable, Equatable {
    public var items: [APIEvidenceItem]

    public init(items: [APIEvidenceItem]) {
        self.items = items
    }
}

public struct APIEvidenceItem: Sendable, Codable, Equatable {
    public var id: String
    public var incidentId: String
    /// TEXT, NEARBY, PHOTO, AUDIO or VIDEO.
    public var kind: String
    public var contentType: String
    public var bytes: Int64
    public var createdAt: Date
    /// `queued` (next: upload) or `uploaded` (next: finalize).
    public var phase: String
    public var attempts: Int
    public var nextAttemptAt: Date?
    public var lastError: String?

    public init(id: String, incidentId: String, kind: String, contentType: String, bytes: Int64, createdAt: Date, phase: String,
                attempts: Int, nextAttemptAt: Date?, lastError: String?) {
        self.id = id
        self.incidentId = incidentId
        self.kind = kind
        self.contentType = contentType
        self.bytes = bytes
        self.createdAt = createdAt
        self.phase = phase
        self.attempts = attempts
        self.nextAttemptAt = nextAttemptAt
        self.lastError = lastError
    }
}
