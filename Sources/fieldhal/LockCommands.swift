import ArgumentParser
import FieldHAL
import FieldHALComposition
import FieldHALAPI
import FieldHALCommandLine
import FieldHALFlows
import FieldHALClient
import FieldHALLock
import FieldHALVault
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Reads PINs from the terminal without echo, or one per line from standard input, with
/// read(2) straight into guarded memory (`SecretBytes`): no stdio buffer or `String` holds a
/// copy. Every other line a command reads from standard input beside a PIN must be read
/// the same way (stdio would buffer the PIN's line along with its own).
struct PINReader {
    let fromStandardInput: Bool
    /// What is read, and the flag that reads it from standard input, for the messages.
    var what = "PIN"
    var subject = "lock"
    var flag = "--pin-stdin"

    func read(_ prompt: String) throws -> SecretBytes {
        if fromStandardInput {
            guard let line = try SecretBytes.readLine(from: STDIN_FILENO, maximum: 1024) else {
                throw FieldHALError(.invalidArgument, subject: subject, detail: "standard input ended before every \(what) was given")
            }
            return line
        }
        guard isatty(STDIN_FILENO) == 1 else {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "no terminal to read the \(what) from", advice: "use \(flag)")
        }
        var saved = termios()
        tcgetattr(STDIN_FILENO, &saved)
        var silent = saved
        silent.c_lflag &= ~tcflag_t(ECHO)
        FileHandle.standardError.write(Data(prompt.utf8))
        tcsetattr(STDIN_FILENO, TCSANOW, &silent)
        defer {
            tcsetattr(STDIN_FILENO, TCSANOW, &saved)
            FileHandle.standardError.write(Data("\n".utf8))
        }
        return try SecretBytes.readLine(from: STDIN_FILENO, maximum: 1024) ?? SecretBytes(copying: "")
    }

    /// A line that is not secret (a customer reference), read the same way as the PINs.
    static func plainLine() throws -> String? {
        try SecretBytes.readLine(from: STDIN_FILENO, maximum: 1024)?.unsafeString()
    }
}

struct LockCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lock", abstract: "The kit's lock: PIN, fingerprint and duress PIN.",
        discussion: """
        Wrong PINs pause attempts for 30 s after 3 and 5 minutes after 5 (then 15 minutes, then an \
        hour). Three failed fingerprints pause the sensor for 15 minutes; the PIN still works. \
        Counters survive restarts. Optionally (setup or settings --wipe-after N) the Nth wrong \
        PIN in a row erases the kit's data, as lock reset does.
        """,
        subcommands: [Setup.self, Unlock.self, LockStatusCommand.self, Settings.self, Reset.self])

    struct Setup: FieldHALSubcommand {
        static let configuration = CommandConfiguration(commandName: "setup", abstract: "Set the PIN (4–6 digits), and optionally a duress PIN and the fingerprint.")
        @OptionGroup var global: GlobalOptions
        @Flag(help: "Read PINs one per line from standard input: PIN, confirmation, then the duress PIN if --duress.") var pinStdin = false
        @Flag(help: "Also set a duress PIN: it unlocks like the PIN and silently raises a duress event.") var duress = false
        @Flag(help: "Unlock with an enrolled fingerprint too (checked with the biometrics capability).") var biometrics = false
        @Option(help: "Relock after idle: immediate, 1m, 2m, 5m, 10m or never.") var relock: String = "5m"
        @Option(help: ArgumentHelp("Erase this kit's data after N wrong PINs in a row (5 to 50; default: never). Evidence not yet uploaded is kept.",
                                   valueName: "N")) var wipeAfter: Int?

        func execute(_ environment: Environment) async throws {
            guard let relockAfter = RelockAfter(rawValue: relock) else { throw ValidationError("--relock: immediate, 1m, 2m, 5m, 10m or never") }
            if let wipeAfter, let problem = PINPolicy.problem(wipeAfterFailures: wipeAfter) { throw ValidationError("--wipe-after: \(problem)") }
            let reader = PINReader(fromStandardInput: pinStdin)
            let pin = try reader.read("New PIN: ")
            let confirmation = try reader.read("Confirm PIN: ")
            let duressPIN = duress ? try reader.read("Duress PIN: ") : nil
            // A running daemon sets it up (with its sensor), and its lock events follow at once.
            // The PINs become strings only for that request's JSON.
            if let answer = try await environment.throughDaemon({ daemon in
                try await daemon.setUpLock(APILockSetup(pin: pin.unsafeString(), pinConfirmation: confirmation.unsafeString(),
                                                        duressPin: duressPIN?.unsafeString(), biometrics: biometrics ? true : nil,
                                                        relockAfter: relockAfter.rawValue, wipeAfterFailures: wipeAfter))
            }) {
                print(answer.message)
                return
            }
            var availability: BiometricAvailability?
            if biometrics {
                availability = try await environment.withKit(for: .biometrics) { kit in
                    try await (AnySensor.of(kit.fingerprintSensors()) ?? kit.biometrics()).availability()
                }
            }
            let message = try environment.lockService().setup(pin: pin, confirmation: confirmation, duressPIN: duressPIN,
                                                               biometrics: availability, relockAfter: relockAfter, wipeAfterFailures: wipeAfter)
            print(message)
        }
    }

    struct Unlock: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "unlock",
            abstract: "Unlock: fingerprint first when enabled, then PIN.",
            discussion: "Exits 0 when unlocked, 77 when refused, 75 while attempts are paused.")
        @OptionGroup var global: GlobalOptions
        @Flag(help: "Read the PIN from standard input (kiosks).") var pinStdin = false
        @Flag(help: "Skip the fingerprint and ask for the PIN.") var pinOnly = false
        @Option(help: "Seconds to wait for each fingerprint scan.") var scanTimeout: Double = 10

        func execute(_ environment: Environment) async throws {
            if let outcome = try await environment.throughDaemon({ try await unlock(through: $0) }) {
                print(outcome.message)
                switch outcome.outcome {
                case APIUnlockOutcome.unlocked: return
                case APIUnlockOutcome.paused: throw ExitCode(75)
                default: throw ExitCode(77)
                }
            }
            let lock = try environment.lockService()
            var outcome: UnlockOutcome?
            if !pinOnly, try lock.biometricsAllowed() {
                outcome = try await fingerprint(lock, environment)
            }
            if outcome != .unlocked {
                switch outcome {
                case .rejected(let message)?, .lockedOut(let message, _)?:
                    FileHandle.standardError.write(Data("\(message)\n".utf8))
                default:
                    break
                }
                outcome = try lock.unlock(pin: try PINReader(fromStandardInput: pinStdin).read("PIN: "))
            }
            switch outcome! {
            case .unlocked:
                // The same work after every unlock, whichever PIN (or finger) it was.
                AfterAuthentication.afterUnlock(environment, global)
                print("Unlocked.")
            case .rejected(let message):
                print(message)
                throw ExitCode(77)
            case .lockedOut(let message, _):
                print(message)
                throw ExitCode(75)
            case .erased(let message):
                print(message)
                throw ExitCode(77)
            }
        }

        /// The same steps through the daemon, which does the work after an unlock itself.
        private func unlock(through daemon: FieldHALClient) async throws -> APIUnlockOutcome {
            let wait = try duration(seconds: scanTimeout, option: "--scan-timeout")
            var last: APIUnlockOutcome?
            if !pinOnly {
                while let status = try? await daemon.lock(), status.biometricsEnabled, status.biometricsLockedForSeconds == 0 {
                    if !pinStdin { FileHandle.standardError.write(Data("Touch the fingerprint sensor…\n".utf8)) }
                    guard let outcome = try? await daemon.unlockWithFingerprint(scanTimeout: wait) else { break }
                    last = outcome
                    if outcome.outcome == APIUnlockOutcome.unlocked { return outcome }
                    if outcome.outcome == APIUnlockOutcome.rejected, !pinStdin { FileHandle.standardError.write(Data("\(outcome.message)\n".utf8)) }
                }
            }
            if let last, last.outcome != APIUnlockOutcome.unlocked {
                FileHandle.standardError.write(Data("\(last.message)\n".utf8))
            }
            return try await daemon.unlock(pin: try PINReader(fromStandardInput: pinStdin).read("PIN: ").unsafeString())
        }

        /// Up to three scans; the lock decides when the sensor is paused.
        private func fingerprint(_ lock: LockService, _ environment: Environment) async throws -> UnlockOutcome? {
            let wait = try duration(seconds: scanTimeout, option: "--scan-timeout")
            return try await environment.withKit(for: .biometrics) { kit -> UnlockOutcome? in
                // A finger on any of the kit's sensors.
                guard let sensor = AnySensor.of(kit.fingerprintSensors()) else { return nil }
                var last: UnlockOutcome?
                while try lock.biometricsAllowed() {
                    if !pinStdin { FileHandle.standardError.write(Data("Touch the fingerprint sensor…\n".utf8)) }
                    guard let result = try? await sensor.verify(timeout: wait) else { return last }
                    last = try lock.unlock(biometric: result)
                    if last == .unlocked { return last }
                    if case .rejected(let message)? = last, !pinStdin { FileHandle.standardError.write(Data("\(message)\n".utf8)) }
                }
                return last
            }
        }
    }

    struct Settings: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "settings",
            abstract: "Change the relock time, the fingerprint, the PIN or the duress PIN, or turn the lock off; the current PIN is asked first.")
        @OptionGroup var global: GlobalOptions
        @Flag(help: "Read PINs one per line from standard input: the current PIN, then new PINs in the order asked.") var pinStdin = false
        @Option(help: "Relock after idle: immediate, 1m, 2m, 5m, 10m or never.") var relock: String?
        @Option(help: "Fingerprint unlock: on or off.") var biometrics: String?
        @Flag(help: "Set a new PIN.") var changePin = false
        @Flag(help: "Set a new duress PIN.") var changeDuressPin = false
        @Flag(help: "Turn the lock off.") var disable = false
        @Option(help: ArgumentHelp("Erase this kit's data after N wrong PINs in a row (5 to 50), or off.", valueName: "N|off")) var wipeAfter: String?

        func execute(_ environment: Environment) async throws {
            let relockAfter = try relock.map { value -> RelockAfter in
                guard let parsed = RelockAfter(rawValue: value) else { throw ValidationError("--relock: immediate, 1m, 2m, 5m, 10m or never") }
                return parsed
            }
            if let biometrics, biometrics != "on" && biometrics != "off" { throw ValidationError("--biometrics: on or off") }
            // 0 is "never" in the lock's and the API's words.
            let wipeAfterFailures = try wipeAfter.map { value -> Int in
                if value == "off" { return 0 }
                guard let count = Int(value) else { throw ValidationError("--wipe-after: a number from 5 to 50, or off") }
                if let problem = PINPolicy.problem(wipeAfterFailures: count) { throw ValidationError("--wipe-after: \(problem)") }
                return count
            }
            if disable, wipeAfterFailures != nil { throw ValidationError("--disable turns the lock off and changes nothing else") }
            let reader = PINReader(fromStandardInput: pinStdin)
            let current = try reader.read("Current PIN: ")
            let newPIN = disable || !changePin ? nil : (try reader.read("New PIN: "), try reader.read("Confirm PIN: "))
            let newDuress = !disable && changeDuressPin ? try reader.read("New duress PIN: ") : nil
            // A running daemon changes them and does the work after an unlock itself.
            let biometricsWanted = biometrics.map { $0 == "on" }
            if let answer = try await environment.throughDaemon({ daemon in
                try await daemon.changeLockSettings(disable ? APILockSettings(currentPin: current.unsafeString(), disable: true)
                    : APILockSettings(currentPin: current.unsafeString(), relockAfter: relockAfter?.rawValue, biometrics: biometricsWanted,
                                      newPin: newPIN?.0.unsafeString(), newPinConfirmation: newPIN?.1.unsafeString(),
                                      newDuressPin: newDuress?.unsafeString(), wipeAfterFailures: wipeAfterFailures))
            }) {
                print(answer.message)
                return
            }
            let lock = try environment.lockService()
            if disable {
                try lock.disable(currentPIN: current)
                AfterAuthentication.afterUnlock(environment, global)
                print("The lock is off.")
                return
            }
            var availability: BiometricAvailability?
            if biometrics == "on" {
                availability = try await environment.withKit(for: .biometrics) { kit in
                    try await (AnySensor.of(kit.fingerprintSensors()) ?? kit.biometrics()).availability()
                }
            } else if biometrics == "off" {
                availability = BiometricAvailability(hasSensor: false, enrolledFingers: [])
            }
            try lock.changeSettings(currentPIN: current, relockAfter: relockAfter, biometrics: availability,
                                    newPIN: newPIN.map { (pin: $0.0, confirmation: $0.1) }, newDuressPIN: newDuress,
                                    wipeAfterFailures: wipeAfterFailures)
            AfterAuthentication.afterUnlock(environment, global)
            print("Settings saved.")
        }
    }

    struct Reset: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "reset",
            abstract: "Emergency reset: erase this kit's FieldHAL data (lock, PINs, keys, sessions) and start fresh.",
            discussion: """
            Evidence not yet uploaded is kept: it stays sealed (unreadable on the kit) with the \
            queue's key and the tenant key, and goes on uploading; everything else in the state \
            directory is erased.
            """)
        @OptionGroup var global: GlobalOptions
        @Flag(help: "Confirm: without it, nothing is erased.") var yes = false

        func execute(_ environment: Environment) async throws {
            let directory = environment.stateDirectory.path
            guard yes else {
                print("This erases everything in \(directory) (the lock, PINs, keys, sessions) but evidence not yet uploaded. Run again with --yes to confirm.")
                throw ExitCode(64)
            }
            // Erasing under a running daemon would take its socket and the state it holds open
            // (sessions, the evidence queue's claims) from under it: the daemon goes first.
            if try await environment.throughDaemon({ try await $0.status() }) != nil {
                throw FieldHALError(.busy, subject: directory, detail: "a fieldhal daemon is running on this kit and uses it",
                                    advice: "stop it first (sudo systemctl stop fieldhal), then run fieldhal lock reset --yes again")
            }
            try? environment.lockService().recordEmergencyReset()
            // The same words whatever was kept: silent (duress) evidence is kept like any other.
            _ = try EmergencyReset.erase(environment.stateDirectory)
            print("This kit's FieldHAL data was erased; evidence not yet uploaded stays sealed and keeps uploading. Run fieldhal lock setup to start again.")
        }
    }
}

struct AuditCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "audit", abstract: "The lock's tamper-evident audit log.",
                                                    subcommands: [Verify.self])

    struct Verify: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "verify",
            abstract: "Check every line of the audit log against its hash chain and the head the lock recorded.",
            discussion: "Exits 0 when intact, 65 when a line was edited, removed, reordered or cut off.")
        @OptionGroup var global: GlobalOptions

        func execute(_ environment: Environment) async throws {
            switch try environment.lockService().verifyAudit() {
            case .intact(let entries):
                print("audit log intact: \(entries) entries")
            case .intactWithUnrecordedTail(let entries, let extra):
                print("audit log intact: \(entries) entries (the last \(extra) written just before an interruption)")
            case .broken(let line, let reason):
                throw FieldHALError(.malformedData, subject: "audit log \(environment.stateDirectory.file("audit.log"))",
                                    detail: "line \(line): \(reason)", advice: "the log was altered; keep a copy for investigation")
            }
        }
    }
}

extension LockStatusCommand: FieldHALSubcommand {
    public func run() async throws { try await runReportingFailures() }

    public func execute(_ environment: Environment) async throws {
        // With a daemon, its answer: the state directory may be the service user's alone.
        if let served = try await environment.throughDaemon({ try await $0.lock() }) {
            try emit(served)
            return
        }
        try emit(APILockStatus(try environment.lockService().status(), stateDirectory: environment.stateDirectory))
    }
}
