#if GPS
import CGPS
import FieldHAL
import FieldHALSystem
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// One connection to gpsd through libgps, used only on the plugin's device thread.
///
/// A thin, typed layer over `gps_open` / `gps_stream` / `gps_read` / `gps_close`: the
/// socket is made non-blocking, so `readReports` never waits (libgps returns 0 when no
/// whole line has arrived yet) and all waiting happens in the session's `poll`.
final class GpsdConnection {
    /// What one read brought.
    enum Report {
        case fix(Fix)
        /// gpsd says the receiver went away (a DEVICE report with `activated` 0).
        case receiverGone(path: String)
    }

    let endpoint: String
    private let data: UnsafeMutablePointer<gps_data_t>
    private var isOpen = true
    /// The raw text of the report last read: libgps cannot parse a DEVICE report whose
    /// `activated` is 0 (it expects a time), so deactivation is recognised from the text.
    private var message = [CChar](repeating: 0, count: 8192)
    /// Satellites used, from the latest SKY report (gpsd 3.22 puts it only there).
    private var satellitesUsed: Int?

    var fileDescriptor: Int32 { Int32(truncatingIfNeeded: data.pointee.gps_fd) }

    /// Connects and asks for JSON reports, optionally of one receiver only.
    init(host: String, port: Int, device: String?) throws {
        endpoint = "\(host):\(port)"
        data = .allocate(capacity: 1)
        data.initialize(to: gps_data_t())
        // On a failure below, deinit still runs (every property is set): it frees `data`.
        guard gps_open(host, String(port), data) == 0 else {
            isOpen = false
            let reason = Self.describe(openError: errno)
            throw FieldHALError(.unavailable, subject: "gps gpsd \(endpoint)", detail: "cannot connect to gpsd: \(reason)",
                                advice: "start gpsd (systemctl start gpsd.socket) or check host and port in the configuration")
        }
        let descriptor = Int32(truncatingIfNeeded: data.pointee.gps_fd)
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
        _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
        var flags = UInt32(WATCH_ENABLE | WATCH_JSON)
        let status: Int32
        if let device {
            flags |= UInt32(WATCH_DEVICE)
            status = device.withCString { gps_stream(data, flags, UnsafeMutableRawPointer(mutating: $0)) }
        } else {
            status = gps_stream(data, flags, nil)
        }
        guard status == 0 else {
            close()
            throw FieldHALError(.disconnected, subject: "gps gpsd \(endpoint)", detail: "gpsd closed the connection before the watch began")
        }
    }

    deinit {
        close()
        data.deallocate()
    }

    func close() {
        guard isOpen else { return }
        isOpen = false
        gps_close(data)
    }

    /// Every whole report that has arrived, converted; `[]` when none is complete yet.
    /// Throws `disconnected` when gpsd closed the socket or sent a line too long to be JSON.
    func readReports(receivedAt now: Date = Date()) throws -> [Report] {
        var reports: [Report] = []
        while true {
            data.pointee.set = 0
            message[0] = 0
            let status = gps_read(data, &message, Int32(message.count))
            if status == 0 { return reports }
            if status < 0 {
                throw FieldHALError(.disconnected, subject: "gps gpsd \(endpoint)",
                                    detail: errno == 0 ? "gpsd closed the connection" : "gpsd connection failed: \(SystemError.describe())")
            }
            let set = data.pointee.set
            if set & UInt64(SATELLITE_SET) != 0 {
                let used = Int(data.pointee.satellites_used)
                satellitesUsed = used > 0 ? used : nil
            }
            if set & UInt64(MODE_SET) != 0, let fix = currentFix(receivedAt: now) {
                reports.append(.fix(fix))
            } else if let path = deactivatedDevice() {
                reports.append(.receiverGone(path: path))
            }
        }
    }

    /// The fix in `data` after a TPV report; nil before the receiver's mode is known.
    private func currentFix(receivedAt now: Date) -> Fix? {
        let raw = data.pointee.fix
        let mode: FixMode
        switch raw.mode {
        case MODE_2D: mode = .twoD
        case MODE_3D: mode = .threeD
        case MODE_NO_FIX: mode = .noFix
        default: return nil  // MODE_NOT_SEEN
        }
        let positioned = mode >= .twoD
        let time = raw.time.tv_sec > 0
            ? Date(timeIntervalSince1970: Double(raw.time.tv_sec) + Double(raw.time.tv_nsec) / 1e9)
            : now  // gpsd's first reports of a session can precede the receiver's time
        return Fix(mode: mode,
                   latitude: positioned ? finite(raw.latitude) : nil,
                   longitude: positioned ? finite(raw.longitude) : nil,
                   altitude: mode == .threeD ? finite(raw.altMSL) : nil,
                   horizontalAccuracy: positioned ? finite(raw.eph) : nil,
                   verticalAccuracy: mode == .threeD ? finite(raw.epv) : nil,
                   speed: finite(raw.speed), course: finite(raw.track),
                   time: time, satellitesUsed: satellitesUsed)
    }

    /// The path in a `{"class":"DEVICE","path":…,"activated":0}` report, which gpsd sends
    /// when a receiver goes away; nil for any other report.
    private func deactivatedDevice() -> String? {
        let text = message.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        guard text.hasPrefix("{\"class\":\"DEVICE\""), text.contains("\"activated\":0") else { return nil }
        return (try? JSONValue(parsing: text.utf8))?["path"]?.string ?? ""
    }

    /// The receivers gpsd knows (its DEVICES report, sent when a watch begins), each as
    /// its JSON object; nil when none came within `timeout`.
    func devices(timeout: Duration) throws -> [[String: JSONValue]]? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            var waiting = [pollfd(fd: fileDescriptor, events: Int16(POLLIN), revents: 0)]
            _ = SystemCall.poll(&waiting, timeout: max(Duration.milliseconds(1), deadline - ContinuousClock.now))
            while true {
                message[0] = 0
                let status = gps_read(data, &message, Int32(message.count))
                if status < 0 { throw FieldHALError(.disconnected, subject: "gps gpsd \(endpoint)", detail: "gpsd closed the connection") }
                if status == 0 { break }
                let text = message.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
                guard text.hasPrefix("{\"class\":\"DEVICES\"") else { continue }
                let report = try? JSONValue(parsing: text.utf8)
                return report?["devices"]?.array?.compactMap(\.object) ?? []
            }
        }
        return nil
    }

    /// gpsd marks unknown values NaN.
    private func finite(_ value: Double) -> Double? { value.isFinite ? value : nil }

    /// libgps returns its own negative codes (`NL_NOCONNECT`…) in errno, or a system errno.
    private static func describe(openError code: Int32) -> String {
        if code < 0, let text = gps_errstr(code) { return String(cString: text) }
        if code > 0 { return SystemError.describe(code) }
        return "unknown error"
    }
}
#endif
