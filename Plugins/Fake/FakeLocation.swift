import FieldHAL
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A GPS receiver that plays a scripted track: one point every `interval_ms`, looping.
/// Each point is reported with the time it is played, as a live receiver would.
final class FakeLocationProvider: LocationProvider {
    struct Point: Sendable, Equatable {
        var mode: FixMode
        var latitude, longitude: Double
        var altitude, horizontalAccuracy, verticalAccuracy, speed, course: Double?
        var satellites: Int?
    }

    let deviceName: String
    private let points: [Point]
    private let intervalMilliseconds: Int
    private let loops: Bool
    private let clock = ScriptClock()

    init(deviceName: String, points: [Point], intervalMilliseconds: Int, loops: Bool) {
        self.deviceName = deviceName
        self.points = points
        self.intervalMilliseconds = max(1, intervalMilliseconds)
        self.loops = loops
    }

    /// The point playing at `step` (the step-th interval since opening), if the track has one.
    private func point(atStep step: Int) -> Point? {
        guard !points.isEmpty else { return nil }
        if step < points.count { return points[step] }
        return loops ? points[step % points.count] : nil
    }

    private func fix(atStep step: Int) -> Fix? {
        guard let point = point(atStep: step) else { return nil }
        let positioned = point.mode != .noFix
        return Fix(mode: point.mode,
                   latitude: positioned ? point.latitude : nil, longitude: positioned ? point.longitude : nil,
                   altitude: point.mode == .threeD ? point.altitude : nil,
                   horizontalAccuracy: positioned ? point.horizontalAccuracy : nil,
                   verticalAccuracy: point.mode == .threeD ? point.verticalAccuracy : nil,
                   speed: point.speed, course: point.course,
                   time: clock.date(atMilliseconds: step * intervalMilliseconds), satellitesUsed: point.satellites)
    }

    func watch() -> AsyncThrowingStream<Fix, any Error> {
        let subject = "gps \(deviceName)"
        return AsyncThrowingStream { continuation in
            let task = Task {
                var step = self.clock.elapsedMilliseconds / self.intervalMilliseconds
                do {
                    while let fix = self.fix(atStep: step) {
                        try await self.clock.sleep(untilMilliseconds: step * self.intervalMilliseconds, subject: subject)
                        continuation.yield(fix)
                        step += 1
                    }
                    continuation.finish(throwing: FieldHALError(.disconnected, subject: subject, detail: "the scripted track ended",
                                                                advice: "set loop = true to replay it"))
                } catch {
                    // Cancelled from onTermination: the consumer has left. The standard library
                    // runs onTermination before it ends the stream, so an error thrown here could
                    // still reach a consumer that was only leaving; it ends quietly instead.
                    continuation.finish()
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    func lastKnownFix() async -> ReceivedFix? {
        var current = clock.elapsedMilliseconds / intervalMilliseconds
        // A track that has ended keeps its last fix as the receiver's last known one.
        if !loops { current = min(current, points.count - 1) }
        for step in stride(from: current, through: max(0, current - points.count), by: -1) {
            if let fix = fix(atStep: step), fix.hasPosition {
                return ReceivedFix(fix: fix, receivedAt: clock.instant(atMilliseconds: step * intervalMilliseconds))
            }
        }
        return nil
    }

    func close() async {}
}

/// Reads a track from NMEA 0183 sentences: GGA for position, altitude and satellites,
/// RMC for speed and course, GSA for the fix mode. Sentences with a bad checksum are
/// skipped, as a receiver's reader would. One point per GGA.
enum NMEATrack {
    static func points(fromLog text: String) -> [FakeLocationProvider.Point] {
        var points: [FakeLocationProvider.Point] = []
        var mode: FixMode?
        var speed: Double?
        var course: Double?
        var verticalDOP: Double?
        for line in text.split(whereSeparator: \.isNewline) {
            guard let fields = checkedFields(line) else { continue }
            switch fields[0].suffix(3) {
            case "GSA" where fields.count > 2:
                mode = fields[2] == "3" ? .threeD : fields[2] == "2" ? .twoD : .noFix
                verticalDOP = fields.count > 17 ? Double(fields[17]) : nil
            case "RMC" where fields.count > 8:
                speed = Double(fields[7]).map { $0 * 0.514444 }  // knots to m/s
                course = Double(fields[8])
            case "GGA" where fields.count > 9:
                let quality = Int(fields[6]) ?? 0
                guard quality > 0, let latitude = coordinate(fields[2], fields[3]), let longitude = coordinate(fields[4], fields[5]) else {
                    points.append(.init(mode: .noFix, latitude: 0, longitude: 0, satellites: Int(fields[7])))
                    continue
                }
                let hdop = Double(fields[8])
                let altitude = Double(fields[9])
                let pointMode = mode ?? (altitude == nil ? .twoD : .threeD)
                // gpsd 3.22's error model for an autonomous fix, as measured against it:
                // eph = HDOP × 19 m, epv = VDOP × 23 m. The fake reports what gpsd would.
                points.append(.init(mode: pointMode, latitude: latitude, longitude: longitude, altitude: altitude,
                                    horizontalAccuracy: hdop.map { $0 * 19 }, verticalAccuracy: (verticalDOP ?? hdop).map { $0 * 23 },
                                    speed: speed, course: course, satellites: Int(fields[7])))
            default:
                continue
            }
        }
        return points
    }

    /// The comma-separated fields of `$…*hh`, or nil if the checksum is absent or wrong.
    static func checkedFields(_ line: Substring) -> [Substring]? {
        guard line.first == "$", let star = line.lastIndex(of: "*") else { return nil }
        let body = line[line.index(after: line.startIndex)..<star]
        guard let expected = UInt8(line[line.index(after: star)...].prefix(2), radix: 16) else { return nil }
        guard body.utf8.reduce(0, ^) == expected else { return nil }
        return body.split(separator: ",", omittingEmptySubsequences: false)
    }

    /// `4807.038,N` → 48.1173.
    static func coordinate(_ value: Substring, _ hemisphere: Substring) -> Double? {
        guard let raw = Double(value), raw >= 0 else { return nil }
        let degrees = (raw / 100).rounded(.down)
        let decimal = degrees + (raw - degrees * 100) / 60
        switch hemisphere {
        case "N", "E": return decimal
        case "S", "W": return -decimal
        default: return nil
        }
    }
}
