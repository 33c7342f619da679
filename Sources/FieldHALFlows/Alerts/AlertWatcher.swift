import FieldHAL
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

/// Fetches nearby DURESS alerts for the tenant and decides which deserve a buzz: each alert
/// at most once per debounce window (Req 29.3), on an injectable monotonic clock.
public final class AlertWatcher: Sendable {
    public let client: TransrifyClient
    public let settings: AlertSettings
    private let now: @Sendable () -> ContinuousClock.Instant
    private let lastAnnounced = LockedValue<[String: ContinuousClock.Instant]>([:])

    public init(client: TransrifyClient, settings: AlertSettings, now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }) {
        self.client = client
        self.settings = settings
        self.now = now
    }

    public struct Poll: Sendable, Equatable {
        /// Every active DURESS alert nearby, as banners.
        public var banners: [AlertBanner]
        /// The alerts that should buzz and sound now (new, or out of their debounce window).
        public var announce: [AlertBanner]
    }

    /// One request to `/v1/alerts/nearby` (Req 25.3) and the debounce decision.
    public func poll(here: Geolocation?, excluding ownAlertId: String? = nil) async throws -> Poll {
        let response = try await client.nearbyAlerts(geo: here, radiusMeters: settings.radiusMeters,
                                                     timestamp: Int64(Date().timeIntervalSince1970 * 1000))
        return consider(response.alerts, here: here, excluding: ownAlertId)
    }

    /// The debounce decision for alerts however they came (a poll, the WebSocket channel):
    /// DURESS alerts of others, within the radius when both locations are known.
    public func consider(_ alerts: [Alert], here: Geolocation?, excluding ownAlertId: String? = nil) -> Poll {
        let banners = alerts
            .filter { $0.alertKind == "DURESS" && $0.alertId != ownAlertId }
            .map { AlertBanner(alert: $0, here: here) }
            .filter { banner in banner.distanceMeters.map { $0 <= Double(settings.radiusMeters) } ?? true }
        let instant = now()
        let announce = lastAnnounced.withLock { last -> [AlertBanner] in
            banners.filter { banner in
                if let previous = last[banner.alert.alertId], instant - previous < settings.debounce { return false }
                last[banner.alert.alertId] = instant
                return true
            }
        }
        return Poll(banners: banners, announce: announce)
    }
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
