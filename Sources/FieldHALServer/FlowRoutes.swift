import FieldHAL
import FieldHALAPI
import Hummingbird

/// The product's flows as the API serves them. The server imports neither the lock nor the
/// flows: the daemon hands in what answers (as it hands in the devices through `APIHost`).
public protocol APIFlows: Sendable {
    func lockStatus() throws -> APILockStatus
    /// Only what the user queued: the silent capture after a duress never shows.
    func evidence() throws -> APIEvidence
}

/// `GET /v1/lock`, `GET /v1/evidence`.
extension APIServer {
    func addFlowRoutes(to v1: RouterGroup<APIRequestContext>) {
        v1.get("lock") { _, context in
            try host.authorise(.lock, try await context.caller(host), doing: "GET /v1/lock")
            return try Self.json(try host.requireFlows().lockStatus())
        }
        v1.get("evidence") { _, context in
            try host.authorise(.evidence, try await context.caller(host), doing: "GET /v1/evidence")
            return try Self.json(try host.requireFlows().evidence())
        }
    }
}

extension APIHost {
    func requireFlows() throws -> any APIFlows {
        guard let flows else {
            throw FieldHALError(.unavailable, subject: "daemon", detail: "this daemon serves no flows", advice: "run fieldhal run")
        }
        return flows
    }
}
