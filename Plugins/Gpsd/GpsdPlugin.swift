import FieldHAL
import FieldHALSystem

/// The gpsd backend: location from gpsd through libgps. Built with the `GPS` trait.
public enum GpsdPlugin {
    #if GPS
    public static let descriptor: PluginDescriptor? = PluginDescriptor(
        name: "gpsd",
        summary: "location from gpsd through libgps (any receiver gpsd supports)",
        capabilities: [.location: parameters],
        open: { _, parameters, _ in
            .location(try await GpsdLocationProvider.open(try settings(from: parameters)))
        },
        detect: { options in (try? await DeviceThread.runOnce(name: "fieldhal-gpsd-detect") { GpsdDetection.devices(options) }) ?? [] }
    )
    #else
    public static let descriptor: PluginDescriptor? = nil
    #endif

    static let parameters: [ParameterSpec] = [
        ParameterSpec("host", .string, help: "gpsd's host (default localhost)"),
        ParameterSpec("port", .integer, help: "gpsd's port (default 2947)"),
        ParameterSpec("device", .string, help: "watch only this receiver, by gpsd's path (such as /dev/ttyACM0)"),
        ParameterSpec("silence_timeout_ms", .integer, help: "no report for this long is reported as a lost source (default 2000)"),
        ParameterSpec("reconnect_max_ms", .integer, help: "the longest wait between reconnection attempts (default 10000)"),
    ]

    #if GPS
    static func settings(from parameters: PluginParameters) throws -> GpsdLocationProvider.Settings {
        var settings = GpsdLocationProvider.Settings()
        if let host = parameters.string("host") { settings.host = host }
        if let port = parameters.integer("port") {
            guard (1...65535).contains(port) else { throw invalid("port", "\(port) is not a TCP port (1–65535)") }
            settings.port = port
        }
        settings.device = parameters.string("device")
        if let silence = parameters.integer("silence_timeout_ms") {
            guard silence >= 100 else { throw invalid("silence_timeout_ms", "must be at least 100") }
            settings.silenceTimeout = .milliseconds(silence)
        }
        if let ceiling = parameters.integer("reconnect_max_ms") {
            guard ceiling >= 250 else { throw invalid("reconnect_max_ms", "must be at least 250") }
            settings.reconnectCeiling = .milliseconds(ceiling)
        }
        return settings
    }

    private static func invalid(_ key: String, _ detail: String) -> FieldHALError {
        FieldHALError(.invalidArgument, subject: "gpsd plugin", detail: "\(key): \(detail)")
    }
    #endif
}
