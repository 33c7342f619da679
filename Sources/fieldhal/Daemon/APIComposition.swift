import FieldHAL
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
