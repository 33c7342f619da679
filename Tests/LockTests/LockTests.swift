@testable import FieldHAL
@testable import FieldHALLock
import FieldHALSystem
@testable import FieldHALVault
import Foundation
import Synchronization
import Testing

/// A clock the test moves by hand.
final class TestClock: @unchecked Sendable {
    private let lock = NSLock()
    private var current = Date(timeIntervalSince1970: 1_795_000_000)
    var now: Date { lock.withLock { current } }
    func advance(_ seconds: TimeInterval) { lock.withLock { current = current.addingTimeInterval(seconds) } }
}

func temporaryState() -> StateDirectory {
    StateDirectory(path: NSTemporaryDirectory() + "fieldhal-lock-\(UUID().uuidString)")
}

/// Every rule of the lock on the state machine, with a hand-moved clock and the cheapest
/// argon2id cost (the rules do not depend on it).
@Suite("Lock rules")
struct LockRuleTests {
    let clock = TestClock()

    func lock(_ store: any LockStore = MemoryLockStore(), audit: AuditLog? = nil) throws -> LockService {
        let clock = self.clock
        return LockService(store: store, audit: audit, cost: .minimum, now: { clock.now })
    }

    func configured(duress: String? = "2580", biometrics: Bool = false, relock: RelockAfter = .fiveMinutes,
                    store: any LockStore = MemoryLockStore(), audit: AuditLog? = nil) throws -> LockService {
        let service = try lock(store, audit: audit)
        try service.setup(pin: "4821", confirmation: "4821", duressPIN: duress.map { SecretBytes(copying: $0) },
                          biometrics: biometrics ? BiometricAvailability(hasSensor: true, enrolledFingers: [.rightIndex]) : nil,
                          relockAfter: relock)
        return service
    }

    @Test(arguments: [("123456", "Passcode cannot be sequential digits"), ("654321", "Passcode cannot be sequential digits"),
                      ("2345", "Passcode cannot be sequential digits"), ("111111", "Passcode cannot be all the same digit"),
                      ("0000", "Passcode cannot be all the same digit"), ("123", "PIN must be 4 to 6 digits"),
                      ("1234567", "PIN must be 4 to 6 digits"), ("12a4", "PIN must be 4 to 6 digits"), ("１２３４", "PIN must be 4 to 6 digits")])
    func setupRejectsWeakPINsInTheSeedsWords(pin: String, message: String) throws {
        #expect(PINPolicy.problem(with: SecretBytes(copying: pin)) == message)
        #expect(throws: FieldHALError(.invalidArgument, subject: "lock", detail: message)) {
            try lock().setup(pin: SecretBytes(copying: pin), confirmation: SecretBytes(copying: pin))
        }
    }

    @Test func setupNeedsAMatchingConfirmationAndADistinctDuressPIN() throws {
        #expect(throws: FieldHALError(.invalidArgument, subject: "lock", detail: "Passcodes do not match")) {
            try lock().setup(pin: "4821", confirmation: "4812")
        }
        #expect(throws: FieldHALError.self) { try lock().setup(pin: "4821", confirmation: "4821", duressPIN: "4821") }
        #expect(PINPolicy.problem(with: "4821") == nil && PINPolicy.problem(with: "135790") == nil)
    }

    @Test func biometricsWithoutEnrolledPrintsMeansPINOnly() throws {
        let service = try lock()
        let message = try service.setup(pin: "4821", confirmation: "4821", biometrics: BiometricAvailability(hasSensor: true, enrolledFingers: []))
        #expect(message.contains("No fingerprints are enrolled"))
        #expect(try service.status().biometricsEnabled == false)
        #expect(try service.biometricsAllowed() == false)
    }

    @Test func wrongPINsLockOutFor30SecondsAfter3AndFiveMinutesAfter5() throws {
        let service = try configured()
        clock.advance(3600)  // relocked
        #expect(try service.unlock(pin: "1111") == .rejected(LockService.wrongCredential))
        #expect(try service.unlock(pin: "1112") == .rejected(LockService.wrongCredential))
        #expect(try service.unlock(pin: "1113") == .lockedOut("Too many attempts. Please wait 30 seconds and try again.", seconds: 30))
        // During the lockout even the right PIN waits, and is not counted.
        #expect(try service.unlock(pin: "4821") == .lockedOut("Too many attempts. Please wait 30 seconds and try again.", seconds: 30))
        clock.advance(29.5)
        if case .lockedOut(_, let seconds) = try service.unlock(pin: "4821") { #expect(seconds == 1) } else { Issue.record("not locked at 29.5 s") }
        clock.advance(0.5)  // exactly 30 s
        #expect(try service.unlock(pin: "1114") == .rejected(LockService.wrongCredential))
        #expect(try service.unlock(pin: "1115") == .lockedOut("Too many attempts. Please wait 5 minutes and try again.", seconds: 300))
        #expect(try service.status().offerEmergencyReset)
        clock.advance(300)
        #expect(try service.unlock(pin: "4821") == .unlocked)
        #expect(try service.status().offerEmergencyReset == false, "a success clears the failures")
    }

    @Test func lockoutsGrowAndNeverEnd() throws {
        #expect(LockService.lockoutSeconds(afterFailures: 2) == nil)
        #expect(LockService.lockoutSeconds(afterFailures: 4) == nil)
        #expect(LockService.lockoutSeconds(afterFailures: 7) == 900)
        #expect(LockService.lockoutSeconds(afterFailures: 8) == 900)
        #expect(LockService.lockoutSeconds(afterFailures: 10) == 3600)
        #expect(LockService.lockoutSeconds(afterFailures: 500) == 3600)
    }

    @Test func aRestartDuringALockoutKeepsIt() throws {
        let state = temporaryState()
        let store = VaultLockStore(vault: try Vault(stateDirectory: state))
        let service = try configured(store: store)
        clock.advance(3600)
        for pin in ["1111", "1112", "1113"] { _ = try service.unlock(pin: SecretBytes(copying: pin)) }
        // A new process: a new vault handle and service on the same directory.
        let restarted = try lock(VaultLockStore(vault: try Vault(stateDirectory: state)))
        clock.advance(10)
        #expect(try restarted.unlock(pin: "4821") == .lockedOut("Too many attempts. Please wait 20 seconds and try again.", seconds: 20))
        #expect(try restarted.status().pinLockedForSeconds == 20)
    }

    /// The vault keeps moments as a Double of seconds since 1970, which for about half of all
    /// moments reads back a fraction of a microsecond late. A kit read at the very moment of its
    /// setup (a clock that has not moved, like the daemon's manual one) is unlocked all the same.
    @Test func aLockReadAtTheMomentOfItsSetupIsUnlocked() throws {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        func readsBackLate(_ date: Date) throws -> Bool {
            try decoder.decode([Date].self, from: encoder.encode([date]))[0] > date
        }
        var moments: [Double] = []
        var offset = 0.0
        while moments.count < 3 && offset < 1 {
            offset += 0.000_173
            if try readsBackLate(clock.now.addingTimeInterval(offset)) { moments.append(offset) }
        }
        try #require(moments.count == 3, "no moment that reads back late was found")
        var previous = 0.0
        for moment in moments {
            clock.advance(moment - previous)
            previous = moment
            let service = try configured(store: VaultLockStore(vault: try Vault(stateDirectory: temporaryState())))
            #expect(try !service.status().locked, "set up at \(clock.now.timeIntervalSince1970)")
        }
    }

    @Test func threeFailedFingerprintsPauseTheSensor15MinutesWhileThePINWorks() throws {
        let service = try configured(biometrics: true)
        clock.advance(3600)
        #expect(try service.biometricsAllowed())
        #expect(try service.unlock(biometric: .noMatch) == .rejected(LockService.wrongCredential))
        #expect(try service.unlock(biometric: .retry(.swipeTooShort)) == .rejected("That was too quick. Please try the fingerprint again."),
                "a retry request is not a failure")
        #expect(try service.unlock(biometric: .noMatch) == .rejected(LockService.wrongCredential))
        #expect(try service.unlock(biometric: .noMatch) == .lockedOut("Fingerprint is paused for 15 minutes. Use your PIN.", seconds: 900))
        #expect(try service.biometricsAllowed() == false)
        #expect(try service.unlock(biometric: .match) == .lockedOut("Fingerprint is paused for 15 minutes. Use your PIN.", seconds: 900),
                "even a match waits out the pause")
        #expect(try service.status().message.contains("Unlock with your PIN"))
        #expect(try service.unlock(pin: "4821") == .unlocked, "the PIN still works")
        clock.advance(900)
        #expect(try service.biometricsAllowed())
        #expect(try service.unlock(biometric: .match) == .unlocked)
    }

    @Test(arguments: RelockAfter.allCases)
    func relocksAfterTheChosenIdleTime(after: RelockAfter) throws {
        let service = try configured(relock: after)
        guard let interval = after.interval else {
            clock.advance(86_400 * 30)
            #expect(try service.status().locked == false, "Never: only a restart of the kit locks it")
            return
        }
        if interval > 0 {
            clock.advance(interval - 1)
            #expect(try service.status().locked == false)
            try service.noteActivity()
            clock.advance(interval - 1)
            #expect(try service.status().locked == false, "activity restarts the idle time")
            clock.advance(1)
        }
        #expect(try service.status().locked)
    }

    @Test func settingsPINChangeAndDisableNeedTheCurrentPIN() throws {
        let service = try configured()
        #expect(throws: FieldHALError(.permissionDenied, subject: "lock", detail: LockService.wrongCredential)) {
            try service.changeSettings(currentPIN: "9999", relockAfter: .never)
        }
        try service.changeSettings(currentPIN: "4821", relockAfter: .never, newPIN: ("7395", "7395"))
        #expect(try service.status().relockAfter == .never)
        clock.advance(60)
        #expect(try service.unlock(pin: "4821") == .rejected(LockService.wrongCredential))
        #expect(try service.unlock(pin: "7395") == .unlocked)
        try service.disable(currentPIN: "7395")
        #expect(try service.status().configured == false && service.status().locked == false)
    }

    /// Every door to the PIN counts its attempt before the check, durably: a process killed
    /// while argon2id runs (here: a store that dies at the write after the count) has used
    /// the attempt, whether it was settings, disable or an unlock. Before, `lock settings`
    /// counted only after the check, and five killed attempts left the counter at 0.
    @Test func attemptsThroughSettingsAndDisableAreCountedBeforeTheCheck() throws {
        let store = DyingLockStore()
        let service = try configured(store: store)
        for attempt in 1...5 {
            clock.advance(3600)  // past any pause the earlier attempts earned
            store.dieAtSave(store.saves + 2)  // the count is written, then the process "dies"
            #expect(throws: DyingLockStore.Killed.self) {
                if attempt.isMultiple(of: 2) {
                    try service.disable(currentPIN: "9999")
                } else {
                    try service.changeSettings(currentPIN: "9999", relockAfter: .never)
                }
            }
        }
        store.dieAtSave(nil)
        #expect(try store.load()?.failedPINAttempts == 5)
        #expect(try service.status().pinLockedForSeconds > 0, "five counted failures pause the PIN")
        // The right PIN counts too until it is judged, and a success clears the count.
        clock.advance(3600)
        let before = store.saves
        try service.changeSettings(currentPIN: "4821", relockAfter: .never)
        #expect(store.saved[before].failedPINAttempts == 6, "the attempt was written before the PIN was checked")
        #expect(try store.load()?.failedPINAttempts == 0)
    }

    /// A new PIN that breaks the policy is refused the same way whatever the current PIN:
    /// the answer cannot tell a guesser that the current PIN was right, and costs no attempt.
    @Test func aWeakNewPINIsRefusedBeforeTheCurrentPINIsChecked() throws {
        let store = DyingLockStore()
        let service = try configured(store: store)
        let saves = store.saves
        for current in ["4821", "9999"] {
            #expect(throws: FieldHALError(.invalidArgument, subject: "lock", detail: "Passcode cannot be sequential digits")) {
                try service.changeSettings(currentPIN: SecretBytes(copying: current), newPIN: ("123456", "123456"))
            }
        }
        #expect(store.saves == saves, "no attempt was made")
        // A conflict found after the right PIN leaves no failure behind.
        #expect(throws: FieldHALError.self) { try service.changeSettings(currentPIN: "4821", newDuressPIN: "4821") }
        #expect(try store.load()?.failedPINAttempts == 0)
    }

    @Test func settingsNeverMakeThePINAndTheDuressPINTheSame() throws {
        let service = try configured()  // PIN 4821, duress 2580
        #expect(throws: FieldHALError(.invalidArgument, subject: "lock", detail: "the duress PIN must differ from the PIN")) {
            try service.changeSettings(currentPIN: "4821", newDuressPIN: "4821")
        }
        #expect(throws: FieldHALError(.invalidArgument, subject: "lock", detail: "the PIN must differ from the duress PIN")) {
            try service.changeSettings(currentPIN: "4821", newPIN: ("2580", "2580"))
        }
        try service.changeSettings(currentPIN: "4821", newPIN: ("7395", "7395"), newDuressPIN: "1397")
        clock.advance(3600)
        #expect(try service.unlock(pin: "7395") == .unlocked)
        #expect(try service.takeDuressEvents().isEmpty)
        #expect(try service.unlock(pin: "1397") == .unlocked)
        #expect(try service.takeDuressEvents().count == 1)
    }

    @Test func duressPINUnlocksLikeThePINAndIsNotedOnlyInTheSealedState() throws {
        let normalState = temporaryState(), duressState = temporaryState()
        var outcomes: [UnlockOutcome] = []
        var sizes: [Int] = []
        var auditLines: [String] = []
        for (state, pin) in [(normalState, "4821"), (duressState, "2580")] {
            let audit = AuditLog(path: state.file("audit.log"))
            let service = try configured(store: VaultLockStore(vault: try Vault(stateDirectory: state)), audit: audit)
            clock.advance(3600)
            outcomes.append(try service.unlock(pin: SecretBytes(copying: pin)))
            sizes.append(try FileManager.default.attributesOfItem(atPath: state.file("vault/lock-state.sealed"))[.size] as! Int)
            let lines = try String(contentsOfFile: audit.path, encoding: .utf8).split(separator: "\n")
            auditLines.append(String(lines.last!).replacingOccurrences(of: #""hash":"[0-9a-f]+""#, with: "", options: .regularExpression)
                                .replacingOccurrences(of: #""prev":"[0-9a-f]+""#, with: "", options: .regularExpression)
                                .replacingOccurrences(of: #""time":"[^"]+""#, with: "", options: .regularExpression))
            #expect(try service.verifyAudit() == .intact(entries: 2))
        }
        #expect(outcomes[0] == .unlocked && outcomes[1] == .unlocked)
        #expect(sizes[0] == sizes[1], "the sealed state has one size")
        #expect(auditLines[0] == auditLines[1], "the audit line is the same (chain hashes and the test clock's time aside)")
        let flows = try lock(VaultLockStore(vault: try Vault(stateDirectory: duressState)))
        #expect(try flows.takeDuressEvents().count == 1)
        #expect(try flows.takeDuressEvents().isEmpty, "taken once")
        #expect(try lock(VaultLockStore(vault: try Vault(stateDirectory: normalState))).takeDuressEvents().isEmpty)
    }

    /// Under coercion the duress PIN must work wherever the PIN does: changing the settings
    /// and turning the lock off give the same outcome and the same audit line, and only the
    /// sealed state notes the duress use (it was refused and counted as a failure before).
    @Test func theDuressPINWorksForSettingsAndDisableLikeThePIN() throws {
        var auditLines: [[String]] = []
        var events: [Int] = []
        for pin in ["4821", "2580"] {
            let state = temporaryState()
            let audit = AuditLog(path: state.file("audit.log"))
            let service = try configured(store: VaultLockStore(vault: try Vault(stateDirectory: state)), audit: audit)
            try service.changeSettings(currentPIN: SecretBytes(copying: pin), relockAfter: .never)
            #expect(try service.status().relockAfter == .never)
            events.append(try service.takeDuressEvents().count)
            try service.disable(currentPIN: SecretBytes(copying: pin))
            #expect(try service.status().configured == false)
            let lines = try String(contentsOfFile: audit.path, encoding: .utf8).split(separator: "\n").map {
                String($0).replacingOccurrences(of: #""(hash|prev|time)":"[^"]+""#, with: "", options: .regularExpression)
            }
            auditLines.append(lines)
            #expect(try service.verifyAudit() == .intact(entries: 3))
        }
        #expect(auditLines[0] == auditLines[1], "the same audit lines")
        #expect(events == [0, 1], "the duress use is noted for the flows, in the sealed state only")
    }

    /// The decoy that stands in for a missing duress PIN is made at setup and kept: unlocks
    /// on a kit without a duress PIN do the same work (two argon2id checks, no hashing).
    @Test func theDecoyHashIsMadeOnceAndKept() throws {
        let store = MemoryLockStore()
        let service = try configured(duress: nil, store: store)
        let decoy = try #require(try store.load()?.duressPINHash)
        clock.advance(3600)
        #expect(try service.unlock(pin: "4821") == .unlocked)
        #expect(try service.unlock(pin: "9999") == .rejected(LockService.wrongCredential))
        #expect(try store.load()?.duressPINHash == decoy, "the same decoy, not a fresh one per process")
        #expect(try service.takeDuressEvents().isEmpty, "nothing typed matches the decoy")
        // A state from before the decoy was kept gets one at its next check, and keeps it.
        var old = try #require(try store.load())
        old.duressPINHash = nil
        try store.save(old)
        #expect(try service.unlock(pin: "4821") == .unlocked)
        let made = try #require(try store.load()?.duressPINHash)
        #expect(try service.unlock(pin: "4821") == .unlocked)
        #expect(try store.load()?.duressPINHash == made)
    }

    @Test func manyDuressUnlocksKeepTheStateWithinItsPaddedSize() throws {
        let store = VaultLockStore(vault: try Vault(stateDirectory: temporaryState()))
        let service = try configured(store: store)
        for _ in 0..<(LockService.pendingDuressLimit + 20) {
            clock.advance(1)
            #expect(try service.unlock(pin: "2580") == .unlocked)
        }
        #expect(try service.takeDuressEvents().count == LockService.pendingDuressLimit)
    }

    /// The optional wipe (issue 41: "an optional wipe after N failures"): the Nth wrong PIN in
    /// a row erases, the ones before say how many are left, a right PIN starts the count again,
    /// and a wipe the lock cannot carry out is refused when it is set, not when it is due.
    @Test func theNthWrongPINInARowErasesTheKit() throws {
        let erased = Mutex(0)
        let store = MemoryLockStore()
        let clock = self.clock
        let service = LockService(store: store, audit: nil, cost: .minimum, now: { clock.now },
                                  erase: { erased.withLock { $0 += 1 } })
        try service.setup(pin: "4821", confirmation: "4821", wipeAfterFailures: 5)
        #expect(try service.status().wipeAfterFailures == 5)
        // A right PIN in the middle starts the count again.
        for _ in 1...4 { clock.advance(3600); _ = try service.unlock(pin: "1111") }
        clock.advance(3600)
        #expect(try service.unlock(pin: "4821") == .unlocked)
        for attempt in 1...4 {
            clock.advance(3600)
            #expect(try service.unlock(pin: "1111") != .unlocked)
            #expect(try service.status().failuresBeforeWipe == 5 - attempt)
        }
        #expect(try service.status().message.contains("1 more wrong PIN will erase this kit's data"))
        #expect(erased.withLock { $0 } == 0 && !service.erasedTheKit)
        clock.advance(3600)
        #expect(try service.unlock(pin: "1111") == .erased(LockService.erasedMessage))
        #expect(erased.withLock { $0 } == 1 && service.erasedTheKit)
    }

    @Test func theWipeIsCountedThroughSettingsAndSurvivesAKilledLastAttempt() throws {
        let erased = Mutex(0)
        let store = DyingLockStore()
        let clock = self.clock
        let service = LockService(store: store, audit: nil, cost: .minimum, now: { clock.now },
                                  erase: { erased.withLock { $0 += 1 } })
        try service.setup(pin: "4821", confirmation: "4821")
        try service.changeSettings(currentPIN: "4821", wipeAfterFailures: 5)
        for _ in 1...4 {
            clock.advance(3600)
            #expect(throws: FieldHALError.self) { try service.changeSettings(currentPIN: "1111", relockAfter: .never) }
        }
        // The fifth is killed while argon2id runs: counted, not yet erased.
        clock.advance(3600)
        store.dieAtSave(store.saves + 2)
        #expect(throws: DyingLockStore.Killed.self) { try service.disable(currentPIN: "1111") }
        store.dieAtSave(nil)
        #expect(erased.withLock { $0 } == 0)
        // The next check of any PIN, even the right one, carries the wipe out first.
        let error = #expect(throws: FieldHALError.self) { try service.changeSettings(currentPIN: "4821", relockAfter: .never) }
        #expect(error?.detail == LockService.erasedMessage)
        #expect(erased.withLock { $0 } == 1)
    }

    @Test func theWipeSettingIsBoundedAndNeedsALockThatCanErase() throws {
        let service = try configured()
        let cannot = #expect(throws: FieldHALError.self) { try service.changeSettings(currentPIN: "4821", wipeAfterFailures: 10) }
        #expect(cannot?.kind == .unsupported)
        let eraser = LockService(store: MemoryLockStore(), audit: nil, cost: .minimum, erase: {})
        for count in [0, 4, 51] {
            #expect(throws: FieldHALError.self) { try eraser.setup(pin: "4821", confirmation: "4821", wipeAfterFailures: count) }
        }
        try eraser.setup(pin: "4821", confirmation: "4821", wipeAfterFailures: 10)
        try eraser.changeSettings(currentPIN: "4821", wipeAfterFailures: 0)
        #expect(try eraser.status().wipeAfterFailures == nil, "0 turns the wipe off")
    }

    @Test func noSequenceOfWrongInputsUnlocks() throws {
        // Property: whatever wrong PINs and fingerprint failures arrive, in any order and
        // at any times, the lock never reports unlocked.
        var generator = SystemRandomNumberGenerator()
        let service = try configured(biometrics: true)
        clock.advance(3600)
        for _ in 0..<400 {
            switch Int.random(in: 0..<4, using: &generator) {
            case 0:
                var pin = String(Int.random(in: 0...999_999, using: &generator))
                if pin == "4821" || pin == "2580" { pin = "0001" }
                #expect(try service.unlock(pin: SecretBytes(copying: pin)) != .unlocked)
            case 1: #expect(try service.unlock(biometric: .noMatch) != .unlocked)
            case 2: #expect(try service.unlock(biometric: .retry(.retryScan)) != .unlocked)
            default: clock.advance(Double.random(in: 0...400, using: &generator))
            }
            #expect(try service.status().locked)
        }
    }
}

@Suite("Audit log")
struct AuditLogTests {
    func filled(_ count: Int) throws -> (AuditLog, (count: Int, hash: String)) {
        let log = AuditLog(path: NSTemporaryDirectory() + "fieldhal-audit-\(UUID().uuidString).log")
        var head = (count: 0, hash: "")
        for index in 0..<count {
            head = try log.append(event: "unlock", detail: "method=pin result=\(index % 2 == 0 ? "ok" : "failed")",
                                  at: Date(timeIntervalSince1970: 1_795_000_000 + Double(index)), after: head)
        }
        return (log, head)
    }

    func lines(_ log: AuditLog) throws -> [String] {
        try String(contentsOfFile: log.path, encoding: .utf8).split(separator: "\n").map(String.init)
    }

    func write(_ lines: [String], to log: AuditLog) throws {
        try (lines.joined(separator: "\n") + "\n").write(toFile: log.path, atomically: true, encoding: .utf8)
    }

    /// Found by fuzz/run (audit-log): an empty file leaked Foundation's 4 KiB read buffer at
    /// every check; the log is now read with read(2). Bytes that are not UTF-8 are a broken
    /// first line (before: read as an empty log, "lines missing").
    @Test func anEmptyOrBinaryLogGetsAVerdict() throws {
        let log = AuditLog(path: NSTemporaryDirectory() + "fieldhal-audit-\(UUID().uuidString).log")
        try Data().write(to: URL(fileURLWithPath: log.path))
        #expect(log.verify(recordedCount: 0, recordedHead: "") == .intact(entries: 0))
        #expect(log.head() == nil)
        try Data([0xFF, 0xFE, 0x7B, 0x0A]).write(to: URL(fileURLWithPath: log.path))
        #expect(log.verify(recordedCount: 1, recordedHead: "x") == .broken(line: 1, reason: "not an audit entry (edited or cut)"))
    }

    @Test func intactLogVerifies() throws {
        let (log, head) = try filled(6)
        #expect(log.verify(recordedCount: head.count, recordedHead: head.hash) == .intact(entries: 6))
    }

    @Test func editedDeletedReorderedOrTruncatedLinesAreDetected() throws {
        let (log, head) = try filled(6)
        let original = try lines(log)

        try write(original.enumerated().map { $0.offset == 2 ? $0.element.replacingOccurrences(of: "result=ok", with: "result=failed") : $0.element }, to: log)
        #expect(log.verify(recordedCount: head.count, recordedHead: head.hash) == .broken(line: 3, reason: "its content does not match its hash (edited)"))

        try write(original.enumerated().filter { $0.offset != 3 }.map(\.element), to: log)
        if case .broken(let line, _) = log.verify(recordedCount: head.count, recordedHead: head.hash) { #expect(line == 4) } else { Issue.record("deletion missed") }

        var swapped = original
        swapped.swapAt(1, 2)
        try write(swapped, to: log)
        if case .broken(let line, _) = log.verify(recordedCount: head.count, recordedHead: head.hash) { #expect(line == 2) } else { Issue.record("swap missed") }

        try write(Array(original.prefix(4)), to: log)
        #expect(log.verify(recordedCount: head.count, recordedHead: head.hash) == .broken(line: 5, reason: "2 line(s) missing at the end (the lock recorded 6)"))

        try write(Array(original.prefix(5)) + [String(original[5].prefix(20))], to: log)
        #expect(log.verify(recordedCount: head.count, recordedHead: head.hash) == .broken(line: 6, reason: "not an audit entry (edited or cut)"))
    }

    @Test func aLineWrittenButNotYetRecordedIsNotTampering() throws {
        let (log, head) = try filled(3)
        _ = try log.append(event: "unlock", detail: "method=pin result=ok", at: Date(), after: head)
        #expect(log.verify(recordedCount: head.count, recordedHead: head.hash) == .intactWithUnrecordedTail(entries: 4, extra: 1))
    }
}

/// The lock's state cannot be raced, rolled back or deleted away (issue 18).
@Suite("Lock integrity")
struct LockIntegrityTests {
    let clock = TestClock()

    /// A service on a real state directory: the sealed state in the vault and the audit log beside it.
    func service(_ state: StateDirectory) throws -> LockService {
        let clock = self.clock
        return LockService(store: VaultLockStore(vault: try Vault(stateDirectory: state)), audit: AuditLog(path: state.file("audit.log")),
                           cost: .minimum, now: { clock.now })
    }

    func sealedStatePath(_ state: StateDirectory) throws -> String {
        let entries = try Vault(stateDirectory: state).entriesDirectory
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: entries).first { $0.hasPrefix(VaultLockStore.entry) && !$0.hasSuffix(".lock") })
        return entries + "/" + name
    }

    @Test func anEarlierCopyOfTheStatePutBackIsRefused() throws {
        let state = temporaryState()
        let lock = try service(state)
        try lock.setup(pin: "4821", confirmation: "4821")
        let path = try sealedStatePath(state)
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        for pin in ["1111", "1112"] { _ = try lock.unlock(pin: SecretBytes(copying: pin)) }
        try before.write(to: URL(fileURLWithPath: path))  // the counts as they were before two failures
        let error = #expect(throws: FieldHALError.self) { _ = try service(state).unlock(pin: "1113") }
        #expect(error?.kind == .malformedData)
        #expect(error?.description.contains("older than its audit log") == true, "\(error?.description ?? "")")
        #expect(throws: FieldHALError.self) { _ = try service(state).status() }
    }

    @Test func aCopyPutBackOneAttemptLaterIsRefusedToo() throws {
        let state = temporaryState()
        let lock = try service(state)
        try lock.setup(pin: "4821", confirmation: "4821")
        let path = try sealedStatePath(state)
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        _ = try lock.unlock(pin: "1111")
        try before.write(to: URL(fileURLWithPath: path))
        #expect(throws: FieldHALError.self) { _ = try service(state).unlock(pin: "1112") }
    }

    @Test func aMissingStateWithALogThatShowsALockFailsClosed() throws {
        let state = temporaryState()
        let lock = try service(state)
        try lock.setup(pin: "4821", confirmation: "4821")
        try FileManager.default.removeItem(atPath: try sealedStatePath(state))
        let fresh = try service(state)
        let error = #expect(throws: FieldHALError.self) { _ = try fresh.unlock(pin: "0000") }
        #expect(error?.description.contains("the lock's state is missing, but its audit log holds 1 event(s)") == true, "\(error?.description ?? "")")
        #expect(error?.advice?.contains("fieldhal lock reset --yes") == true)
        // Nor can a new PIN be set over it.
        #expect(throws: FieldHALError.self) { try fresh.setup(pin: "1357", confirmation: "1357") }
    }

    @Test func aCrashBetweenTheLogLineAndTheStateIsNotTampering() throws {
        let state = temporaryState()
        let lock = try service(state)
        try lock.setup(pin: "4821", confirmation: "4821")
        // As `record` leaves it when killed after appending: the state marked, the line written.
        let store = VaultLockStore(vault: try Vault(stateDirectory: state))
        var saved = try #require(try store.load())
        saved.auditPending = true
        try store.save(saved)
        _ = try AuditLog(path: state.file("audit.log")).append(event: "unlock", detail: "method=pin result=failed", at: clock.now,
                                                               after: (saved.auditCount, saved.auditHead))
        let restarted = try service(state)
        #expect(try restarted.unlock(pin: "4821") == .unlocked)
        #expect(try restarted.verifyAudit() == .intact(entries: 3), "the crash's line kept, the unlock's after it")
    }

    /// The attempt is saved as failed before the PIN is checked, so a process killed during
    /// argon2id has used its attempt; a right PIN then clears it.
    @Test func anAttemptIsCountedBeforeThePINIsChecked() throws {
        let store = RecordingLockStore()
        let clock = self.clock
        let lock = LockService(store: store, audit: nil, cost: .minimum, now: { clock.now })
        try lock.setup(pin: "4821", confirmation: "4821")
        func savedSince(_ mark: Int) -> [LockState] { store.saved.withLock { Array($0.dropFirst(mark)) } }
        var mark = store.saved.withLock { $0.count }
        #expect(try lock.unlock(pin: "4821") == .unlocked)
        #expect(savedSince(mark).map(\.failedPINAttempts) == [1, 0], "\(savedSince(mark).map(\.failedPINAttempts))")
        mark = store.saved.withLock { $0.count }
        _ = try lock.unlock(pin: "0000")
        _ = try lock.unlock(pin: "0001")
        let third = try lock.unlock(pin: "0002")
        let saves = savedSince(mark)
        #expect(saves.map(\.failedPINAttempts) == [1, 1, 2, 2, 3, 3], "\(saves.map(\.failedPINAttempts))")
        #expect(third == .lockedOut("Too many attempts. Please wait 30 seconds and try again.", seconds: 30))
        // The first save of the third attempt already held the pause.
        #expect(saves.count == 6 && saves[4].pinLockedUntil != nil)
    }

    /// Services in separate threads stand for separate processes (each its own mutex): the
    /// store's file lock serialises them, so no failure is lost.
    @Test func parallelAttemptsLoseNoFailure() async throws {
        let state = temporaryState()
        try service(state).setup(pin: "4821", confirmation: "4821")
        clock.advance(1)
        let pins = ["1111", "1112"]
        try await withThrowingTaskGroup(of: Void.self) { group in
            for pin in pins {
                let lock = try service(state)
                group.addTask { _ = try await offThread { try lock.unlock(pin: SecretBytes(copying: pin)) } }
            }
            try await group.waitForAll()
        }
        let third = try service(state).unlock(pin: "1113")
        #expect(third == .lockedOut("Too many attempts. Please wait 30 seconds and try again.", seconds: 30), "\(third)")
    }
}

/// A store in memory that keeps every state saved, in order.
final class RecordingLockStore: LockStore, @unchecked Sendable {
    let saved = Mutex<[LockState]>([])
    func load() throws -> LockState? { saved.withLock { $0.last } }
    func save(_ state: LockState) throws { saved.withLock { $0.append(state) } }
}

/// Runs blocking work on a thread of its own.
func offThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}

/// A lock store kept in memory whose process "dies" at a chosen save: that save and every
/// later one fail, as if the process were killed while writing it.
final class DyingLockStore: LockStore, @unchecked Sendable {
    struct Killed: Error {}
    private let lock = NSLock()
    private var state: LockState?
    private var dieAt: Int?
    private(set) var saved: [LockState] = []
    var saves: Int { lock.withLock { saved.count } }

    func dieAtSave(_ count: Int?) { lock.withLock { dieAt = count.map { $0 - 1 } } }
    func load() throws -> LockState? { lock.withLock { state } }
    func save(_ state: LockState) throws {
        try lock.withLock {
            if let dieAt, saved.count >= dieAt { throw Killed() }
            self.state = state
            saved.append(state)
        }
    }
}
