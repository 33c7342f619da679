import FieldHAL
@testable import FieldHALFlows
import Foundation
import Testing
import Transrify
import TransrifyLabServer

/// A settable wall clock for the 60 s debounce (wall time: the record outlives the process).
final class ManualClock: Sendable {
    private let current = LockedValue(Date())
    var now: Date { current.withLock { $0 } }
    func advance(by duration: Duration) { current.withLock { $0 += TimeInterval(duration.components.seconds) } }
}

/// A debounce store in memory that counts its writes, standing in for the sealed file.
final class MemoryDebounceStore: AlertDebounceStore {
    let record = LockedValue<[String: Date]>([:])
    func load() throws -> [String: Date] { record.value }
    func save(_ announced: [String: Date]) throws { record.withLock { $0 = announced } }
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
        let watcher = AlertWatcher(client: client, settings: AlertSettings(), own: nil,
                                   debounce: AlertDebounce(window: .seconds(60), now: { clock.now }))
        let here = Geolocation(lat: 52.5245, lon: 13.4050)
        #expect(try await watcher.list(here: here).map(\.alert.alertId) == [alertId], "a listing")
        let first = try await watcher.poll(here: here)
        #expect(first.banners.map(\.alert.alertId) == [alertId])
        #expect(first.announce.map(\.alert.alertId) == [alertId], "a listing does not use up the announcement")
        #expect(first.banners.first?.distanceMeters.map { abs($0 - 500) < 10 } == true)
        clock.advance(by: .seconds(30))
        let second = try await watcher.poll(here: here)
        #expect(second.banners.count == 1 && second.announce.isEmpty, "within 60 s: shown, not announced again")
        clock.advance(by: .seconds(31))
        #expect(try await watcher.poll(here: here).announce.count == 1, "after 60 s it buzzes again")
        #expect(try await watcher.poll(here: Geolocation(lat: 52.60, lon: 13.4050)).banners.isEmpty, "9 km is outside 1000 m")
    }

    /// The duress bug of the last release: the duressed kit heard its own alert (it knew it
    /// only by id, which arrives after the server has pushed it), and its user's earlier alerts
    /// after every later sign-in. Both the server and the kit leave them out.
    @Test func aKitNeverHearsItsOwnUsersAlerts() async throws {
        let server = try LabServer(LabServer.Configuration(directory: scratchDirectory("lab")))
        try server.addTenant(key: "t", name: "T")
        try server.addUser(tenantKey: "t", customerRef: "alice01", pin: "2468", duressPin: "1357")
        try server.addUser(tenantKey: "t", customerRef: "bob02", pin: "1470", duressPin: "2580")
        let lab = try await server.start()
        defer { Task { await lab.stop() } }
        let client = TransrifyClient(baseURL: lab.baseURL, tenantKey: "t")
        let device = DeviceInfo(version: "t")
        // alice's earlier duress, then a new session of hers (a NORMAL one) and a fresh duress one.
        let earlier = try await client.login(customerRef: "alice01", pin: "1357", device: device, geo: nil)
        let earlierAlert = try await client.sendDuressAlert(sessionId: earlier.sessionId!, geo: nil, device: device).alertId
        let normal = try await client.login(customerRef: "alice01", pin: "2468", device: device, geo: nil)
        let bob = try await client.login(customerRef: "bob02", pin: "2580", device: device, geo: nil)
        let bobsAlert = try await client.sendDuressAlert(sessionId: bob.sessionId!, geo: nil, device: device).alertId

        // The server leaves alice's alerts out of what her session asks for...
        let asked = try await client.nearbyAlerts(geo: nil, radiusMeters: 1000, timestamp: 0, sessionId: normal.sessionId)
        #expect(asked.alerts.map(\.alertId) == [bobsAlert])
        // ...and the kit drops them itself too, whatever a server sends (here: no session given).
        let own = OwnIdentity(customerRef: "ALICE01", sessionId: normal.sessionId!)
        let watcher = AlertWatcher(client: client, settings: AlertSettings(), own: own)
        let everything = try await client.nearbyAlerts(geo: nil, radiusMeters: 1000, timestamp: 0)
        #expect(Set(everything.alerts.map(\.alertId)) == [earlierAlert, bobsAlert])
        let considered = watcher.consider(everything.alerts, here: nil)
        #expect(considered.banners.map(\.alert.alertId) == [bobsAlert])
        #expect(considered.announce.map(\.alert.alertId) == [bobsAlert])
        // An alert id the kit knows as its own is dropped whoever it names.
        let byId = AlertWatcher(client: client, settings: AlertSettings(),
                                own: OwnIdentity(customerRef: "carol", sessionId: "s", alertIds: [bobsAlert]))
        #expect(byId.consider(everything.alerts, here: nil).banners.map(\.alert.alertId) == [earlierAlert])
    }

    /// Req 29.3 across restarts: the record is in a store, so a new watcher (a restarted
    /// subscription or daemon) does not announce again inside the window; it stays bounded.
    @Test func theDebounceOutlivesTheWatcherAndStaysBounded() throws {
        let store = MemoryDebounceStore()
        let clock = ManualClock()
        let alert = Alert(alertId: "a1", alertKind: "DURESS", customerRef: "bob02", geo: nil, createdAt: 0)
        func watcher() -> AlertWatcher {
            AlertWatcher(client: TransrifyClient(baseURL: URL(string: "http://127.0.0.1:1")!, tenantKey: "t"), settings: AlertSettings(),
                         own: nil, debounce: AlertDebounce(window: .seconds(60), store: store, now: { clock.now }))
        }
        #expect(watcher().consider([alert], here: nil).announce.count == 1)
        clock.advance(by: .seconds(20))
        #expect(watcher().consider([alert], here: nil).announce.isEmpty, "a new watcher inside the window stays quiet")
        clock.advance(by: .seconds(41))
        #expect(watcher().consider([alert], here: nil).announce.count == 1, "after the window it buzzes again")
        // A flood: at most maxEntries kept, and entries past the window are dropped.
        let flood = (0..<(AlertDebounce.maxEntries + 50)).map {
            Alert(alertId: "f\($0)", alertKind: "DURESS", customerRef: "bob02", geo: nil, createdAt: 0)
        }
        #expect(watcher().consider(flood, here: nil).announce.count == flood.count)
        #expect(store.record.value.count == AlertDebounce.maxEntries)
        clock.advance(by: .seconds(61))
        _ = watcher().consider([alert], here: nil)
        #expect(store.record.value.count == 1)
        // A clock set back does not announce again.
        clock.advance(by: .seconds(-30))
        #expect(watcher().consider([alert], here: nil).announce.isEmpty)
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
