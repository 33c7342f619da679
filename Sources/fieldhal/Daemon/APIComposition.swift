import FieldHAL
import FieldHALAPI
import FieldHALClient
import FieldHALFlows
import FieldHALServer
import Foundation

/// The daemon's hardware API (issue 20), from the configuration's `[api]` section.
extension Environment {
    /// `[api] socket`, else `api.sock` in the state directory.
    var apiSocketPath: String {
        configuration.settings["api"]?.string("socket") ?? stateDirectory.path + "/api.sock"
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
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        do {
            return try await body(FieldHALClient(socketPath: path))
        } catch let error as FieldHALError where error.kind == .unavailable && error.subject == path {
            return nil  // a socket nobody serves (a daemon killed with SIGKILL)
        }
    }
}

/// The API's flow routes, answered from the configuration in force (it changes on reload).
struct DaemonFlows: APIFlows {
    let environment: @Sendable () -> Environment

    func lockStatus() throws -> APILockStatus {
        let status = try environment().lockService().status()
        return APILockStatus(configured: status.configured, locked: status.locked, biometricsEnabled: status.biometricsEnabled,
                             pinLockedForSeconds: status.pinLockedForSeconds, biometricsLockedForSeconds: status.biometricsLockedForSeconds,
                             offerEmergencyReset: status.offerEmergencyReset, relockAfter: status.relockAfter.rawValue,
                             message: status.message)
    }

    func evidence() throws -> APIEvidence {
        let current = environment()
        let queue = try EvidenceQueue(stateDirectory: current.stateDirectory, vault: try current.vault(), exclusive: false)
        return APIEvidence(items: try queue.visibleItems().map { item in
            APIEvidenceItem(id: item.id, incidentId: item.incidentId, kind: item.kind.rawValue, contentType: item.contentType,
                            bytes: item.size, createdAt: item.createdAt, phase: item.phase.rawValue, attempts: item.attempts,
                            nextAttemptAt: item.nextAttemptAt, lastError: item.lastError)
        })
    }
}
