import FieldHAL
@testable import FieldHALFlows
import Foundation
import Testing
import Transrify
import TransrifyLabServer

/// A settable monotonic clock for the 60 s debounce.
final class ManualClock: Sendable {
    private let current = LockedValue(ContinuousClock.now)
    var now: ContinuousClock.Instant { current.withLock { $0 } }
    func advance(by duration: Duration) { current.withLock { $0 += duration } }
}

@Suite(.serialized, .timeLimit(.minutes(1)))
struct AlertWatcherTests {
    @Test func radiusAndIntervalAreValidated() throws {
        let defaults = AlertSettings()
        #expect(defaults.radiusMeters == 1000 && defaults.pollInterval == .milliseconds(15_000))
        #expect(throws: FieldHALError.self) { try AlertSettings(radiusMeters: 99, pollIntervalMilliseconds: nil) }
        #expect(throws: FieldHALError.self) { try AlertSettings(radiusMeters: 10_001, pollIntervalMilliseconds: nil) }
        #expect(try AlertSettings(radiusMeters: 100, pollIntervalMilliseconds: 1000).radiusMeters == 100)
        #expect(throws: FieldHALError.self) { try AlertSettings(radiusMeters: nil, pollIntervalMilliseconds: 10) }
    }

    @Test func bannerSaysWhoAndHowFar() {
        let alert = Alert(alertId: "a1", alertKind: "DURESS", customerRef: "alice01", geo: Geolocation(lat: 52.5200, lon: 13.4050), createdAt: 0)
        let near = AlertBanner(alert: alert, here: Geolocation(lat: 52.5245, lon: 13.4050))
        #expect(near.text == "Nearby Duress Alert — alice01, about 500 m away")
        let far = AlertBanner(alert: alert, here: Geolocation(lat: 52.5400, lon: 13.4050))
        #expect(far.text == "Nearby Duress Alert — alice01, about 2.2 km away")
        #expect(AlertBanner(alert: alert, here: nil).text == "Nearby Duress Alert — alice01")
    }

    @Test func pollsTheLabAndDebouncesEachAlertForSixtySeconds() async throws {
        let server = try LabServer(LabServer.Configuration(directory: scratchDirectory("lab")))
        try server.addTenant(key: "t", name: "T")
        try server.addUser(tenantKey: "t", customerRef: "alice01", pin: "2468", duressPin: "1357")
        let lab = try await server.start()
        defer { Task { await lab.stop() } }
        let client = TransrifyClient(baseURL: lab.baseURL, tenantKey: "t")
        let there = Geolocation(lat: 52.5200, lon: 13.4050)
        let session = try await client.login(customerRef: "alice01", pin: "1357", device: DeviceInfo(version: "t"), geo: there)
        let alertId = try await client.sendDuressAlert(sessionId: session.sessionId!, geo: there, device: DeviceInfo(version: "t")).alertId
        let clock = ManualClock()
        let watcher = AlertWatcher(client: client, settings: AlertSettings(), now: { clock.now })
        let here = Geolocation(lat: 52.5245, lon: 13.4050)
        let first = try await watcher.poll(here: here)
        #expect(first.banners.map(\.alert.alertId) == [alertId])
        #expect(first.announce.map(\.alert.alertId) == [alertId])
        #expect(first.banners.first?.distanceMeters.map { abs($0 - 500) < 10 } == true)
        clock.advance(by: .seconds(30))
        let second = try await watcher.poll(here: here)
        #expect(second.banners.count == 1 && second.announce.isEmpty, "within 60 s: shown, not announced again")
        clock.advance(by: .seconds(31))
        #expect(try await watcher.poll(here: here).announce.count == 1, "after 60 s it buzzes again")
        #expect(try await watcher.poll(here: here, excluding: alertId).banners.isEmpty, "a kit does not alert itself")
        #expect(try await watcher.poll(here: Geolocation(lat: 52.60, lon: 13.4050)).banners.isEmpty, "9 km is outside 1000 m")
    }

    @Test func duressTagPayloadsParseFromTextAndURIRecords() throws {
        #expect(DuressTagPayload.alertId(in: try DuressTagPayload.message(alertId: "4d24a7")) == "4d24a7")
        #expect(DuressTagPayload.alertId(in: .uri("trf:duress:abc-1")) == "abc-1")
        #expect(DuressTagPayload.alertId(in: try .text("hello")) == nil)
        #expect(DuressTagPayload.alertId(in: try .text("trf:duress:")) == nil)
        #expect(DuressTagPayload.alertId(in: try .text("trf:duress:a b")) == nil)
        #expect(DuressTagPayload.alertId(in: nil) == nil)
    }
}
