#if GPS
import FieldHAL
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// gpsd's receivers for `fieldhal detect`: the DEVICES report gpsd sends when a watch
/// begins (path, driver, subtype), each written as a `[gps]` that watches that receiver.
enum GpsdDetection {
    static func devices(_ options: DetectionOptions) -> [DetectedDevice] {
        let found = receivers(options)
        // A receiver on a serial port gpsd was not given: gpsd must be told of it first.
        let served = Set(found.map(\.node))
        let candidates = SerialPorts.all().filter { $0.looksLikeGNSS && !served.contains($0.node) }.map { port in
            DetectedDevice(capability: .location, plugin: "gpsd", name: port.product ?? "GNSS receiver", node: port.node,
                           stableName: port.stableName, details: port.details, parameters: ["device": .string(port.stableName ?? port.node)],
                           candidate: "gpsd does not read it yet: add it to DEVICES in /etc/default/gpsd, then systemctl restart gpsd")
        }
        return found + candidates
    }

    private static func receivers(_ options: DetectionOptions) -> [DetectedDevice] {
        guard let connection = try? GpsdConnection(host: options.gpsdHost, port: options.gpsdPort, device: nil),
              let receivers = try? connection.devices(timeout: options.timeout) else { return [] }
        defer { connection.close() }
        let endpoint = "\(options.gpsdHost):\(options.gpsdPort)"
        return receivers.compactMap { receiver -> DetectedDevice? in
            guard let path = receiver["path"]?.string else { return nil }
            let driver = receiver["driver"]?.string ?? "unknown"
            var details = ["gpsd": endpoint, "driver": driver]
            if let subtype = receiver["subtype"]?.string, !subtype.isEmpty { details["subtype"] = subtype }
            if let rate = receiver["bps"]?.integer { details["bps"] = "\(rate)" }
            var parameters: [String: ConfigValue] = ["device": .string(path)]
            if options.gpsdHost != "localhost" { parameters["host"] = .string(options.gpsdHost) }
            if options.gpsdPort != 2947 { parameters["port"] = .integer(options.gpsdPort) }
            return DetectedDevice(capability: .location, plugin: "gpsd", name: driver, node: path,
                                  stableName: StableDeviceName.link(to: path, in: ["/dev/serial/by-id"]),
                                  details: details, parameters: parameters)
        }
    }
}
#endif
