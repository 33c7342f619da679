#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// How good a position is, as gpsd reports it.
public enum FixMode: String, Sendable, Codable, Comparable {
    case noFix = "no-fix"
    case twoD = "2d"
    case threeD = "3d"

    private var rank: Int { self == .noFix ? 0 : self == .twoD ? 1 : 2 }
    public static func < (lhs: FixMode, rhs: FixMode) -> Bool { lhs.rank < rhs.rank }
}

/// One position report. Units: degrees, metres, metres per second, degrees from true north.
public struct Fix: Sendable, Equatable, Codable {
    public var mode: FixMode
    public var latitude: Double?
    public var longitude: Double?
    public var altitude: Double?
    /// Horizontal accuracy, metres (expo-location's `accuracy`; gpsd's `eph`).
    public var horizontalAccuracy: Double?
    /// Vertical accuracy, metres (gpsd's `epv`).
    public var verticalAccuracy: Double?
    public var speed: Double?
    /// Course over ground (gpsd's `track`, expo-location's `heading`).
    public var course: Double?
    /// The receiver's time of the fix.
    public var time: Date
    public var satellitesUsed: Int?
    /// Why there is no fix when the source itself failed (gpsd stopped, receiver unplugged,
    /// reports stopped coming), as opposed to a receiver reporting that it has no fix.
    public var sourceProblem: String?

    public init(
        mode: FixMode, latitude: Double? = nil, longitude: Double? = nil, altitude: Double? = nil,
        horizontalAccuracy: Double? = nil, verticalAccuracy: Double? = nil, speed: Double? = nil,
        course: Double? = nil, time: Date, satellitesUsed: Int? = nil, sourceProblem: String? = nil
    ) {
        self.mode = mode
        self.latitude = latitude
        self.longitude = longitude
        self.altitude = altitude
        self.horizontalAccuracy = horizontalAccuracy
        self.verticalAccuracy = verticalAccuracy
        self.speed = speed
        self.course = course
        self.time = time
        self.satellitesUsed = satellitesUsed
        self.sourceProblem = sourceProblem
    }

    /// A no-fix report for a source that failed, with the reason.
    public static func lost(_ problem: String, at time: Date = Date()) -> Fix {
        Fix(mode: .noFix, time: time, sourceProblem: problem)
    }

    /// A fix with a position (2D or 3D and both coordinates present).
    public var hasPosition: Bool { mode >= .twoD && latitude != nil && longitude != nil }
}

/// What `currentFix` asks for. Defaults follow seed 000 Req 10: five seconds, then cache.
public struct FixRequest: Sendable, Equatable {
    /// How long to wait for a live fix.
    public var timeout: Duration
    /// The oldest cached fix that may stand in for a live one; `nil` never uses the cache.
    public var maxAge: Duration?
    /// The worst horizontal accuracy (metres) accepted, live or cached; `nil` accepts any.
    public var requiredAccuracy: Double?
    /// The least fix mode accepted.
    public var minimumMode: FixMode

    public init(timeout: Duration = .seconds(5), maxAge: Duration? = .seconds(300),
                requiredAccuracy: Double? = nil, minimumMode: FixMode = .twoD) {
        self.timeout = timeout
        self.maxAge = maxAge
        self.requiredAccuracy = requiredAccuracy
        self.minimumMode = minimumMode
    }

    /// Whether `fix` is of the wanted quality (mode and accuracy; age is the caller's).
    public func accepts(_ fix: Fix) -> Bool {
        guard fix.hasPosition, fix.mode >= minimumMode else { return false }
        guard let requiredAccuracy else { return true }
        guard let accuracy = fix.horizontalAccuracy else { return false }
        return accuracy <= requiredAccuracy
    }
}

/// A fix and where it came from.
public struct LocationReading: Sendable, Equatable, Codable {
    public enum Source: String, Sendable, Codable { case live, cached }
    public var fix: Fix
    public var source: Source
    /// Seconds since the fix arrived from the receiver: 0 for a live fix.
    public var age: Double

    public init(fix: Fix, source: Source, age: Double) {
        self.fix = fix
        self.source = source
        self.age = age
    }
}

/// A fix as a provider kept it: with the moment it arrived, on the monotonic clock. Ages
/// are measured from arrival, not from the fix's own time, so that a board whose clock is
/// wrong (no RTC, no NTP yet: common in the field) still ages its cache correctly.
public struct ReceivedFix: Sendable, Equatable {
    public var fix: Fix
    public var receivedAt: ContinuousClock.Instant

    public init(fix: Fix, receivedAt: ContinuousClock.Instant = .now) {
        self.fix = fix
        self.receivedAt = receivedAt
    }
}

/// A position source: gpsd, or the fake's scripted track.
///
/// A backend provides the watch stream and the last fix it saw; `currentFix` is built on
/// them here, so every backend answers it the same way.
public protocol LocationProvider: Device {
    /// Fixes as they arrive (including no-fix reports), until the consumer stops iterating
    /// or cancels. A backend that recovers by itself (gpsd reconnecting) reports a lost
    /// source as a no-fix with `sourceProblem` and carries on; one that cannot ends the
    /// stream with a `FieldHALError`.
    func watch() -> AsyncThrowingStream<Fix, any Error>

    /// The fixes of `watch()`, handed to `handler` where they arrive (the provider's own
    /// thread) instead of to a task, until the subscription is cancelled; `end` is called
    /// once if the stream ends first. For a server that fans fixes out to its clients with
    /// no task in between. `handler` must return quickly and not block. The default pumps
    /// `watch()` in a task; a backend with a thread of its own hands fixes over from it.
    func follow(_ handler: @escaping @Sendable (Fix) -> Void, end: @escaping @Sendable ((any Error)?) -> Void) -> Subscription

    /// The most recent fix with a position that this provider has seen, if any.
    func lastKnownFix() async -> ReceivedFix?

    /// The first fix of the wanted quality within the timeout, else a young enough cached
    /// fix, else `FieldHALError.noFix`.
    func currentFix(_ request: FixRequest) async throws -> LocationReading
}

extension LocationProvider {
    public func follow(_ handler: @escaping @Sendable (Fix) -> Void, end: @escaping @Sendable ((any Error)?) -> Void) -> Subscription {
        followByPumpingWatch(handler, end: end)
    }

    /// `follow` for a backend without a thread of its own: a task pumps `watch()`.
    public func followByPumpingWatch(_ handler: @escaping @Sendable (Fix) -> Void, end: @escaping @Sendable ((any Error)?) -> Void) -> Subscription {
        let stream = watch()
        let task = Task {
            do {
                for try await fix in stream { handler(fix) }
                if !Task.isCancelled { end(nil) }
            } catch {
                if !Task.isCancelled { end(error) }
            }
        }
        return Subscription(task: task) {}
    }

    public func currentFix(_ request: FixRequest = FixRequest()) async throws -> LocationReading {
        try await resolveCurrentFix(request, now: { .now })
    }

    /// `currentFix` with an injectable monotonic clock, for tests.
    public func resolveCurrentFix(_ request: FixRequest, now: @Sendable () -> ContinuousClock.Instant) async throws -> LocationReading {
        let subject = "gps \(deviceName)"
        var liveError: (any Error)?
        let lastProblem = LockedValue<String?>(nil)
        do {
            let live: Fix? = try await withDeadline(request.timeout) {
                for try await fix in self.watch() {
                    if request.accepts(fix) { return fix }
                    lastProblem.withLock { $0 = fix.sourceProblem ?? $0 }
                }
                return nil
            }
            if let live {
                return LocationReading(fix: live, source: .live, age: 0)
            }
        } catch let error as FieldHALError where error.kind == .timeout {
            liveError = nil  // fall through to the cache
        } catch let error as FieldHALError where error.kind == .cancelled {
            throw error
        } catch is CancellationError {
            throw FieldHALError.cancelled(subject)
        } catch {
            liveError = error
        }
        if let maxAge = request.maxAge, let cached = await lastKnownFix(), request.accepts(cached.fix) {
            let age = now() - cached.receivedAt
            if age <= maxAge {
                return LocationReading(fix: cached.fix, source: .cached, age: max(0, age.seconds))
            }
        }
        var detail = "no fix within \(request.timeout.secondsDescription)"
        if let requiredAccuracy = request.requiredAccuracy { detail += " at \(requiredAccuracy) m or better" }
        if request.maxAge != nil { detail += ", and no cached fix young enough" }
        if let liveError {
            detail += " (\(liveError))"
        } else if let problem = lastProblem.value {
            detail += " (\(problem))"
        }
        throw FieldHALError(.noFix, subject: subject, detail: detail,
                            advice: "check the antenna has a view of the sky, or wait longer for a fix, or accept an older one")
    }
}
