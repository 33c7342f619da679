import FieldHAL
import FieldHALClient
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
