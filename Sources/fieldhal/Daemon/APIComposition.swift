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

/// The daemon's hardware API (issue 20), from the configuration's `[api]` section.
extension Environment {
    /// `[api] socket`, else `api.sock` in the state directory.
    var apiSocketPath: String {
        CommandLineConfiguration.apiSocket(settings: configuration.settings, stateDirectory: stateDirectory)
    }

    /// Who may use the API: checked when the daemon starts and on every reload, so that a
    /// grant naming a user this machine does not have stops the change, not the API.
    func apiAuthorisation() throws -> APIAuthorisation {
        try APIAuthorisation(settings: configuration.settings["api"], configurationFile: configuration.file)
    }

    func apiIdentity(startedAt: Date) -> APIHost.Identity {
        APIHost.Identity(version: FieldHALVersion.current, pid: getpid(), startedAt: startedAt, configurationFile: configuration.file)
    }
}

extension Environment {
    /// Runs `body` against the daemon's API when a daemon answers on this configuration's
    /// socket: a command that uses a device the daemon holds goes through it, and takes its
    /// turn with everyone else (issue 20). Nil when no daemon answers: the command opens the
    /// device itself. The daemon's refusals and errors are thrown as they came.
    func throughDaemon<T>(_ body: (FieldHALClient) async throws -> T) async throws -> T? {
        let path = apiSocketPath
        guard try DaemonSocket.exists(path) else { return nil }
        do {
            return try await body(FieldHALClient(socketPath: path))
        } catch let error as FieldHALError where error.kind == .unavailable && error.subject == path {
            return nil  // a socket nobody serves (a daemon killed with SIGKILL)
        }
    }
}

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
                  request.newDuressPin == nil else {
                throw FieldHALError(.invalidArgument, subject: "disable", detail: "turning the lock off changes nothing else",
                                    advice: "send disable with currentPin only")
            }
            try await Self.blocking { try lock.disable(currentPIN: SecretBytes(copying: request.currentPin)) }
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
            try lock.changeSettings(currentPIN: SecretBytes(copying: request.currentPin), relockAfter: relockAfter, biometrics: biometrics,
                                    newPIN: request.newPin.map { (pin: SecretBytes(copying: $0), confirmation: SecretBytes(copying: request.newPinConfirmation ?? "")) },
                                    newDuressPIN: request.newDuressPin.map { SecretBytes(copying: $0) })
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
                           biometrics: availability, relockAfter: relockAfter)
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

extension APISession {
    static let signedOut = APISession(signedIn: false, customerRef: nil, session: nil, alerts: "not signed in")

    init(_ record: SessionRecord, alerts: String) {
        self.init(signedIn: true, customerRef: record.customerRef, session: "…" + record.sessionIdSuffix, alerts: alerts)
    }
}

extension APIEvidenceItem {
    init(_ item: EvidenceItem) {
        self.init(id: item.id, incidentId: item.incidentId, kind: item.kind.rawValue, contentType: item.contentType,
                  bytes: item.size, createdAt: item.createdAt, phase: item.phase.rawValue, attempts: item.attempts,
                  nextAttemptAt: item.nextAttemptAt, lastError: item.lastError, sha256: item.sha256,
                  uploadingSince: item.uploadingSince, failedKind: item.failedKind?.rawValue)
    }
}

extension APIAlert {
    init(_ banner: AlertBanner) {
        self.init(alertId: banner.alert.alertId, customerRef: banner.alert.customerRef, text: banner.text,
                  distanceMeters: banner.distanceMeters.map { ($0 * 10).rounded() / 10 })
    }
}

extension APILockStatus {
    init(_ status: LockStatus, stateDirectory: StateDirectory) {
        let protection = VaultKeyProtection(of: stateDirectory)
        self.init(configured: status.configured, locked: status.locked, biometricsEnabled: status.biometricsEnabled,
                  pinLockedForSeconds: status.pinLockedForSeconds, biometricsLockedForSeconds: status.biometricsLockedForSeconds,
                  offerEmergencyReset: status.offerEmergencyReset, relockAfter: status.relockAfter.rawValue, message: status.message,
                  vaultKey: APIVaultKey(protection: protection.rawValue, offlineAttack: protection.offlineAttack))
    }
}

extension APIUnlockOutcome {
    init(_ outcome: UnlockOutcome) {
        switch outcome {
        case .unlocked: self.init(outcome: Self.unlocked, message: "Unlocked.")
        case .rejected(let message): self.init(outcome: Self.rejected, message: message)
        case .lockedOut(let message, let seconds): self.init(outcome: Self.paused, message: message, retryAfterSeconds: seconds)
        }
    }
}

extension APIProblem {
    /// A flow's error as the API answers it: a FieldHAL error as it is; Transrify's and the
    /// flows' with the words the CLI prints (empty subject) and the kind its exit code comes from.
    init(flow error: any Error) {
        switch error {
        case let problem as APIProblem:
            self = problem
        case let error as FieldHALError:
            self.init(error)
        default:
            let failure = CommandFailure(error)
            let rateLimited = (error as? TransrifyError)?.kind == .rateLimited || (error as? SignInFailure)?.kind == .api(.rateLimited)
            let (kind, status): (String, Int) = switch failure.exitCode {
            case 64: (FieldHALError.Kind.invalidArgument.rawValue, 400)
            case 77: (APIProblem.invalidCredentials, 401)
            case 75: rateLimited ? (APIProblem.rateLimited, 429) : (APIProblem.network, 502)
            case 78: (APIProblem.configuration, 503)
            case 69: (APIProblem.suspended, 403)
            default: (APIProblem.failed, 502)
            }
            self.init(kind: kind, subject: "", detail: failure.description, status: status)
        }
    }
}

/// The same words through the API and at the CLI.
enum EvidenceCaptureError {
    static let noIncident = FieldHALError(.notConfigured, subject: "evidence", detail: "no incident: not signed in",
                                          advice: "sign in first, or name the incident (--incident; incidentId in the API)")
}
