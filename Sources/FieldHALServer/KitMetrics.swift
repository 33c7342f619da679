import FieldHAL
import FieldHALAPI
import Foundation
import Prometheus

/// What a fleet's Prometheus reads of one kit (issue 46), in Prometheus's text format:
/// `GET /v1/metrics` on the socket (scope `status`), and `/metrics` on `[metrics] listen`.
///
/// Only what the kit's users and clients do is counted, never the kit's own work: a duress
/// sign-in's silent capture opens the camera and the microphone and uploads evidence, and a
/// metric that moved with it would tell anyone on the fleet's dashboards (docs/stealth.md).
/// So devices are counted by whether they are there, requests by what the API answered, and
/// the process's own memory and descriptors — which a capture does move — only when an
/// operator asks for them (`[metrics] process = true`, documented as revealing).
public final class KitMetrics: Sendable {
    let registry = PrometheusCollectorRegistry()
    /// Event streams open now, through either door.
    private let followers: Gauge
    private let includesProcess: Bool

    public init(includesProcess: Bool = false) {
        self.includesProcess = includesProcess
        followers = registry.makeGauge(descriptor: MetricNameDescriptor(
            namespace: "fieldhal", metricName: "event", unitName: "followers", helpText: "event streams open now, through either door"))
    }

    /// The route's name for the counter: the API's own routes as they are, anything else
    /// as `other` (a client probing paths must not grow the metrics without bound).
    static func route(_ path: String) -> String {
        APIErrorMiddleware.routes[path] != nil ? path : "other"
    }

    func answered(door: String, path: String, status: Int) {
        count("api", "requests", help: "API requests answered, by door, route and status",
              [("door", door), ("route", Self.route(path)), ("status", "\(status)")])
    }

    /// Devices that changed state (unplugged or back, a plugin that died or serves again),
    /// by the state they changed to.
    func deviceChanged(_ status: CapabilityStatus) {
        count("device", "changes", help: "devices that changed state (unplugged or back, a plugin that died or serves again), by the state they changed to",
              [("capability", status.capability.rawValue), ("device", status.name ?? "default"), ("state", status.state.rawValue)])
    }

    /// Counters made as their labels first appear, by family and labels.
    private let labelled = LockedValue<[String: Counter]>([:])

    private func count(_ subsystem: String, _ name: String, help: String, _ labels: [(String, String)], by amount: Int = 1) {
        let key = ([subsystem, name] + labels.map { "\($0.0)=\($0.1)" }).joined(separator: " ")
        let counter = labelled.withLock { counters in
            if let counter = counters[key] { return counter }
            let counter = registry.makeCounter(
                descriptor: MetricNameDescriptor(namespace: "fieldhal", subsystem: subsystem, metricName: name, unitName: "total", helpText: help),
                labels: labels)
            counters[key] = counter
            return counter
        }
        counter.increment(by: Int64(amount))
    }

    /// A tag a client read through the API (`POST /v1/nfc/read`).
    func tagRead(device: String) {
        count("nfc", "tags_read", help: "tags API clients read, by reader", [("device", device)])
    }

    /// A client's read that found no tag or failed, by the error's kind (`timeout`, `busy`…).
    func readFailed(device: String, kind: String) {
        count("nfc", "reads_failed", help: "API clients' tag reads that failed, by reader and the error's kind", [("device", device), ("kind", kind)])
    }

    /// A device used for an API client (`DeviceUse`): recordings, photos, feedback, writes.
    func used(_ use: DeviceUse) {
        count("api", "device_uses", help: "devices used for API clients, by request, device and outcome (ok or the error's kind)",
              [("request", use.request.rawValue), ("device", use.device), ("outcome", use.failure?.kind.rawValue ?? "ok")])
        if let video = use.video, video.droppedFrames > 0 {
            count("camera", "frames_dropped", help: "frames the camera dropped in recordings API clients asked for, by camera",
                  [("device", use.device)], by: video.droppedFrames)
        }
    }

    /// A figure another part of the daemon keeps and the scrape reads (the MQTT bridge's).
    public struct Reading: Sendable {
        public var name: String
        public var help: String
        /// `gauge` or `counter`.
        public var type: String
        public var labels: [(String, String)]
        public var value: Double

        public init(_ name: String, help: String, type: String = "gauge", labels: [(String, String)] = [], value: Double) {
            self.name = name
            self.help = help
            self.type = type
            self.labels = labels
            self.value = value
        }
    }
    private let sources = LockedValue<[@Sendable () -> [Reading]]>([])

    /// Reads `source` at every scrape from now on.
    public func read(_ source: @escaping @Sendable () -> [Reading]) {
        sources.withLock { $0.append(source) }
    }

    func followerCame() { followers.increment() }
    func followerLeft() { followers.decrement() }

    /// The text a scrape gets: the counters kept, and what is read now (each device's
    /// state, the version, the process when asked).
    func exposition(devices: [CapabilityStatus], version: String) -> [UInt8] {
        var bytes = registry.emitToBuffer()
        var now = Exposition()
        now.family("fieldhal_build_info", help: "the daemon's version", type: "gauge")
        now.sample("fieldhal_build_info", [("version", version)], 1)
        now.family("fieldhal_device_up", help: "1 when a configured device is there and usable, 0 when not", type: "gauge")
        for device in devices where device.state != .notConfigured {
            now.sample("fieldhal_device_up", [("capability", device.capability.rawValue), ("device", device.name ?? "default")],
                       device.state == .available ? 1 : 0)
        }
        // One family header per name, its samples under it (the format allows no second).
        var described: Set<String> = []
        for reading in sources.value.flatMap({ $0() }).sorted(by: { $0.name < $1.name }) {
            if described.insert(reading.name).inserted { now.family(reading.name, help: reading.help, type: reading.type) }
            now.sample(reading.name, reading.labels, reading.value)
        }
        if includesProcess, let process = ProcessFigures.now() {
            now.family("process_resident_memory_bytes", help: "resident memory of the daemon", type: "gauge")
            now.sample("process_resident_memory_bytes", [], Double(process.residentBytes))
            now.family("process_open_fds", help: "descriptors the daemon holds", type: "gauge")
            now.sample("process_open_fds", [], Double(process.descriptors))
            now.family("fieldhal_process_threads", help: "threads of the daemon", type: "gauge")
            now.sample("fieldhal_process_threads", [], Double(process.threads))
        }
        bytes.append(contentsOf: now.text.utf8)
        return bytes
    }

    /// Families read at scrape time, written as the text format says (`# HELP`, `# TYPE`,
    /// then `name{label="value"} number`), label values escaped.
    struct Exposition {
        var text = ""

        mutating func family(_ name: String, help: String, type: String) {
            text += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
        }

        mutating func sample(_ name: String, _ labels: [(String, String)], _ value: Double) {
            let escaped = labels.map { "\($0.0)=\"\(Self.escape($0.1))\"" }.joined(separator: ",")
            let number = value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : "\(value)"
            text += labels.isEmpty ? "\(name) \(number)\n" : "\(name){\(escaped)} \(number)\n"
        }

        static func escape(_ value: String) -> String {
            value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
                .replacingOccurrences(of: "\n", with: "\\n")
        }
    }
}

/// The daemon's resident memory, descriptors and threads, from `/proc/self`.
struct ProcessFigures {
    var residentBytes: Int
    var descriptors: Int
    var threads: Int

    static func now() -> ProcessFigures? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        func field(_ name: String) -> Int? {
            guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix(name + ":") }) else { return nil }
            // "VmRSS:\t   41232 kB": the number after the tab and the padding.
            return line.dropFirst(name.count + 1).split(whereSeparator: { $0 == " " || $0 == "\t" }).first.flatMap { Int($0) }
        }
        guard let resident = field("VmRSS"), let threads = field("Threads") else { return nil }
        let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0
        return ProcessFigures(residentBytes: resident * 1024, descriptors: descriptors, threads: threads)
    }
}
