import FieldHAL
import FieldHALVault
import Foundation
import Transrify

/// How nearby alerts are fetched (Req 25, 33): radius and poll interval, validated.
public struct AlertSettings: Sendable, Equatable {
    public static let radiusRange = 100...10_000
    public var radiusMeters = 1000
    public var pollInterval: Duration = .milliseconds(15_000)
    /// Identical alerts do not buzz or sound again within this window (Req 29.3).
    public var debounce: Duration = .seconds(60)

    public init() {}

    public init(radiusMeters: Int?, pollIntervalMilliseconds: Int?) throws {
        if let radiusMeters {
            guard Self.radiusRange.contains(radiusMeters) else {
                throw FieldHALError(.invalidArgument, subject: "ALERT_RADIUS_METERS",
                                    detail: "\(radiusMeters) is outside 100–10000 meters")
            }
            self.radiusMeters = radiusMeters
        }
        if let pollIntervalMilliseconds {
            guard (1000...3_600_000).contains(pollIntervalMilliseconds) else {
                throw FieldHALError(.invalidArgument, subject: "ALERT_POLL_INTERVAL_MS",
                                    detail: "\(pollIntervalMilliseconds) is outside 1000–3600000 ms")
            }
            pollInterval = .milliseconds(pollIntervalMilliseconds)
        }
    }
}

/// What the person at a responding kit sees for one alert (Req 26).
public struct AlertBanner: Sendable, Equatable {
    public var alert: Alert
    /// Metres from this kit, when both locations are known.
    public var distanceMeters: Double?

    public init(alert: Alert, here: Geolocation?) {
        self.alert = alert
        if let here, let there = alert.geo { distanceMeters = here.distanceMeters(to: there) } else { distanceMeters = nil }
    }

    /// "Nearby Duress Alert — alice01, about 450 m away".
    public var text: String {
        var line = "Nearby Duress Alert — \(alert.customerRef)"
        if let distanceMeters { line += ", about \(Self.format(distanceMeters)) away" }
        return line
    }

    static func format(_ meters: Double) -> String {
        if meters < 1000 { return "\(Int((meters / 10).rounded()) * 10) m" }
        return String(format: "%.1f km", meters / 1000)
    }
}

/// Who this kit is signed in as. Its user's own alerts are never announced (Req 24: the
/// duress alert is silent at the device): not the one this session raised — whose id the kit
/// learns only after the server has already pushed it — nor that user's earlier ones, which
/// come back in every snapshot. Matched by customer reference, which is known from the
/// moment of sign-in, and by alert id.
public struct OwnIdentity: Sendable, Equatable {
    public var customerRef: String
    public var sessionId: String
    public var alertIds: Set<String>

    public init(customerRef: String, sessionId: String, alertIds: Set<String> = []) {
        self.customerRef = customerRef
        self.sessionId = sessionId
        self.alertIds = alertIds
    }

    public func owns(_ alert: Alert) -> Bool {
        alertIds.contains(alert.alertId) || alert.customerRef.caseInsensitiveCompare(customerRef) == .orderedSame
    }
}

/// Fetches nearby DURESS alerts for the tenant and decides which deserve a buzz: never the
/// kit's own user's, and each alert at most once per debounce window (Req 29.3), which
/// `AlertDebounce` keeps across restarts.
public final class AlertWatcher: Sendable {
    public let client: TransrifyClient
    public let settings: AlertSettings
    public let own: OwnIdentity?
    public let debounce: AlertDebounce

    public init(client: TransrifyClient, settings: AlertSettings, own: OwnIdentity?,
                debounce: AlertDebounce? = nil) {
        self.client = client
        self.settings = settings
        self.own = own
        self.debounce = debounce ?? AlertDebounce(window: settings.debounce)
    }

    public struct Poll: Sendable, Equatable {
        /// Every active DURESS alert nearby, as banners.
        public var banners: [AlertBanner]
        /// The alerts that should buzz and sound now (new, or out of their debounce window).
        public var announce: [AlertBanner]
    }

    /// One request to `/v1/alerts/nearby` (Req 25.3) and the debounce decision.
    public func poll(here: Geolocation?) async throws -> Poll {
        consider(try await fetch(here: here), here: here)
    }

    /// The banners of one request, leaving the debounce alone (a listing is not an announcement).
    public func list(here: Geolocation?) async throws -> [AlertBanner] {
        banners(try await fetch(here: here), here: here)
    }

    private func fetch(here: Geolocation?) async throws -> [Alert] {
        try await client.nearbyAlerts(geo: here, radiusMeters: settings.radiusMeters,
                                      timestamp: Int64(Date().timeIntervalSince1970 * 1000), sessionId: own?.sessionId).alerts
    }

    /// The alerts to show, however they came (a poll, the WebSocket channel): DURESS alerts
    /// of others, within the radius when both locations are known.
    public func banners(_ alerts: [Alert], here: Geolocation?) -> [AlertBanner] {
        alerts
            .filter { $0.alertKind == "DURESS" && !(own?.owns($0) ?? false) }
            .map { AlertBanner(alert: $0, here: here) }
            .filter { banner in banner.distanceMeters.map { $0 <= Double(settings.radiusMeters) } ?? true }
    }

    /// The banners, and the debounce decision for them.
    public func consider(_ alerts: [Alert], here: Geolocation?) -> Poll {
        let banners = banners(alerts, here: here)
        let admitted = debounce.admit(banners.map(\.alert.alertId))
        return Poll(banners: banners, announce: banners.filter { admitted.contains($0.alert.alertId) })
    }
}

/// Where the debounce's record of announced alerts is kept between processes.
public protocol AlertDebounceStore: Sendable {
    func load() throws -> [String: Date]
    func save(_ announced: [String: Date]) throws
}

/// Req 29.3: an alert buzzes and sounds at most once per window (60 s). The record is kept
/// in a store (sealed in the state directory by the daemon and the CLI), so a restarted
/// subscription, a reloaded or restarted daemon, or `alerts watch` beside the daemon does not
/// announce the same alert again inside its window.
///
/// Bounded: entries older than the window are dropped on every write, and at most
/// `maxEntries` are kept (the newest), so a flood of alerts cannot grow it.
public final class AlertDebounce: Sendable {
    public static let maxEntries = 256
    /// Alert ids are the server's: longer ones are cut before they are kept.
    static let maxIdLength = 128
    public let window: Duration
    private let store: (any AlertDebounceStore)?
    private let now: @Sendable () -> Date
    /// The record when there is no store (tests, benchmarks), and the last one read.
    private let announced = LockedValue<[String: Date]>([:])

    /// `now` is the wall clock: the record must mean the same after a restart.
    public init(window: Duration = .seconds(60), store: (any AlertDebounceStore)? = nil,
                now: @escaping @Sendable () -> Date = Date.init) {
        self.window = window
        self.store = store
        self.now = now
    }

    /// The ids to announce now; they are recorded as announced. A store that cannot be read
    /// or written is not a reason to stay silent about a colleague in danger: the record in
    /// memory is used instead.
    public func admit(_ ids: [String]) -> Set<String> {
        guard !ids.isEmpty else { return [] }
        let instant = now()
        let seconds = Double(window.components.seconds) + Double(window.components.attoseconds) / 1e18
        return announced.withLock { memory -> Set<String> in
            var record = (try? store?.load()) ?? memory
            // A clock set back counts as inside the window too, rather than announcing twice.
            record = record.filter { abs(instant.timeIntervalSince($0.value)) < seconds }
            var admitted: Set<String> = []
            for id in ids {
                let key = String(id.prefix(Self.maxIdLength))
                guard record[key] == nil else { continue }
                admitted.insert(id)
                record[key] = instant
            }
            if record.count > Self.maxEntries {
                record = Dictionary(uniqueKeysWithValues: record.sorted { $0.value > $1.value }.prefix(Self.maxEntries).map { ($0.key, $0.value) })
            }
            if !admitted.isEmpty { try? store?.save(record) }
            memory = record
            return admitted
        }
    }
}

/// The debounce record sealed in the vault (`alert-debounce`), padded to one size.
public struct SealedAlertDebounceStore: AlertDebounceStore {
    public static let entry = "alert-debounce"
    /// Room for `AlertDebounce.maxEntries` ids of the longest kept length with their times.
    public static let paddedSize = 40 * 1024
    let stored: PaddedVaultEntry<[String: Date]>

    public init(vault: Vault) {
        stored = PaddedVaultEntry(Self.entry, size: Self.paddedSize, in: vault, subject: "alert debounce record",
                                  advice: "it is written anew at the next alert")
    }

    public func load() throws -> [String: Date] { try stored.load() ?? [:] }
    public func save(_ announced: [String: Date]) throws { try stored.save(announced) }
}

/// Req 32.2: the payload a duressed kit exposes as a tag, and its parsing on the reader side.
public enum DuressTagPayload {
    public static let prefix = "trf:duress:"

    public static func message(alertId: String) throws -> NDEFMessage { try .text(prefix + alertId) }

    /// The alert id in a tag's NDEF message: a Text or URI record `trf:duress:<alertId>`.
    public static func alertId(in message: NDEFMessage?) -> String? {
        for record in message?.records ?? [] {
            let value: String? = switch try? record.content() {
            case .text(let text, _)?: text
            case .uri(let uri)?: uri
            default: nil
            }
            if let value, value.hasPrefix(prefix), value.count > prefix.count,
               value.dropFirst(prefix.count).allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) {
                return String(value.dropFirst(prefix.count))
            }
        }
        return nil
    }
}
