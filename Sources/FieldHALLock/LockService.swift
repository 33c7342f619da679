import CSodium
import FieldHAL
import FieldHALVault
import Foundation

/// What an unlock attempt came to. Messages are friendly and never say which credential
/// was wrong; a duress PIN gives exactly what the normal PIN gives.
public enum UnlockOutcome: Sendable, Equatable {
    case unlocked
    case rejected(String)
    /// Attempts are paused; `seconds` until they are accepted again.
    case lockedOut(String, seconds: Int)
    /// The last wrong PIN the lock's wipe setting allows: the kit's data was erased.
    case erased(String)
}

/// Where the lock stands, for `fieldhal lock status` and the daemon.
public struct LockStatus: Sendable, Equatable, Codable {
    public var configured: Bool
    public var locked: Bool
    public var biometricsEnabled: Bool
    /// Seconds until PIN attempts are accepted again; 0 when they are.
    public var pinLockedForSeconds: Int
    /// Seconds until the fingerprint sensor is accepted again; 0 when it is.
    public var biometricsLockedForSeconds: Int
    /// After repeated failures: offer the emergency reset (seed 003 Req 8).
    public var offerEmergencyReset: Bool
    public var relockAfter: RelockAfter
    public var message: String
    /// The wipe setting (nil: never), and how many more wrong PINs erase the kit's data.
    public var wipeAfterFailures: Int?
    public var failuresBeforeWipe: Int?
    /// When the unlocked kit relocks if nothing uses it meanwhile (nil: locked, off, or never).
    public var relocksAt: Date?
}

/// The kit's lock (seeds 002, 003, 004, and 000's duress PIN) as a state machine over a
/// store, an audit log and a clock. Nothing here touches a device: the caller runs the
/// biometric scan and reports its result.
public final class LockService: @unchecked Sendable {
    public static let pinLockoutSchedule: [(failures: Int, seconds: Int)] = [(3, 30), (5, 300), (7, 900), (10, 3600)]
    public static let biometricFailuresBeforeFallback = 3
    public static let biometricLockoutSeconds = 15 * 60
    public static let emergencyResetAfterFailures = 3  // offered from the first lockout on
    /// Duress unlocks kept for the flows until they take them.
    public static let pendingDuressLimit = 64

    public static let wrongCredential = "That didn't work. Please try again."
    public static let notSetUp = "The lock is not set up. Run fieldhal lock setup."
    /// The same words whether evidence was kept or not, as the emergency reset's.
    public static let erasedMessage = "Too many wrong PINs: this kit's FieldHAL data was erased, as its lock was set to do. Evidence not yet uploaded stays sealed and keeps uploading. Run fieldhal lock setup to start again."

    private let store: any LockStore
    private let audit: AuditLog?
    private let now: @Sendable () -> Date
    private let cost: PINHash.Cost
    private let mutex = NSLock()
    /// Erases the kit's data (the emergency reset) when the wipe setting's last wrong PIN
    /// is reached; nil: this lock cannot, and refuses the setting.
    private let erase: (@Sendable () throws -> Void)?
    /// Whether this service erased the kit's data: a daemon must then start afresh, since
    /// what it holds (sessions, keys, the vault it opened) went with it. Under `mutex`.
    private var erasedByUs = false

    public init(store: any LockStore, audit: AuditLog?, cost: PINHash.Cost = .interactive, now: @escaping @Sendable () -> Date = Date.init,
                erase: (@Sendable () throws -> Void)? = nil) {
        self.store = store
        self.audit = audit
        self.cost = cost
        self.now = now
        self.erase = erase
    }

    /// Whether a wrong PIN checked by this service erased the kit's data.
    public var erasedTheKit: Bool { mutex.withLock { erasedByUs } }

    /// A hash nothing typed can match, stored in place of a duress PIN that is not set.
    private func decoy() throws -> String {
        var secret = [UInt8](repeating: 0, count: 32)
        randombytes_buf(&secret, secret.count)
        return try PINHash.hash(try SecretBytes(wiping: &secret), cost: cost)
    }

    /// The hash the second comparison of every check runs against: the duress PIN's, or the
    /// decoy kept in the state. A state from before the decoy was kept gets one now (saved
    /// by the caller's write), once.
    private func secondHash(_ state: inout LockState) throws -> String {
        if let hash = state.duressPINHash { return hash }
        let made = try decoy()
        state.duressPINHash = made
        return made
    }

    /// Both comparisons, always, so the time taken says nothing about which PIN it was or
    /// whether a duress PIN exists. A duress match is kept, sealed, for the flows.
    private func verifyEither(_ pin: SecretBytes, _ state: inout LockState, at date: Date) throws -> Bool {
        guard let pinHash = state.pinHash else { return false }
        let normal = PINHash.verify(pin, against: pinHash)
        let duress = PINHash.verify(pin, against: try secondHash(&state))
        if duress {
            // Bounded, so the padded state never outgrows its size: the newest count.
            state.pendingDuressEvents = Array((state.pendingDuressEvents + [date]).suffix(Self.pendingDuressLimit))
        }
        return normal || duress
    }

    // MARK: - Setup and settings

    /// Sets the lock up. `biometrics`: the sensor's availability when the user wants it;
    /// without enrolled prints the lock is PIN only (seed 003 Req 2.5). Returns a message.
    @discardableResult
    public func setup(pin: SecretBytes, confirmation: SecretBytes, duressPIN: SecretBytes? = nil,
                      biometrics: BiometricAvailability? = nil, relockAfter: RelockAfter = .fiveMinutes,
                      wipeAfterFailures: Int? = nil) throws -> String {
        try serialised {
            var state = try loadState() ?? LockState()
            guard !state.isConfigured else {
                throw FieldHALError(.invalidArgument, subject: "lock", detail: "the lock is already set up",
                                    advice: "change it with fieldhal lock settings, or start over with fieldhal lock reset")
            }
            try Self.check(pin, confirmation)
            if let wipeAfterFailures { try checkWipe(wipeAfterFailures) }
            if let duressPIN {
                if let problem = PINPolicy.problem(with: duressPIN) { throw FieldHALError(.invalidArgument, subject: "lock", detail: "duress PIN: \(problem)") }
                guard !duressPIN.isEqual(to: pin) else { throw FieldHALError(.invalidArgument, subject: "lock", detail: "the duress PIN must differ from the PIN") }
            }
            state.pinHash = try PINHash.hash(pin, cost: cost)
            state.duressPINHash = try duressPIN.map { try PINHash.hash($0, cost: cost) } ?? decoy()
            state.biometricsEnabled = biometrics?.isEnrolled ?? false
            state.relockAfter = relockAfter
            state.wipeAfterFailures = wipeAfterFailures
            markUnlocked(&state, at: now())
            try record(&state, "setup", biometrics: state.biometricsEnabled)
            if biometrics != nil && !state.biometricsEnabled {
                return "Lock set up with a PIN. No fingerprints are enrolled, so the fingerprint sensor is not used."
            }
            return state.biometricsEnabled ? "Lock set up with fingerprint and PIN." : "Lock set up with a PIN."
        }
    }

    /// Changes settings; the current PIN (a fresh unlock) is required (seed 003 Req 4).
    ///
    /// The new PINs are checked against the policy before the current PIN is: an answer that
    /// came only for the right current PIN ("cannot be sequential") would let a guesser tell
    /// a right PIN from a wrong one without the attempt being judged as an unlock.
    /// `wipeAfterFailures`: erase the kit's data after that many wrong PINs, 0 for never.
    public func changeSettings(currentPIN: SecretBytes, relockAfter: RelockAfter? = nil, biometrics: BiometricAvailability? = nil,
                               newPIN: (pin: SecretBytes, confirmation: SecretBytes)? = nil, newDuressPIN: SecretBytes? = nil,
                               wipeAfterFailures: Int? = nil) throws {
        try serialised {
            var state = try requireConfigured()
            if let newPIN { try Self.check(newPIN.pin, newPIN.confirmation) }
            if let wipeAfterFailures, wipeAfterFailures != 0 { try checkWipe(wipeAfterFailures) }
            if let newDuressPIN, let problem = PINPolicy.problem(with: newDuressPIN) {
                throw FieldHALError(.invalidArgument, subject: "lock", detail: "duress PIN: \(problem)")
            }
            try requireFreshUnlock(currentPIN, &state)
            do {
                // A PIN equal to the duress PIN would raise a duress event on every unlock.
                if let newPIN, let duressHash = state.duressPINHash, newDuressPIN == nil, PINHash.verify(newPIN.pin, against: duressHash) {
                    throw FieldHALError(.invalidArgument, subject: "lock", detail: "the PIN must differ from the duress PIN")
                }
                if let newDuressPIN {
                    let samePIN = if let newPIN { newDuressPIN.isEqual(to: newPIN.pin) } else { state.pinHash.map { PINHash.verify(newDuressPIN, against: $0) } ?? false }
                    if samePIN { throw FieldHALError(.invalidArgument, subject: "lock", detail: "the duress PIN must differ from the PIN") }
                }
            } catch {
                // The current PIN was right: the attempt counted before the check is taken back.
                try store.save(state)
                throw error
            }
            if let relockAfter { state.relockAfter = relockAfter }
            if let biometrics { state.biometricsEnabled = biometrics.isEnrolled }
            if let newPIN { state.pinHash = try PINHash.hash(newPIN.pin, cost: cost) }
            if let newDuressPIN { state.duressPINHash = try PINHash.hash(newDuressPIN, cost: cost) }
            if let wipeAfterFailures { state.wipeAfterFailures = wipeAfterFailures == 0 ? nil : wipeAfterFailures }
            try record(&state, "settings-changed", biometrics: state.biometricsEnabled)
        }
    }

    /// Turns the lock off; the current PIN is required.
    public func disable(currentPIN: SecretBytes) throws {
        try serialised {
            var state = try requireConfigured()
            try requireFreshUnlock(currentPIN, &state)
            let head = (state.auditCount, state.auditHead)
            let duressUses = state.pendingDuressEvents  // a duress PIN turned it off: the flows still hear of it
            state = LockState()
            (state.auditCount, state.auditHead) = head
            state.pendingDuressEvents = duressUses
            try record(&state, "disabled", biometrics: false)
        }
    }

    // MARK: - Unlocking

    public func status() throws -> LockStatus {
        try serialised {
            let state = try loadState() ?? LockState()
            return status(of: state, at: now())
        }
    }

    /// Whether the fingerprint may be offered now (enabled and not paused).
    public func biometricsAllowed() throws -> Bool {
        try serialised {
            let state = try loadState() ?? LockState()
            return state.biometricsEnabled && remaining(state.biometricsLockedUntil, at: now()) == 0
        }
    }

    /// Checks a PIN. The duress PIN unlocks exactly as the PIN does — same outcome, same
    /// work, same audit line, a state file of the same size — and is noted only inside the
    /// sealed state, for the flows.
    public func unlock(pin: SecretBytes) throws -> UnlockOutcome {
        try serialised {
            var state = try loadState() ?? LockState()
            guard state.isConfigured else { return .rejected(Self.notSetUp) }
            // The last allowed attempt was counted but its process killed before it erased.
            if wipeIsDue(state) { return .erased(try wipe(&state)) }
            let at = now()
            let wait = remaining(state.pinLockedUntil, at: at)
            if wait > 0 { return .lockedOut(Self.lockedOutMessage(wait), seconds: wait) }
            // The attempt is saved as failed before the PIN is checked: a process killed during
            // the half second of argon2id has used its attempt. Saved for every attempt, right
            // or wrong, normal or duress PIN: the file changes the same way each time.
            var failed = state
            Self.countFailure(&failed, at: at)
            try store.save(failed)
            if try verifyEither(pin, &state, at: at) {
                markUnlocked(&state, at: at)
                try record(&state, "unlock", detail: "method=pin result=ok")
                return .unlocked
            }
            var outcome = UnlockOutcome.rejected(Self.wrongCredential)
            Self.countFailure(&state, at: at)
            if wipeIsDue(state) { return .erased(try wipe(&state)) }
            if let seconds = Self.lockoutSeconds(afterFailures: state.failedPINAttempts) {
                outcome = .lockedOut(Self.lockedOutMessage(seconds), seconds: seconds)
                try record(&state, "lockout", detail: "method=pin failures=\(state.failedPINAttempts) seconds=\(seconds)")
            } else {
                try record(&state, "unlock", detail: "method=pin result=failed")
            }
            return outcome
        }
    }

    /// Reports a fingerprint scan the caller ran. Three failures pause the sensor for 15
    /// minutes (seed 004) while the PIN keeps working; a retry request is not a failure.
    public func unlock(biometric result: BiometricResult) throws -> UnlockOutcome {
        try serialised {
            var state = try loadState() ?? LockState()
            guard state.isConfigured else { return .rejected(Self.notSetUp) }
            let at = now()
            guard state.biometricsEnabled else { return .rejected("Fingerprint unlock is off. Use your PIN.") }
            let wait = remaining(state.biometricsLockedUntil, at: at)
            if wait > 0 { return .lockedOut("Fingerprint is paused for \(Self.describe(wait)). Use your PIN.", seconds: wait) }
            switch result {
            case .match:
                state.failedBiometricAttempts = 0
                markUnlocked(&state, at: at)
                try record(&state, "unlock", detail: "method=fingerprint result=ok")
                return .unlocked
            case .retry(let reason):
                return .rejected(Self.retryMessage(reason))
            case .noMatch:
                state.failedBiometricAttempts += 1
                if state.failedBiometricAttempts >= Self.biometricFailuresBeforeFallback {
                    state.failedBiometricAttempts = 0
                    state.biometricsLockedUntil = at.addingTimeInterval(TimeInterval(Self.biometricLockoutSeconds))
                    try record(&state, "lockout", detail: "method=fingerprint seconds=\(Self.biometricLockoutSeconds)")
                    return .lockedOut("Fingerprint is paused for 15 minutes. Use your PIN.", seconds: Self.biometricLockoutSeconds)
                }
                try record(&state, "unlock", detail: "method=fingerprint result=failed")
                return .rejected(Self.wrongCredential)
            }
        }
    }

    /// Marks use of the kit, which keeps it unlocked for the relock interval.
    public func noteActivity() throws {
        try serialised {
            var state = try requireConfigured()
            guard !isLocked(state, at: now()) else { return }
            state.lastActivity = now()
            try store.save(state)
        }
    }

    /// Duress unlocks since the flows last asked; they are removed as they are taken. The
    /// state is written whether or not there were any (when there is a state), so that the
    /// file changes the same way after every unlock, whichever PIN it was.
    public func takeDuressEvents() throws -> [Date] {
        try serialised {
            guard var state = try loadState() else { return [] }
            let events = state.pendingDuressEvents
            state.pendingDuressEvents = []
            try store.save(state)
            return events
        }
    }

    /// Records the emergency reset in the audit log just before the caller wipes the state
    /// directory (seed 003 Req 8); the log goes with it.
    public func recordEmergencyReset() throws {
        try serialised {
            var state = try store.load() ?? LockState()
            try record(&state, "emergency-reset", detail: "")
        }
    }

    public func verifyAudit() throws -> AuditLog.Verdict {
        guard let audit else { return .intact(entries: 0) }
        let state = try serialised { try store.load() ?? LockState() }
        return audit.verify(recordedCount: state.auditCount, recordedHead: state.auditHead)
    }

    // MARK: - Rules

    /// One more failed PIN attempt, and the pause it earns.
    static func countFailure(_ state: inout LockState, at date: Date) {
        state.failedPINAttempts += 1
        if let seconds = lockoutSeconds(afterFailures: state.failedPINAttempts) {
            state.pinLockedUntil = date.addingTimeInterval(TimeInterval(seconds))
        }
    }

    public static func lockoutSeconds(afterFailures failures: Int) -> Int? {
        if failures >= 10 { return 3600 }
        return pinLockoutSchedule.first { $0.failures == failures }?.seconds ?? (failures > 7 ? 900 : nil)
    }

    static func check(_ pin: SecretBytes, _ confirmation: SecretBytes) throws {
        if let problem = PINPolicy.problem(with: pin) { throw FieldHALError(.invalidArgument, subject: "lock", detail: problem) }
        guard pin.isEqual(to: confirmation) else { throw FieldHALError(.invalidArgument, subject: "lock", detail: PINPolicy.mismatch) }
    }

    static func lockedOutMessage(_ seconds: Int) -> String {
        "Too many attempts. Please wait \(describe(seconds)) and try again."
    }

    static func describe(_ seconds: Int) -> String {
        if seconds < 60 { return "\(seconds) second\(seconds == 1 ? "" : "s")" }
        let minutes = (seconds + 59) / 60
        return "\(minutes) minute\(minutes == 1 ? "" : "s")"
    }

    static func retryMessage(_ reason: BiometricRetryReason) -> String {
        switch reason {
        case .retryScan: "Please try the fingerprint again."
        case .swipeTooShort: "That was too quick. Please try the fingerprint again."
        case .fingerNotCentered: "Please centre your finger on the sensor and try again."
        case .removeAndRetry: "Please lift your finger and try again."
        }
    }

    private func status(of state: LockState, at date: Date) -> LockStatus {
        let pinWait = remaining(state.pinLockedUntil, at: date)
        let bioWait = remaining(state.biometricsLockedUntil, at: date)
        let locked = isLocked(state, at: date)
        let offerReset = state.failedPINAttempts >= Self.emergencyResetAfterFailures
        var message: String
        if !state.isConfigured {
            message = "The lock is off."
        } else if !locked {
            message = "Unlocked."
        } else if pinWait > 0 {
            message = Self.lockedOutMessage(pinWait)
        } else {
            message = "Locked. Unlock with your \(state.biometricsEnabled && bioWait == 0 ? "fingerprint or PIN" : "PIN") to continue."
        }
        let beforeWipe = state.wipeAfterFailures.map { max(0, $0 - state.failedPINAttempts) }
        if let beforeWipe, locked, state.failedPINAttempts > 0 {
            message += " \(beforeWipe) more wrong PIN\(beforeWipe == 1 ? "" : "s") will erase this kit's data."
        }
        if offerReset && locked {
            message += " Forgot your PIN? fieldhal lock reset erases this kit's data and starts fresh."
        }
        return LockStatus(configured: state.isConfigured, locked: locked, biometricsEnabled: state.biometricsEnabled,
                          pinLockedForSeconds: pinWait, biometricsLockedForSeconds: bioWait, offerEmergencyReset: offerReset && locked,
                          relockAfter: state.relockAfter, message: message,
                          wipeAfterFailures: state.wipeAfterFailures, failuresBeforeWipe: beforeWipe,
                          relocksAt: locked ? nil : state.relockAfter.interval.flatMap { interval in state.lastActivity.map { $0 + interval } })
    }

    private func isLocked(_ state: LockState, at date: Date) -> Bool {
        guard state.isConfigured else { return false }
        // A clock set back before the unlock locks the kit. The vault keeps moments as seconds
        // since 1970 in a Double, which reads back up to about 0.24 µs late: a clock that has
        // not moved since the unlock must not read as one set back, hence the allowance.
        guard let unlockedAt = state.unlockedAt, let activity = state.lastActivity,
              date >= unlockedAt - Self.storedMomentSlack else { return true }
        guard let interval = state.relockAfter.interval else { return false }
        return date.timeIntervalSince(activity) >= interval
    }

    /// How much later than written a moment may read back from the vault (10 µs, far above
    /// the Double's rounding of today's dates, far below any clock set back on purpose).
    static let storedMomentSlack: TimeInterval = 10e-6

    private func remaining(_ deadline: Date?, at date: Date) -> Int {
        guard let deadline else { return 0 }
        return max(0, Int(deadline.timeIntervalSince(date).rounded(.up)))
    }

    /// What an administrator does when the lock's state cannot be trusted.
    static let untrustedAdvice = "the kit may have been tampered with: keep a copy of the state directory for investigation; an administrator can start over with fieldhal lock reset --yes"

    /// The stored state, checked against the audit log before anything trusts it. Fails
    /// closed: a state file that is missing while the log shows a lock, or older than the
    /// log (an earlier copy put back, which would reset the failure counts), or a broken
    /// log, refuses every lock operation until an emergency reset. One unrecorded line at
    /// the end of a state marked `auditPending` is a crash between writing the line and
    /// saving the state, not tampering.
    private func loadState() throws -> LockState? {
        let state = try store.load()
        guard let audit else { return state }
        switch audit.verify(recordedCount: state?.auditCount ?? 0, recordedHead: state?.auditHead ?? "") {
        case .intact:
            return state
        case .intactWithUnrecordedTail(_, let extra) where extra == 1 && state?.auditPending == true:
            // The line the crash kept from being recorded becomes the head (saved with the next change).
            guard var adopted = state, let head = audit.head() else { return state }
            adopted.auditCount = head.count
            adopted.auditHead = head.hash
            adopted.auditPending = nil
            return adopted
        case .intactWithUnrecordedTail(let entries, _):
            let detail = state == nil
                ? "the lock's state is missing, but its audit log holds \(entries) event(s): the lock was set up"
                : "the lock's state is older than its audit log (it records \(state?.auditCount ?? 0) events, the log holds \(entries)): an earlier copy was put back"
            throw FieldHALError(.malformedData, subject: "lock", detail: detail, advice: Self.untrustedAdvice)
        case .broken(let line, let reason):
            throw FieldHALError(.malformedData, subject: "lock", detail: "the audit log is broken at line \(line): \(reason)", advice: Self.untrustedAdvice)
        }
    }

    /// One lock operation at a time, in this process (the mutex) and across processes (the store).
    private func serialised<T>(_ body: () throws -> T) throws -> T {
        try mutex.withLock { try store.exclusively(body) }
    }

    private func requireConfigured() throws -> LockState {
        guard let state = try loadState(), state.isConfigured else {
            // The kit's state, not the caller's words: EX_UNAVAILABLE at the CLI, 503 through the API.
            throw FieldHALError(.notConfigured, subject: "lock", detail: "the lock is not set up", advice: "run fieldhal lock setup")
        }
        return state
    }

    /// The current PIN, checked under the same lockout rules as an unlock. The duress PIN is
    /// the PIN here too (same outcome, same work, same audit line), and is noted for the flows.
    private func requireFreshUnlock(_ pin: SecretBytes, _ state: inout LockState) throws {
        if wipeIsDue(state) { throw FieldHALError(.permissionDenied, subject: "lock", detail: try wipe(&state)) }
        let at = now()
        let wait = remaining(state.pinLockedUntil, at: at)
        if wait > 0 { throw FieldHALError(.permissionDenied, subject: "lock", detail: Self.lockedOutMessage(wait)) }
        // Counted as failed, durably, before the PIN is checked, as an unlock is: a process
        // killed during argon2id has used its attempt (settings, disable and change are doors
        // to the same PIN and must cost a guesser as much).
        var failed = state
        Self.countFailure(&failed, at: at)
        try store.save(failed)
        guard try verifyEither(pin, &state, at: at) else {
            Self.countFailure(&state, at: at)
            if wipeIsDue(state) { throw FieldHALError(.permissionDenied, subject: "lock", detail: try wipe(&state)) }
            try record(&state, "unlock", detail: "method=pin result=failed")
            throw FieldHALError(.permissionDenied, subject: "lock", detail: Self.wrongCredential)
        }
        markUnlocked(&state, at: at)
    }

    // MARK: - The wipe

    private func checkWipe(_ count: Int) throws {
        if let problem = PINPolicy.problem(wipeAfterFailures: count) {
            throw FieldHALError(.invalidArgument, subject: "lock", detail: problem)
        }
        guard erase != nil else {
            throw FieldHALError(.unsupported, subject: "lock", detail: "this lock cannot erase the kit's data",
                                advice: "set the wipe with fieldhal lock settings --wipe-after")
        }
    }

    private func wipeIsDue(_ state: LockState) -> Bool {
        guard let limit = state.wipeAfterFailures else { return false }
        return state.failedPINAttempts >= limit
    }

    /// The wipe setting's last wrong PIN: recorded in the audit log, then the emergency reset
    /// (which takes the log, the state and every secret but the evidence still to upload).
    /// A process killed in between leaves the count at the limit, and the next check erases.
    private func wipe(_ state: inout LockState) throws -> String {
        guard let erase else { return Self.wrongCredential }
        try record(&state, "wipe", detail: "failures=\(state.failedPINAttempts)")
        try erase()
        erasedByUs = true
        return Self.erasedMessage
    }

    /// A successful unlock: failures and any PIN pause are cleared, the idle time restarts.
    private func markUnlocked(_ state: inout LockState, at date: Date) {
        state.failedPINAttempts = 0
        state.pinLockedUntil = nil
        state.unlockedAt = date
        state.lastActivity = date
    }

    /// Appends to the audit log and saves the state with the new head.
    private func record(_ state: inout LockState, _ event: String, detail: String) throws {
        if let audit {
            state.auditPending = true
            try store.save(state)
            let head = try audit.append(event: event, detail: detail, at: now(), after: (state.auditCount, state.auditHead))
            state.auditCount = head.count
            state.auditHead = head.hash
            state.auditPending = nil
        }
        try store.save(state)
    }

    private func record(_ state: inout LockState, _ event: String, biometrics: Bool) throws {
        try record(&state, event, detail: "biometrics=\(biometrics ? "on" : "off") relock=\(state.relockAfter.rawValue)")
    }
}
