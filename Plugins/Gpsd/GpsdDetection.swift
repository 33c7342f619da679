#if GPS
import FieldHAL
import Foundation

/// gpsd's receivers for `fieldhal detect`: the DEVICES report gpsd sends when a watch
/// begins (path, driver, subtype), each written as a `[gps]` that watches that receiver.
enum GpsdDetection {
    static func devices(_ options: DetectionOptions) -> [DetectedDevice] {
        guard let connection = try? GpsdConnection(host: options.gpsdHost, port: options.gpsdPort, device: nil),
              let receivers = try? connection.devices(timeout: options.timeout) else { return [] }
        defer { connection.close() }
        let endpoint = "\(options.gpsdHost):\(options.gpsdPort)"
        return receivers.compactMap { receiver -> DetectedDevice? in
            guard let path = receiver["path"] as? String else { return nil }
            let driver = receiver["driver"] as? String ?? "unknown"
            var details = ["gpsd": endpoint, "driver": driver]
            if let subtype = receiver["subtype"] as? String, !subtype.isEmpty { details["subtype"] = subtype }
            if let rate = receiver["bps"] as? Int { details["bps"] = "\(rate)" }
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
