#if Fprintd
import FieldHAL
import FieldHALProcess
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// fprintd's sensors for `fieldhal detect`: the manager's GetDevices on the system bus
/// (through gdbus, as the plugin uses fprintd's own tools), with each sensor's name and scan
/// type. Asking starts fprintd by D-Bus activation if it is not running; nothing is claimed.
enum FprintdDetection {
    static func devices(_ options: DetectionOptions) async -> [DetectedDevice] {
        let subject = "biometrics fprintd"
        func call(_ path: String, _ method: String, _ arguments: [String] = []) async -> String? {
            let outcome = try? await ToolProcess.run("/usr/bin/gdbus", ["call", "--system", "--dest", "net.reactivated.Fprint",
                                                                        "--object-path", path, "--method", method] + arguments,
                                                     subject: subject, timeout: options.timeout, waitingFor: "fprintd")
            guard let outcome, outcome.status == 0 else { return nil }
            return outcome.standardOutput.joined(separator: "\n")
        }
        guard let listed = await call("/net/reactivated/Fprint/Manager", "net.reactivated.Fprint.Manager.GetDevices") else { return [] }
        let bus = ProcessInfo.processInfo.environment["DBUS_SYSTEM_BUS_ADDRESS"]
        var found: [DetectedDevice] = []
        for path in quoted(in: listed) where path.hasPrefix("/net/reactivated/Fprint/Device/") {
            let property = { (name: String) async -> String? in
                await call(path, "org.freedesktop.DBus.Properties.Get", ["net.reactivated.Fprint.Device", name]).flatMap { quoted(in: $0).first }
            }
            let name = await property("name") ?? path
            var details = ["fprintd": path]
            if let scanType = await property("scan-type") { details["scan type"] = scanType }
            // A system bus other than the usual one (a lab's, a container's) is part of
            // where the sensor is.
            found.append(DetectedDevice(capability: .biometrics, plugin: "fprintd", name: name, node: path, details: details,
                                        parameters: bus.map { ["bus_address": .string($0)] } ?? [:]))
        }
        return found
    }

    /// The single-quoted strings in gdbus's GVariant text: `([objectpath '/net/…/0'],)`.
    static func quoted(in text: String) -> [String] {
        text.split(separator: "'", omittingEmptySubsequences: false).enumerated().filter { $0.offset % 2 == 1 }.map { String($0.element) }
    }
}
#endif
