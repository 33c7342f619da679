import FieldHAL
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
    /// How the vault key that seals the PIN hashes is kept, and what a copy of the state
    /// directory gives away (absent from daemons before 0.3.1).
    public var vaultKey: APIVaultKey?
    /// Wrong PINs in a row after which the kit's data is erased; absent: never (and from
    /// daemons before 0.3.1).
    public var wipeAfterFailures: Int?
    /// How many more wrong PINs erase it; absent when no wipe is set.
    public var failuresBeforeWipe: Int?

    public init(configured: Bool, locked: Bool, biometricsEnabled: Bool, pinLockedForSeconds: Int, biometricsLockedForSeconds: Int,
                offerEmergencyReset: Bool, relockAfter: String, message: String, vaultKey: APIVaultKey? = nil,
                wipeAfterFailures: Int? = nil, failuresBeforeWipe: Int? = nil) {
        self.wipeAfterFailures = wipeAfterFailures
        self.failuresBeforeWipe = failuresBeforeWipe
        self.configured = configured
        self.locked = locked
        self.biometricsEnabled = biometricsEnabled
        self.pinLockedForSeconds = pinLockedForSeconds
        self.biometricsLockedForSeconds = biometricsLockedForSeconds
        self.offerEmergencyReset = offerEmergencyReset
        self.relockAfter = relockAfter
        self.message = message
        self.vaultKey = vaultKey
    }
}

/// `vaultKey` in a lock status: `file` (beside the sealed hashes) or `tpm2` (sealed to the
/// kit's TPM), and in words what an attacker with a copy of the state directory can do.
public struct APIVaultKey: Sendable, Codable, Equatable {
    public var protection: String
    public var offlineAttack: String

    public init(protection: String, offlineAttack: String) {
        self.protection = protection
        self.offlineAttack = offlineAttack
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
    /// The SHA-256 of the plaintext, hex: what the server checks after the upload.
    public var sha256: String
    /// When an upload of it began, while one runs.
    public var uploadingSince: Date?
    /// For a TEXT item that reports a capture that failed: the kind that failed.
    public var failedKind: String?

    public init(id: String, incidentId: String, kind: String, contentType: String, bytes: Int64, createdAt: Date, phase: String,
                attempts: Int, nextAttemptAt: Date?, lastError: String?, sha256: String, uploadingSince: Date? = nil, failedKind: String? = nil) {
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
        self.sha256 = sha256
        self.uploadingSince = uploadingSince
        self.failedKind = failedKind
    }
}

/// `POST /v1/evidence`: one piece of evidence captured into the sealed queue, as `fieldhal
/// evidence capture` does: `kind` PHOTO, AUDIO, VIDEO, TEXT (with `text`) or NEARBY;
/// `seconds` of audio or video (1–600); `incidentId` (default: the session's).
public struct APIEvidenceCapture: Sendable, Codable, Equatable {
    public var kind: String
    public var text: String?
    public var seconds: Int?
    public var incidentId: String?

    public init(kind: String, text: String? = nil, seconds: Int? = nil, incidentId: String? = nil) {
        self.kind = kind
        self.text = text
        self.seconds = seconds
        self.incidentId = incidentId
    }

    /// The longest note (in characters): a page of text, well within the API's 64 KiB body.
    public static let textLimit = 16_384
    /// Seconds of audio or video one capture may ask for.
    public static let secondsRange = 1...600

    /// What the daemon and the CLI on its own both refuse, in the same words.
    public func checkLimits() throws {
        if let seconds, !Self.secondsRange.contains(seconds) {
            throw FieldHALError(.invalidArgument, subject: "seconds",
                                detail: "\(seconds) is not from \(Self.secondsRange.lowerBound) to \(Self.secondsRange.upperBound)")
        }
        for (name, value, limit) in [("text", text, Self.textLimit), ("incidentId", incidentId, 256)] {
            if let value, value.unicodeScalars.count > limit {
                throw FieldHALError(.invalidArgument, subject: name, detail: "longer than \(limit) characters")
            }
        }
        if incidentId?.isEmpty == true {
            throw FieldHALError(.invalidArgument, subject: "incidentId", detail: "is empty", advice: "leave it out for the session's")
        }
    }
}

/// `POST /v1/evidence/flush`: what uploaded (id → server key), how many items remain, and
/// why those that did not upload did not.
public struct APIEvidenceFlush: Sendable, Codable, Equatable {
    public var uploaded: [String: String]
    public var remaining: Int
    public var errors: [String: String]

    public init(uploaded: [String: String], remaining: Int, errors: [String: String]) {
        self.uploaded = uploaded
        self.remaining = remaining
        self.errors = errors
    }
}

// MARK: Transrify sign-in and session

/// `POST /v1/session`: sign in to Transrify with the kit's location. The PIN travels only on
/// the daemon's Unix socket, to a caller the kernel named.
public struct APISignIn: Sendable, Codable, Equatable {
    public var customerRef: String
    public var pin: String

    public init(customerRef: String, pin: String) {
        self.customerRef = customerRef
        self.pin = pin
    }
}

/// `POST /v1/session/verify`: the session checked with Transrify (Req 18). `valid`;
/// `cleared` (Transrify no longer knows it: the kit is signed out); `kept` (Transrify could
/// not be reached: the session stays, `reason` says why); `signedOut` (there was none).
public struct APISessionCheck: Sendable, Codable, Equatable {
    public var outcome: String
    public var reason: String?
    public var session: APISession

    public init(outcome: String, reason: String? = nil, session: APISession) {
        self.outcome = outcome
        self.reason = reason
        self.session = session
    }
}

/// `GET /v1/session` and the answer to a sign-in: the same whatever the session's mode.
public struct APISession: Sendable, Codable, Equatable {
    public var signedIn: Bool
    public var customerRef: String?
    /// The session id's last four characters, as `…1a2b`.
    public var session: String?
    /// How the daemon hears of nearby alerts: `over the WebSocket channel`, `by polling
    /// every 15 s`, or `not signed in`.
    public var alerts: String

    public init(signedIn: Bool, customerRef: String?, session: String?, alerts: String) {
        self.signedIn = signedIn
        self.customerRef = customerRef
        self.session = session
        self.alerts = alerts
    }
}

// MARK: The lock's actions

/// `POST /v1/lock/unlock`: with the PIN, or one fingerprint scan (`fingerprint: true`,
/// waiting up to `scanTimeoutMs`, default 10000).
public struct APIUnlock: Sendable, Codable, Equatable {
    public var pin: String?
    public var fingerprint: Bool?
    public var scanTimeoutMs: Int?

    public init(pin: String? = nil, fingerprint: Bool? = nil, scanTimeoutMs: Int? = nil) {
        self.pin = pin
        self.fingerprint = fingerprint
        self.scanTimeoutMs = scanTimeoutMs
    }
}

/// What an unlock came to: `unlocked`, `rejected` (a wrong PIN or finger) or `paused`
/// (attempts are paused for `retryAfterSeconds`). A refusal is an answer, not an error.
public struct APIUnlockOutcome: Sendable, Codable, Equatable {
    public var outcome: String
    public var message: String
    public var retryAfterSeconds: Int?

    /// `erased`: that wrong PIN was the last the lock's wipe setting allows, and the kit's
    /// data is erased (the daemon then restarts on the empty state).
    public static let unlocked = "unlocked", rejected = "rejected", paused = "paused", erased = "erased"

    public init(outcome: String, message: String, retryAfterSeconds: Int? = nil) {
        self.outcome = outcome
        self.message = message
        self.retryAfterSeconds = retryAfterSeconds
    }
}

/// `POST /v1/lock/setup`: the first PIN (twice), and optionally a duress PIN, fingerprint
/// unlock and the relock time. Only a lock that is not set up yet; a set-up lock is changed
/// with `POST /v1/lock/settings`.
public struct APILockSetup: Sendable, Codable, Equatable {
    public var pin: String
    public var pinConfirmation: String
    public var duressPin: String?
    /// Unlock with an enrolled finger too (the daemon asks its sensor which are enrolled).
    public var biometrics: Bool?
    /// `immediate`, `1m`, `2m`, `5m` (the default), `10m` or `never`.
    public var relockAfter: String?
    /// Erase the kit's data after this many wrong PINs in a row (5 to 50); absent: never.
    public var wipeAfterFailures: Int?

    public init(pin: String, pinConfirmation: String, duressPin: String? = nil, biometrics: Bool? = nil, relockAfter: String? = nil,
                wipeAfterFailures: Int? = nil) {
        self.wipeAfterFailures = wipeAfterFailures
        self.pin = pin
        self.pinConfirmation = pinConfirmation
        self.duressPin = duressPin
        self.biometrics = biometrics
        self.relockAfter = relockAfter
    }
}

/// `POST /v1/lock/settings`: the current PIN first, then only what changes.
public struct APILockSettings: Sendable, Codable, Equatable {
    public var currentPin: String
    /// `immediate`, `1m`, `2m`, `5m`, `10m` or `never`.
    public var relockAfter: String?
    /// Fingerprint unlock on or off.
    public var biometrics: Bool?
    public var newPin: String?
    public var newPinConfirmation: String?
    public var newDuressPin: String?
    /// Turn the lock off (nothing else may be given with it).
    public var disable: Bool?
    /// Erase the kit's data after this many wrong PINs in a row (5 to 50), or 0 for never.
    public var wipeAfterFailures: Int?

    public init(currentPin: String, relockAfter: String? = nil, biometrics: Bool? = nil, newPin: String? = nil,
                newPinConfirmation: String? = nil, newDuressPin: String? = nil, disable: Bool? = nil, wipeAfterFailures: Int? = nil) {
        self.wipeAfterFailures = wipeAfterFailures
        self.currentPin = currentPin
        self.relockAfter = relockAfter
        self.biometrics = biometrics
        self.newPin = newPin
        self.newPinConfirmation = newPinConfirmation
        self.newDuressPin = newDuressPin
        self.disable = disable
    }
}

/// A flow's answer that is only words for the person at the device.
public struct APIMessage: Sendable, Codable, Equatable {
    public var message: String

    public init(message: String) {
        self.message = message
    }
}

// MARK: Alerts

/// An alert the daemon announced, as its banner says it.
public struct APIAlert: Sendable, Codable, Equatable {
    public var alertId: String
    public var customerRef: String
    /// The banner: "Nearby Duress Alert — alice01, about 120 m away".
    public var text: String
    public var distanceMeters: Double?

    public init(alertId: String, customerRef: String, text: String, distanceMeters: Double?) {
        self.alertId = alertId
        self.customerRef = customerRef
        self.text = text
        self.distanceMeters = distanceMeters
    }
}

/// `GET /v1/alerts`: the tenant's active duress alerts near the kit, as `fieldhal alerts`
/// lists them (the kit's own user's left out).
public struct APIAlerts: Sendable, Codable, Equatable {
    public var alerts: [APIAlert]

    public init(alerts: [APIAlert]) {
        self.alerts = alerts
    }
}

/// `POST /v1/alerts/acknowledge`: in the app (`INAPP`, `alertId` required) or by reading the
/// duressed kit's tag with the kit's NFC chip (`NFC`, within `timeoutMs`, default 30000; an
/// `alertId` given is checked against the tag's).
public struct APIAcknowledge: Sendable, Codable, Equatable {
    public var method: String
    public var alertId: String?
    public var timeoutMs: Int?

    public static let inApp = "INAPP", nfc = "NFC"

    public init(method: String, alertId: String? = nil, timeoutMs: Int? = nil) {
        self.method = method
        self.alertId = alertId
        self.timeoutMs = timeoutMs
    }
}

public struct APIAcknowledged: Sendable, Codable, Equatable {
    public var alertId: String
    public var method: String

    public init(alertId: String, method: String) {
        self.alertId = alertId
        self.method = method
    }
}
