import FieldHAL
import FieldHALAPI
import Hummingbird

/// The product's flows as the API serves them. The server imports neither the lock nor the
/// flows: the daemon hands in what answers (as it hands in the devices through `APIHost`).
public protocol APIFlows: Sendable {
    func lockStatus() throws -> APILockStatus
    /// Only what the user queued: the silent capture after a duress never shows.
    func evidence() throws -> APIEvidence
    func session() throws -> APISession
    /// Signs in with the daemon's location, then starts the work after a sign-in, the same
    /// for both verdicts; the answer is the same for both too.
    func signIn(_ request: APISignIn) async throws -> APISession
    func signOut() throws -> APISession
    /// Asks Transrify whether the session is still valid; an invalid one is cleared.
    func verifySession() async throws -> APISessionCheck
    /// A refused PIN or finger is an outcome; after an unlock the daemon does the same work
    /// whichever PIN (or finger) it was.
    func unlock(_ request: APIUnlock) async throws -> APIUnlockOutcome
    func changeLockSettings(_ request: APILockSettings) async throws -> APIMessage
    func setUpLock(_ request: APILockSetup) async throws -> APIMessage
    func acknowledge(_ request: APIAcknowledge) async throws -> APIAcknowledged
    /// Asks Transrify once, with the daemon's position.
    func alerts() async throws -> APIAlerts
    /// Captures with the devices the daemon holds.
    func captureEvidence(_ request: APIEvidenceCapture) async throws -> APIEvidenceItem
    /// Uploads what the user queued now, ignoring backoff.
    func flushEvidence() async throws -> APIEvidenceFlush
}

/// `GET /v1/lock`, `POST /v1/lock/unlock`, `POST /v1/lock/setup`, `POST /v1/lock/settings`, `GET /v1/evidence`,
/// `GET|POST|DELETE /v1/session`, `GET /v1/alerts`, `POST /v1/alerts/acknowledge`.
extension APIServer {
    func addFlowRoutes(to v1: RouterGroup<APIRequestContext>) {
        v1.get("lock") { _, context in
            try host.authorise(.lock, try await context.caller(host), doing: "GET /v1/lock")
            return try Self.json(try host.requireFlows().lockStatus())
        }
        v1.post("lock/unlock") { request, context in
            try host.authorise(.lock, try await context.caller(host), doing: "POST /v1/lock/unlock")
            let body = try await APIRequestBody.decode(APIUnlock.self, request, fields: ["pin", "fingerprint", "scanTimeoutMs"])
            try APIRequestBody.limit(body.pin, "pin", 64)
            guard (body.pin != nil) != (body.fingerprint == true), body.fingerprint != false else {
                throw FieldHALError(.invalidArgument, subject: "request body", detail: "give either pin or fingerprint: true")
            }
            _ = try APIRequestBody.timeout(body.scanTimeoutMs, default: 10_000)
            let flows = try host.requireFlows()
            return try Self.json(try await Self.whileConnected(context.channel) { try await flows.unlock(body) })
        }
        v1.post("lock/settings") { request, context in
            try host.authorise(.lock, try await context.caller(host), doing: "POST /v1/lock/settings")
            let body = try await APIRequestBody.decode(APILockSettings.self, request, fields: [
                "currentPin", "relockAfter", "biometrics", "newPin", "newPinConfirmation", "newDuressPin", "disable", "wipeAfterFailures",
            ])
            for (name, value) in [("currentPin", body.currentPin), ("newPin", body.newPin), ("newPinConfirmation", body.newPinConfirmation),
                                  ("newDuressPin", body.newDuressPin)] {
                try APIRequestBody.limit(value, name, 64)
            }
            if let relock = body.relockAfter, !["immediate", "1m", "2m", "5m", "10m", "never"].contains(relock) {
                throw FieldHALError(.invalidArgument, subject: "relockAfter", detail: "\"\(relock)\" is not immediate, 1m, 2m, 5m, 10m or never")
            }
            return try Self.json(try await host.requireFlows().changeLockSettings(body))
        }
        v1.post("lock/setup") { request, context in
            try host.authorise(.lock, try await context.caller(host), doing: "POST /v1/lock/setup")
            let body = try await APIRequestBody.decode(APILockSetup.self, request, fields: [
                "pin", "pinConfirmation", "duressPin", "biometrics", "relockAfter", "wipeAfterFailures",
            ])
            for (name, value) in [("pin", body.pin), ("pinConfirmation", body.pinConfirmation), ("duressPin", body.duressPin)] {
                try APIRequestBody.limit(value, name, 64)
            }
            if let relock = body.relockAfter, !["immediate", "1m", "2m", "5m", "10m", "never"].contains(relock) {
                throw FieldHALError(.invalidArgument, subject: "relockAfter", detail: "\"\(relock)\" is not immediate, 1m, 2m, 5m, 10m or never")
            }
            // Not cancelled by a client that hangs up: a PIN hashed and stored is kept.
            return try Self.json(try await host.requireFlows().setUpLock(body))
        }
        v1.get("evidence") { _, context in
            try host.authorise(.evidence, try await context.caller(host), doing: "GET /v1/evidence")
            return try Self.json(try host.requireFlows().evidence())
        }
        v1.post("evidence") { request, context in
            try host.authorise(.evidence, try await context.caller(host), doing: "POST /v1/evidence")
            let body = try await APIRequestBody.decode(APIEvidenceCapture.self, request, fields: ["kind", "text", "seconds", "incidentId"])
            guard ["PHOTO", "AUDIO", "VIDEO", "TEXT", "NEARBY"].contains(body.kind) else {
                throw FieldHALError(.invalidArgument, subject: "kind", detail: "\"\(body.kind)\" is not PHOTO, AUDIO, VIDEO, TEXT or NEARBY")
            }
            try body.checkLimits()
            if body.kind == "TEXT", body.text == nil {
                throw FieldHALError(.invalidArgument, subject: "text", detail: "a TEXT item needs its note in text")
            }
            let flows = try host.requireFlows()
            return try Self.json(try await flows.captureEvidence(body))
        }
        v1.post("evidence/flush") { _, context in
            try host.authorise(.evidence, try await context.caller(host), doing: "POST /v1/evidence/flush")
            return try Self.json(try await host.requireFlows().flushEvidence())
        }
        v1.get("session") { _, context in
            try host.authorise(.transrify, try await context.caller(host), doing: "GET /v1/session")
            return try Self.json(try host.requireFlows().session())
        }
        v1.post("session") { request, context in
            try host.authorise(.transrify, try await context.caller(host), doing: "POST /v1/session")
            let body = try await APIRequestBody.decode(APISignIn.self, request, fields: ["customerRef", "pin"])
            try APIRequestBody.limit(body.customerRef, "customerRef", 256)
            try APIRequestBody.limit(body.pin, "pin", 64)
            // Not cancelled by a client that hangs up: a sign-in Transrify answered is kept,
            // and the work after it must run as it does for every sign-in.
            return try Self.json(try await host.requireFlows().signIn(body))
        }
        v1.post("session/verify") { _, context in
            try host.authorise(.transrify, try await context.caller(host), doing: "POST /v1/session/verify")
            // Not cancelled by a client that hangs up: a session Transrify refused is cleared
            // whoever asked.
            return try Self.json(try await host.requireFlows().verifySession())
        }
        v1.delete("session") { _, context in
            try host.authorise(.transrify, try await context.caller(host), doing: "DELETE /v1/session")
            return try Self.json(try host.requireFlows().signOut())
        }
        v1.get("alerts") { _, context in
            try host.authorise(.alerts, try await context.caller(host), doing: "GET /v1/alerts")
            let flows = try host.requireFlows()
            return try Self.json(try await Self.whileConnected(context.channel) { try await flows.alerts() })
        }
        v1.post("alerts/acknowledge") { request, context in
            try host.authorise(.alerts, try await context.caller(host), doing: "POST /v1/alerts/acknowledge")
            let body = try await APIRequestBody.decode(APIAcknowledge.self, request, fields: ["method", "alertId", "timeoutMs"])
            try APIRequestBody.limit(body.alertId, "alertId", 256)
            guard body.method == APIAcknowledge.inApp || body.method == APIAcknowledge.nfc else {
                throw FieldHALError(.invalidArgument, subject: "method", detail: "\"\(body.method)\" is neither INAPP nor NFC")
            }
            _ = try APIRequestBody.timeout(body.timeoutMs, default: 30_000)
            let flows = try host.requireFlows()
            return try Self.json(try await Self.whileConnected(context.channel) { try await flows.acknowledge(body) })
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
