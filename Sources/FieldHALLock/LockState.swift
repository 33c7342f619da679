import Foundation

/// How long the kit stays unlocked without use (seed 003 Req 5).
public enum RelockAfter: String, Sendable, Codable, CaseIterable {
    case immediate, oneMinute = "1m", twoMinutes = "2m", fiveMinutes = "5m", tenMinutes = "10m", never

    public var interval: TimeInterval? {
        switch self {
        case .immediate: 0
        case .oneMinute: 60
        case .twoMinutes: 120
        case .fiveMinutes: 300
        case .tenMinutes: 600
        case .never: nil
        }
    }
}

/// Everything the lock keeps between runs. Stored sealed in the vault and padded to one
/// size, so the file a normal unlock writes and the one a duress unlock writes cannot be
/// told apart, by content or by length.
public struct LockState: Sendable, Codable, Equatable {
    public var pinHash: String?
    /// The duress PIN's hash; when no duress PIN is set, a decoy's (random bytes nobody
    /// knows), made once at setup and kept, so every check verifies two hashes of the same
    /// cost whether or not a duress PIN exists. Only `LockService` knows which it is:
    /// nothing that matches the decoy can be typed.
    public var duressPINHash: String?
    public var biometricsEnabled = false
    public var relockAfter: RelockAfter = .fiveMinutes

    public var failedPINAttempts = 0
    /// Erase the kit's data after this many wrong PINs in a row (nil: never). Kept sealed
    /// with the counters, so only the current PIN changes it and a copied-back state cannot
    /// hide it (the audit log's head catches a rollback).
    public var wipeAfterFailures: Int?
    public var pinLockedUntil: Date?
    public var failedBiometricAttempts = 0
    public var biometricsLockedUntil: Date?

    public var unlockedAt: Date?
    public var lastActivity: Date?

    /// Duress unlocks not yet taken by the flows (seed 000): kept only here, sealed.
    public var pendingDuressEvents: [Date] = []
    /// The audit log's head, so that cutting lines off its end is detected.
    public var auditCount = 0
    public var auditHead = ""
    /// Saved as true just before a line is appended to the audit log, cleared with the head
    /// after it: one unrecorded line is then a crash in between, while a state without the
    /// mark behind the log is an earlier copy put back (which would reset the counts).
    public var auditPending: Bool?

    public init() {}

    public var isConfigured: Bool { pinHash != nil }
}
