import FieldHAL
import Foundation
import Transrify

/// Req 18: check the session with the API. Invalid → cleared; a network error keeps it.
public struct SessionVerifier: Sendable {
    public enum Outcome: Sendable, Equatable { case valid, cleared, kept(reason: String), signedOut }

    public var client: TransrifyClient
    public var sessions: SessionStore

    public init(client: TransrifyClient, sessions: SessionStore) {
        self.client = client
        self.sessions = sessions
    }

    public func verify() async throws -> Outcome {
        guard let record = try sessions.load() else { return .signedOut }
        do {
            if try await client.verify(sessionId: record.sessionId).valid { return .valid }
            try sessions.clear()
            return .cleared
        } catch let error as TransrifyError {
            return .kept(reason: error.detail)  // Req 18.5: never sign out on a network error
        }
    }
}

/// What runs after every successful sign-in, in the background, the same way whatever
/// the verdict: verify the session and stamp the sealed record. In limited mode it also
/// sends the silent duress alert (Req 24), retrying until it is through, and hands the
/// session to `limitedMode` (evidence capture). It prints nothing and logs nothing.
public struct AfterSignIn: Sendable {
    public var client: TransrifyClient
    public var sessions: SessionStore
    public var device: DeviceInfo
    /// Attempts at the duress alert before giving up for this run (the next run retries).
    public var alertAttempts = 6
    public var clock: any RetryClock = ContinuousRetryClock()
    public var limitedMode: @Sendable (SessionRecord) async -> Void = { _ in }

    public init(client: TransrifyClient, sessions: SessionStore, device: DeviceInfo) {
        self.client = client
        self.sessions = sessions
        self.device = device
    }

    public func run() async {
        guard var record = try? sessions.load() else { return }
        _ = try? await SessionVerifier(client: client, sessions: sessions).verify()
        if record.limitedMode, record.alertId == nil {
            record.alertId = await sendDuressAlert(record)
        }
        record.backgroundRunAt = Date()
        // Saved unless signout raced us: a cleared session stays cleared.
        if (try? sessions.load()) != nil { try? sessions.save(record) }
        if record.limitedMode { await limitedMode(record) }
    }

    private func sendDuressAlert(_ record: SessionRecord) async -> String? {
        for attempt in 1...alertAttempts {
            do {
                return try await client.sendDuressAlert(sessionId: record.sessionId, geo: record.geo, device: device).alertId
            } catch {
                if attempt < alertAttempts { try? await clock.sleep(for: client.backoff(beforeRetry: min(attempt, 5))) }
            }
        }
        return nil
    }
}
