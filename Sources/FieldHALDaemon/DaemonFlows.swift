import FieldHAL
import FieldHALComposition
import FieldHALAPI
import FieldHALClient
import FieldHALCommandLine
import FieldHALFlows
import FieldHALLock
import FieldHALServer
import FieldHALVault
import Foundation
import NIOPosix
import Transrify
#if canImport(Glibc)
import Glibc
#endif

/// The API's flow routes, answered from the configuration in force (it changes on reload)
/// with the devices the daemon holds. Errors come out with the words the CLI prints.
struct DaemonFlows: APIFlows {
    unowned let daemon: Daemon

    private var environment: Environment { daemon.current }

    func lockStatus() throws -> APILockStatus {
        APILockStatus(try environment.lockService().status(), stateDirectory: environment.stateDirectory)
    }

    func evidence() throws -> APIEvidence {
        let current = environment
        let queue = try EvidenceQueue(stateDirectory: current.stateDirectory, vault: try current.vault(), exclusive: false)
        return APIEvidence(items: try queue.visibleItems().map(APIEvidenceItem.init))
    }

    func captureEvidence(_ request: APIEvidenceCapture) async throws -> APIEvidenceItem {
        let environment = environment
        guard let kind = EvidenceKind(rawValue: request.kind) else {
            throw FieldHALError(.invalidArgument, subject: "kind", detail: "\"\(request.kind)\" is not PHOTO, AUDIO, VIDEO, TEXT or NEARBY")
        }
        if kind == .text, request.text == nil {
            throw FieldHALError(.invalidArgument, subject: "text", detail: "a TEXT item needs its note in text")
        }
        // The session's id whatever its mode (see `fieldhal evidence capture`).
        let session = try environment.sessionStore().load()
        guard let incidentId = request.incidentId ?? session?.sessionId else {
            throw EvidenceCaptureError.noIncident
        }
        let queue = try EvidenceQueue(stateDirectory: environment.stateDirectory, vault: try environment.vault())
        let host = daemon.api.value
        var capture = EvidenceCapture(queue: queue, camera: try? host?.camera(), microphone: try? host?.microphone(),
                                      location: try? host?.locationProvider())
        capture.audioDuration = .seconds(max(1, min(request.seconds ?? 10, 600)))
        capture.video = environment.evidenceVideo(seconds: request.seconds)
        return APIEvidenceItem(try await capture.capture(kind, incidentId: incidentId, note: request.text ?? ""))
    }

    func flushEvidence() async throws -> APIEvidenceFlush {
        let environment = environment
        let queue = try EvidenceQueue(stateDirectory: environment.stateDirectory, vault: try environment.vault())
        do {
            var uploader = EvidenceUploader(client: try environment.transrifyClient(), queue: queue)
            uploader.includeSilent = false  // the silent items are the background uploads'
            let report = try await uploader.flush(ignoringBackoff: true)
            return APIEvidenceFlush(uploaded: report.uploaded, remaining: try queue.visibleItems().count, errors: report.deferred)
        } catch let error as FieldHALError {
            throw error
        } catch {
            throw APIProblem(flow: error)
        }
    }

    // MARK: Transrify

    func session() throws -> APISession {
        guard let record = try environment.sessionStore().load() else { return .signedOut }
        // Read from the session, not from the subscription, which notices a sign-in or a
        // sign-out up to a second later.
        return APISession(record, alerts: daemon.alertTransport.value)
    }

    func signIn(_ request: APISignIn) async throws -> APISession {
        let environment = environment
        let record: SessionRecord
        do {
            let flow = SignInFlow(client: try environment.transrifyClient(), location: try? daemon.api.value?.locationProvider(),
                                  sessions: try environment.sessionStore(), device: Environment.deviceInfo)
            record = try await flow.signIn(customerRef: request.customerRef, pin: request.pin)
        } catch {
            throw APIProblem(flow: error)
        }
        // The same work after every sign-in; it alone knows the mode.
        daemon.afterAuthentication(.signIn)
        return APISession(record, alerts: "starting")
    }

    func verifySession() async throws -> APISessionCheck {
        let environment = environment
        let outcome: SessionVerifier.Outcome
        do {
            outcome = try await SessionVerifier(client: try environment.transrifyClient(), sessions: try environment.sessionStore()).verify()
        } catch {
            throw APIProblem(flow: error)
        }
        let now = try session()
        switch outcome {
        case .valid: return APISessionCheck(outcome: "valid", session: now)
        case .cleared: return APISessionCheck(outcome: "cleared", session: now)
        case .kept(let reason): return APISessionCheck(outcome: "kept", reason: reason, session: now)
        case .signedOut: return APISessionCheck(outcome: "signedOut", session: now)
        }
    }

    func signOut() throws -> APISession {
        try environment.sessionStore().clear()
        return .signedOut
    }

    // MARK: The lock

    /// Runs the lock's argon2id work (64 MiB and about half a second per PIN checked) on NIO's
    /// blocking-work pool: on the cooperative pool, which has one thread per core, an unlock
    /// would stall every other request and the event stream for that long.
    static func blocking<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await NIOThreadPool.singleton.runIfActive(work)
    }

    func unlock(_ request: APIUnlock) async throws -> APIUnlockOutcome {
        let environment = environment
        let lock = try environment.lockService()
        let outcome: UnlockOutcome
        switch (request.pin, request.fingerprint ?? false) {
        case (let pin?, false):
            outcome = try await Self.blocking { try lock.unlock(pin: SecretBytes(copying: pin)) }
        case (nil, true):
            if try lock.biometricsAllowed() {
                let wait = Duration.milliseconds(request.scanTimeoutMs ?? 10_000)
                let scan = try await daemon.withSensor { try await $0.verify(timeout: wait) }
                outcome = try lock.unlock(biometric: scan)
            } else {
                // Off or paused: the lock says which, and counts nothing for a scan not made.
                outcome = try lock.unlock(biometric: .retry(.retryScan))
            }
        default:
            throw FieldHALError(.invalidArgument, subject: "request body", detail: "give either pin or fingerprint: true")
        }
        if outcome == .unlocked { daemon.afterAuthentication(.unlock) }
        daemon.noteLock()
        if lock.erasedTheKit { daemon.restartAfterErase() }
        return APIUnlockOutcome(outcome)
    }

    func changeLockSettings(_ request: APILockSettings) async throws -> APIMessage {
        let environment = environment
        let lock = try environment.lockService()
        // Whether there is a lock comes first: a request is judged against the lock it changes.
        guard try lock.status().configured else {
            throw FieldHALError(.notConfigured, subject: "lock", detail: "the lock is not set up", advice: "run fieldhal lock setup")
        }
        if request.disable == true {
            guard request.relockAfter == nil, request.biometrics == nil, request.newPin == nil, request.newPinConfirmation == nil,
                  request.newDuressPin == nil, request.wipeAfterFailures == nil else {
                throw FieldHALError(.invalidArgument, subject: "disable", detail: "turning the lock off changes nothing else",
                                    advice: "send disable with currentPin only")
            }
            try await Self.blocking {
                defer { if lock.erasedTheKit { daemon.restartAfterErase() } }
                try lock.disable(currentPIN: SecretBytes(copying: request.currentPin))
            }
            daemon.afterAuthentication(.unlock)
            daemon.noteLock()
            return APIMessage(message: "The lock is off.")
        }
        let relockAfter = try request.relockAfter.map { value -> RelockAfter in
            guard let parsed = RelockAfter(rawValue: value) else {
                throw FieldHALError(.invalidArgument, subject: "relockAfter", detail: "\"\(value)\" is not immediate, 1m, 2m, 5m, 10m or never")
            }
            return parsed
        }
        var availability: BiometricAvailability?
        switch request.biometrics {
        case true?: availability = try await daemon.withSensor { try await $0.availability() }
        case false?: availability = BiometricAvailability(hasSensor: false, enrolledFingers: [])
        case nil: break
        }
        let biometrics = availability
        try await Self.blocking {
            defer { if lock.erasedTheKit { daemon.restartAfterErase() } }
            try lock.changeSettings(currentPIN: SecretBytes(copying: request.currentPin), relockAfter: relockAfter, biometrics: biometrics,
                                    newPIN: request.newPin.map { (pin: SecretBytes(copying: $0), confirmation: SecretBytes(copying: request.newPinConfirmation ?? "")) },
                                    newDuressPIN: request.newDuressPin.map { SecretBytes(copying: $0) },
                                    wipeAfterFailures: request.wipeAfterFailures)
        }
        daemon.afterAuthentication(.unlock)
        daemon.noteLock()
        return APIMessage(message: "Settings saved.")
    }

    func setUpLock(_ request: APILockSetup) async throws -> APIMessage {
        let relockAfter = try request.relockAfter.map { value -> RelockAfter in
            guard let parsed = RelockAfter(rawValue: value) else {
                throw FieldHALError(.invalidArgument, subject: "relockAfter", detail: "\"\(value)\" is not immediate, 1m, 2m, 5m, 10m or never")
            }
            return parsed
        } ?? .fiveMinutes
        // The sensor the daemon holds says which fingers are enrolled, as `lock setup --biometrics` asks its own.
        let availability: BiometricAvailability? = request.biometrics == true ? try await daemon.withSensor { try await $0.availability() } : nil
        let lock = try environment.lockService()
        let message = try await Self.blocking {
            // The PINs arrived as JSON strings: guarded copies from here on (docs/lock.md, the limit).
            try lock.setup(pin: SecretBytes(copying: request.pin), confirmation: SecretBytes(copying: request.pinConfirmation),
                           duressPIN: request.duressPin.map { SecretBytes(copying: $0) },
                           biometrics: availability, relockAfter: relockAfter, wipeAfterFailures: request.wipeAfterFailures)
        }
        daemon.noteLock()
        return APIMessage(message: message)
    }

    // MARK: Alerts

    func alerts() async throws -> APIAlerts {
        let environment = environment
        let watcher = try environment.alertWatcher(session: try environment.signedInSession())
        let here = await (try? daemon.api.value?.locationProvider())?.geolocation()
        do {
            return APIAlerts(alerts: try await watcher.list(here: here).map(APIAlert.init))
        } catch {
            throw APIProblem(flow: error)
        }
    }

    func acknowledge(_ request: APIAcknowledge) async throws -> APIAcknowledged {
        let environment = environment
        let haptics = try? daemon.api.value?.haptics()
        // Signed in first: an acknowledgement is judged against the session it is made in.
        _ = try environment.signedInSession()
        if request.method == APIAcknowledge.inApp, request.alertId == nil {
            throw FieldHALError(.invalidArgument, subject: "alertId", detail: "an INAPP acknowledgement names its alert")
        }
        do {
            if request.method == APIAcknowledge.nfc {
                let id = try await Acknowledgement.byNFC(environment, expecting: request.alertId, timeout: .milliseconds(request.timeoutMs ?? 30_000),
                                                         shared: daemon.sharedReader, haptics: haptics)
                return APIAcknowledged(alertId: id, method: AckMethod.nfc.rawValue)
            }
            let id = request.alertId ?? ""
            try await Acknowledgement.send(environment, alertId: id, method: .inApp, haptics: haptics)
            return APIAcknowledged(alertId: id, method: AckMethod.inApp.rawValue)
        } catch {
            throw APIProblem(flow: error)
        }
    }
}
