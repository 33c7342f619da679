import FieldHAL
import FieldHALAPI
import FieldHALClient
import FieldHALCommandLine
import FieldHALFlows
import FieldHALLock
import FieldHALServer
import FieldHALSystem
import FieldHALVault
import Foundation
import Transrify
import TransrifyAlertChannel
#if canImport(Glibc)
import Glibc
#endif

// The product's flows composed from a configuration: what the CLI's commands, the daemon
// and the benchmarks ask an `Environment` for (alerts, the lock, the work after a sign-in,
// the API's socket and grants), and the API's values made from the flows' own.

extension Environment {
    /// `[transrify] alert_radius_meters` / `alert_poll_interval_ms`, overridden by the
    /// seed's ALERT_RADIUS_METERS / ALERT_POLL_INTERVAL_MS environment variables (Req 33).
    public func alertSettings() throws -> AlertSettings {
        let section = configuration.settings["transrify"]
        let variables = ProcessInfo.processInfo.environment
        func number(_ variable: String) throws -> Int? {
            guard let text = variables[variable], !text.isEmpty else { return nil }
            guard let value = Int(text) else {
                throw FieldHALError(.invalidArgument, subject: variable, detail: "\"\(text)\" is not a whole number")
            }
            return value
        }
        return try AlertSettings(radiusMeters: try number("ALERT_RADIUS_METERS") ?? section?.integer("alert_radius_meters"),
                                 pollIntervalMilliseconds: try number("ALERT_POLL_INTERVAL_MS") ?? section?.integer("alert_poll_interval_ms"))
    }

    /// Req 35: the alerts channel when `[transrify] alerts_websocket_url` (or the
    /// environment's ALERTS_WEBSOCKET_URL) names one; nil means polling only.
    public func alertChannel(session: SessionRecord? = nil) throws -> AlertChannel? {
        guard let url = try TransrifySettings.alertChannelURL(in: configuration) else { return nil }
        guard let key = try TenantKeyStore(vault: try vault()).load() else {
            throw FieldHALError(.notConfigured, subject: "alerts", detail: "no tenant key", advice: "run fieldhal tenant set-key")
        }
        return AlertChannel(url: url, tenantKey: key, sessionId: session?.sessionId)
    }

    /// The alert watcher of a signed-in kit: its user's own alerts left out, the debounce
    /// record sealed in the state directory (shared by the daemon and `alerts watch`, and
    /// kept across their restarts).
    public func alertWatcher(session: SessionRecord) throws -> AlertWatcher {
        let settings = try alertSettings()
        let own = OwnIdentity(customerRef: session.customerRef, sessionId: session.sessionId, alertIds: Set([session.alertId].compactMap { $0 }))
        return AlertWatcher(client: try transrifyClient(), settings: settings, own: own,
                            debounce: AlertDebounce(window: settings.debounce, store: SealedAlertDebounceStore(vault: try vault())))
    }

    /// The subscription of a signed-in kit: its position asked per alert.
    public func alertSubscription(session: SessionRecord, kit: Kit) throws -> AlertSubscription {
        try alertSubscription(session: session) { [self] in await here(kit) }
    }

    /// `here`: the kit's position for each request (the daemon's comes from its shared receiver).
    public func alertSubscription(session: SessionRecord, here: @escaping @Sendable () async -> Geolocation?) throws -> AlertSubscription {
        AlertSubscription(watcher: try alertWatcher(session: session), channel: try alertChannel(session: session), here: here)
    }

    /// Req 30: NFC features only when enabled (`[transrify] nfc_enabled = true`); off, no
    /// NFC code path is touched.
    public var nfcEnabled: Bool { configuration.settings["transrify"]?.boolean("nfc_enabled") ?? false }

    public func signedInSession() throws -> SessionRecord {
        guard let record = try sessionStore().load() else {
            throw FieldHALError(.notConfigured, subject: "alerts", detail: "not signed in", advice: "run fieldhal signin first")
        }
        return record
    }

    /// The kit's position for alert requests: live within 5 s, else cached, else none.
    public func here(_ kit: Kit) async -> Geolocation? { await (try? kit.location())?.geolocation() }
}

/// Req 27 and 31 composed from the configuration (`AlertAcknowledgement` does the work).
public enum Acknowledgement {
    public typealias Failure = AlertAcknowledgement.Failure

    /// `shared`, `haptics`: the daemon's chip and haptics; without them the kit's are opened here.
    public static func byNFC(_ environment: Environment, expecting expected: String?, timeout: Duration,
                      shared: (any NFCReader)? = nil, haptics: (any HapticsEngine)? = nil) async throws -> String {
        guard environment.nfcEnabled else {
            throw FieldHALError(.notConfigured, subject: "alerts ack --nfc", detail: "NFC is disabled",
                                advice: "set nfc_enabled = true in [transrify]")
        }
        let acknowledgement = try flow(environment, haptics: haptics)
        if let shared { return try await acknowledgement.byNFC(reader: shared, expecting: expected, timeout: timeout) }
        return try await environment.withKit(for: .nfcReader) { kit in
            // The first tag on any reader with the `ack` role; the default's error when none opened.
            let readers = kit.names(of: .nfcReader, withRole: .ack).compactMap { try? kit.nfcReader(named: $0) }
            return try await acknowledgement.byNFC(reader: try FirstTagReader.of(readers) ?? kit.nfcReader(), expecting: expected, timeout: timeout)
        }
    }

    public static func send(_ environment: Environment, alertId: String, method: AckMethod, haptics: (any HapticsEngine)? = nil) async throws {
        try await flow(environment, haptics: haptics).send(alertId: alertId, method: method)
    }

    private static func flow(_ environment: Environment, haptics shared: (any HapticsEngine)? = nil) throws -> AlertAcknowledgement {
        AlertAcknowledgement(client: try environment.transrifyClient(), session: try environment.signedInSession()) {
            if let shared { return .init(shared) }
            let kit = await environment.loadKit(only: [.haptics])
            return .init(try? kit.haptics()) { await kit.close() }
        }
    }
}

extension Environment {
    /// The poll interval in seconds, for log lines.
    public var alertPollSeconds: String {
        let interval = (try? alertSettings().pollInterval) ?? .seconds(15)
        let milliseconds = interval.wholeMilliseconds
        return milliseconds % 1000 == 0 ? "\(milliseconds / 1000)" : String(format: "%.1f", Double(milliseconds) / 1000)
    }
}

extension Environment {
    /// The kit's lock over the vault and the audit log in the state directory. Its wipe
    /// setting's last wrong PIN runs the emergency reset, as `lock reset --yes` does.
    public func lockService() throws -> LockService {
        let (stateDirectory, clock) = (self.stateDirectory, self.clock)
        return LockService(store: VaultLockStore(vault: try vault()), audit: AuditLog(path: stateDirectory.file("audit.log")),
                           now: { clock.now }, erase: { _ = try EmergencyReset.erase(stateDirectory) })
    }
}

extension Environment {
    /// The VIDEO evidence clip `[transrify] evidence_video_*` asks for (10 s of 640x480 at
    /// 30 fps by default). Out-of-range sizes and rates are refused by the camera, and the
    /// refusal is queued as the VIDEO item's error.
    public func evidenceVideo(seconds override: Int? = nil) -> VideoRequest {
        let section = configuration.settings["transrify"]
        let seconds = override ?? section?.integer("evidence_video_seconds") ?? 10
        return VideoRequest(duration: .seconds(max(1, min(seconds, 600))),
                            width: section?.integer("evidence_video_width") ?? 640, height: section?.integer("evidence_video_height") ?? 480,
                            framesPerSecond: section?.integer("evidence_video_fps") ?? 30)
    }
}

extension Environment {
    /// `[transrify] evidence_segment_seconds`: the evidence recordings' segment length (default
    /// 4 s, at most 60); 0 or less: the whole-file pipeline.
    public var evidenceSegment: Duration? {
        let seconds = configuration.settings["transrify"]?.integer("evidence_segment_seconds") ?? 4
        return seconds > 0 ? .seconds(min(seconds, 60)) : nil
    }

    /// How long a detached background run lives (`[transrify] background_run_s`, default 900 s;
    /// with NFC at least `nfc_emulation_s`): exactly this long after every sign-in or unlock,
    /// NORMAL or DURESS, so that `ps` shows the same process for the same time either way.
    public var backgroundRunLifetime: Duration {
        let section = configuration.settings["transrify"]
        var seconds = max(1, section?.integer("background_run_s") ?? 900)
        if nfcEnabled { seconds = max(seconds, section?.integer("nfc_emulation_s") ?? 1800) }
        return .seconds(seconds)
    }

    /// The evidence queue, waited for: a queue that cannot be opened at this moment (a full
    /// disk, a vault being rewritten) is tried again, because skipping the duress capture
    /// would lose the evidence. Nil only after `attempts` failures.
    public func evidenceQueue(attempts: Int = 10) async -> EvidenceQueue? {
        for attempt in 1...attempts {
            if let queue = try? EvidenceQueue(stateDirectory: stateDirectory, vault: try vault()) { return queue }
            if attempt < attempts { try? await Task.sleep(for: .seconds(1)) }
        }
        return nil
    }
}

extension Environment {
    /// The work after a sign-in or an unlock (`AfterAuthenticationWork`), composed from this
    /// configuration: on `shared` devices (the daemon's), or on devices opened for it and
    /// closed after (a detached run).
    public func afterAuthenticationWork(shared: SharedDevices? = nil) throws -> AfterAuthenticationWork {
        let section = configuration.settings["transrify"]
        let audioSeconds = section?.integer("evidence_audio_seconds") ?? 10
        let settings = AfterAuthenticationWork.Settings(
            nfcEnabled: nfcEnabled, tagWindow: .seconds(max(1, section?.integer("nfc_emulation_s") ?? 1800)),
            audio: .seconds(max(1, min(audioSeconds, 600))), video: evidenceVideo(), detachedLifetime: backgroundRunLifetime,
            segment: evidenceSegment)
        let environment = self
        return AfterAuthenticationWork(
            client: try transrifyClient(), sessions: try sessionStore(), device: Environment.deviceInfo, settings: settings,
            queue: { await environment.evidenceQueue() },
            captureDevices: {
                if let shared { return .init(shared.capture) }
                let kit = await environment.loadKit(only: [.camera, .microphone, .location])
                return .init(.init(evidenceOf: kit)) {
                    await kit.close()
                }
            },
            tagEmulator: {
                if let shared { return .init(shared.tag) }
                let kit = await environment.loadKit(only: [.nfcEmulator])
                // The emulator with the duress-tag role (by default the default one), if any.
                let offering = kit.names(of: .nfcEmulator, withRole: .duressTag).first.flatMap { try? kit.nfcEmulator(named: $0) }
                return .init(offering) { await kit.close() }
            },
            takeDuressUses: { try environment.lockService().takeDuressEvents() })
    }
}

/// The devices the daemon holds for everyone, as the work after a sign-in uses them.
public struct SharedDevices: Sendable {
    public var tag: (any NFCTagEmulator)?
    /// What a duress capture records: every evidence camera and microphone, and the location.
    public var capture: AfterAuthenticationWork.CaptureDevices

    public init(tag: (any NFCTagEmulator)?, capture: AfterAuthenticationWork.CaptureDevices) {
        (self.tag, self.capture) = (tag, capture)
    }
}

/// The daemon's hardware API (issue 20), from the configuration's `[api]` section.
extension Environment {
    /// `[api] socket`, else `api.sock` in the state directory.
    public var apiSocketPath: String {
        CommandLineConfiguration.apiSocket(settings: configuration.settings, stateDirectory: stateDirectory)
    }

    /// Who may use the API: checked when the daemon starts and on every reload, so that a
    /// grant naming a user this machine does not have stops the change, not the API.
    public func apiAuthorisation() throws -> APIAuthorisation {
        try APIAuthorisation(settings: configuration.settings["api"], configurationFile: configuration.file,
                             configuredDevices: Set(configuration.allDevices.map { "\($0.capability).\($0.name)" }))
    }

    public func apiIdentity(startedAt: Date) -> APIHost.Identity {
        APIHost.Identity(version: FieldHALVersion.current, pid: getpid(), startedAt: startedAt, configurationFile: configuration.file)
    }
}

extension Environment {
    /// Runs `body` against the daemon's API when a daemon answers on this configuration's
    /// socket: a command that uses a device the daemon holds goes through it, and takes its
    /// turn with everyone else (issue 20). Nil when no daemon answers: the command opens the
    /// device itself. The daemon's refusals and errors are thrown as they came.
    public func throughDaemon<T>(_ body: (FieldHALClient) async throws -> T) async throws -> T? {
        let path = apiSocketPath
        guard try DaemonSocket.exists(path) else { return nil }
        do {
            return try await body(FieldHALClient(socketPath: path))
        } catch let error as FieldHALError where error.kind == .unavailable && error.subject == path {
            return nil  // a socket nobody serves (a daemon killed with SIGKILL)
        }
    }
}

extension APISession {
    public static let signedOut = APISession(signedIn: false, customerRef: nil, session: nil, alerts: "not signed in")

    public init(_ record: SessionRecord, alerts: String) {
        self.init(signedIn: true, customerRef: record.customerRef, session: "…" + record.sessionIdSuffix, alerts: alerts)
    }
}

extension APIEvidenceItem {
    public init(_ item: EvidenceItem) {
        self.init(id: item.id, incidentId: item.incidentId, kind: item.kind.rawValue, contentType: item.contentType,
                  bytes: item.size, createdAt: item.createdAt, phase: item.phase.rawValue, attempts: item.attempts,
                  nextAttemptAt: item.nextAttemptAt, lastError: item.lastError, sha256: item.sha256,
                  uploadingSince: item.uploadingSince, failedKind: item.failedKind?.rawValue)
    }
}

extension APIAlert {
    public init(_ banner: AlertBanner) {
        self.init(alertId: banner.alert.alertId, customerRef: banner.alert.customerRef, text: banner.text,
                  distanceMeters: banner.distanceMeters.map { ($0 * 10).rounded() / 10 })
    }
}

extension APILockStatus {
    public init(_ status: LockStatus, stateDirectory: StateDirectory) {
        let protection = VaultKeyProtection(of: stateDirectory)
        self.init(configured: status.configured, locked: status.locked, biometricsEnabled: status.biometricsEnabled,
                  pinLockedForSeconds: status.pinLockedForSeconds, biometricsLockedForSeconds: status.biometricsLockedForSeconds,
                  offerEmergencyReset: status.offerEmergencyReset, relockAfter: status.relockAfter.rawValue, message: status.message,
                  vaultKey: APIVaultKey(protection: protection.rawValue, offlineAttack: protection.offlineAttack),
                  wipeAfterFailures: status.wipeAfterFailures, failuresBeforeWipe: status.failuresBeforeWipe)
    }
}

extension APIUnlockOutcome {
    public init(_ outcome: UnlockOutcome) {
        switch outcome {
        case .unlocked: self.init(outcome: Self.unlocked, message: "Unlocked.")
        case .rejected(let message): self.init(outcome: Self.rejected, message: message)
        case .lockedOut(let message, let seconds): self.init(outcome: Self.paused, message: message, retryAfterSeconds: seconds)
        case .erased(let message): self.init(outcome: Self.erased, message: message)
        }
    }
}

extension APIProblem {
    /// A flow's error as the API answers it: a FieldHAL error as it is; Transrify's and the
    /// flows' with the words the CLI prints (empty subject) and the kind its exit code comes from.
    public init(flow error: any Error) {
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
public enum EvidenceCaptureError {
    public static let noIncident = FieldHALError(.notConfigured, subject: "evidence", detail: "no incident: not signed in",
                                          advice: "sign in first, or name the incident (--incident; incidentId in the API)")
}
