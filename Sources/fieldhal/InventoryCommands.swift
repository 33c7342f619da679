import ArgumentParser
import FieldHAL
import FieldHALComposition
import FieldHALClient
import FieldHALCommandLine
import FieldHALPlugins
import Foundation

extension StatusCommand: FieldHALSubcommand {
    public func run() async throws { try await runReportingFailures() }

    public func execute(_ environment: Environment) async throws {
        // With a daemon, its view: it holds the devices, so a kit loaded here would find the
        // exclusive ones busy.
        let capabilities: [CapabilityStatus]
        if let served = try await environment.throughDaemon({ try await $0.capabilities().capabilities }) {
            capabilities = served
        } else {
            let kit = await environment.loadKit()
            capabilities = kit.statuses
            await kit.close()
        }
        try emit(Report(configuration: environment.configuration.file, stateDirectory: environment.stateDirectory.path,
                        capabilities: capabilities))
    }
}

/// `fieldhal devices`: every device the configuration names, with its name, roles and state:
/// the names `--device` and the API's `?device=` take.
struct DevicesCommand: FieldHALSubcommand {
    static let configuration = CommandConfiguration(
        commandName: "devices",
        abstract: "List every configured device: its capability, name, state, plugin, roles and what it says it is.",
        discussion: "A capability may have several devices ([camera.front], [camera.rear]); the default one (marked *) is what a command without --device uses.")
    @OptionGroup var global: GlobalOptions

    func execute(_ environment: Environment) async throws {
        let devices: [CapabilityStatus]
        if let served = try await environment.throughDaemon({ try await $0.devices() }) {
            devices = served
        } else {
            let kit = await environment.loadKit()
            devices = kit.devices
            await kit.close()
        }
        let configured = devices.filter { $0.name != nil }
        try Output.emit(configured, json: global.json) {
            guard !configured.isEmpty else { return "no devices configured in \(environment.configuration.file)" }
            let rows = configured.map { status -> [String] in
                let state = switch status.state {
                case .available: "available"
                case .unavailable: "UNAVAILABLE"
                case .notConfigured: "not loaded"
                }
                let roles = (status.roles ?? []).map(\.rawValue).joined(separator: ",")
                // Where it is, then what it said it is (model, vendor, serial).
                let what = status.identity.map(\.summary).flatMap { $0.isEmpty ? nil : " (\($0))" } ?? ""
                return [status.capability.rawValue, (status.name ?? "") + (status.isDefault == true ? " *" : ""), state,
                        status.plugin ?? "", roles.isEmpty ? "-" : roles, status.isAvailable ? (status.device ?? "") + what : status.reason ?? ""]
            }
            let widths = (0..<5).map { column in rows.map { $0[column].count }.max() ?? 0 }
            return rows.map { row in
                (0..<5).map { row[$0] + String(repeating: " ", count: widths[$0] - row[$0].count) }.joined(separator: "  ") + "  " + row[5]
            }.joined(separator: "\n")
        }
    }
}

/// `fieldhal detect`: what this machine has, per capability, as the built-in plugins find
/// it — and a configuration for it. The devices are asked (a V4L2 QUERYCAP, an ALSA card's
/// info, gpsd's DEVICES), never claimed.
struct DetectCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "detect",
        abstract: "Find the kit's devices (camera, sound, haptics, GPS, NFC, fingerprint) and write a configuration for them.",
        discussion: """
        Each built-in plugin looks for what it can drive: V4L2 capture nodes (card, driver, bus, \
        formats), ALSA capture and playback devices (by card id, which survives renumbering), evdev \
        force-feedback devices, the receivers gpsd knows (asked at --gpsd), the NFC readers libnfc \
        lists (USB, and those in its configuration or LIBNFC_DEVICE) and fprintd's sensors. USB \
        serial ports are listed as candidates: a GNSS receiver gpsd does not read yet, or a port a \
        PN532 board may be on. Devices are named by udev's stable links (/dev/v4l/by-id, \
        /dev/serial/by-id) when there are any. Nothing is claimed: a device another program is \
        using is still listed.

        --write-config FILE writes a configuration the loader accepts — per capability the first \
        device found, with a comment saying what it is, and the others as commented alternatives — \
        and refuses to replace an existing file unless --force.
        """)
    @OptionGroup var global: GlobalOptions
    @Option(name: .customLong("write-config"), help: ArgumentHelp("Write a configuration for what was found to this file.", valueName: "file"))
    var writeConfig: String?
    @Flag(help: "Replace the --write-config file if it exists.") var force = false
    @Flag(help: "Also probe what must be talked to, to be found: libnfc's serial scan (it writes to every serial port) and each NFC reader's chip (waking it disturbs a program using it).")
    var intrusive = false
    @Option(help: ArgumentHelp("Where gpsd listens (default localhost:2947).", valueName: "host:port"))
    var gpsd = "localhost:2947"
    @Option(help: ArgumentHelp("How long to wait for a service such as gpsd to answer, in seconds (default 2).", valueName: "seconds"))
    var timeout: Double = 2

    struct Found: Encodable {
        let devices: [DetectedDevice]
        let wrote: String?
    }

    /// Needs no configuration: it is how a kit gets its first one.
    func run() async throws {
        try await reportingFailures { try await detect(registry: BuiltinPlugins.registry) }
    }

    private func detect(registry: PluginRegistry) async throws {
        let (host, port) = try gpsdAddress()
        let options = DetectionOptions(intrusive: intrusive, gpsdHost: host, gpsdPort: port,
                                       timeout: try duration(seconds: timeout, option: "--timeout"))
        let devices = await withTaskGroup(of: [DetectedDevice].self) { group in
            for plugin in registry.all { if let detect = plugin.detect { group.addTask { await detect(options) } } }
            return await group.reduce(into: []) { $0 += $1 }
        }.sorted { ($0.capability, $0.plugin, $0.node) < ($1.capability, $1.plugin, $1.node) }
        if let path = writeConfig { try write(devices, to: path, registry: registry) }
        try Output.emit(Found(devices: devices, wrote: writeConfig), json: global.json) {
            var lines = devices.map { device in
                let details = device.details.keys.sorted().map { "\($0) \(device.details[$0]!)" }.joined(separator: ", ")
                return [device.capability.rawValue.padding(toLength: 13, withPad: " ", startingAt: 0),
                        device.plugin.padding(toLength: 6, withPad: " ", startingAt: 0),
                        "\(device.name) at \(device.stableName ?? device.node)" + (details.isEmpty ? "" : " (\(details))")]
                    .joined(separator: " ")
            }
            if devices.isEmpty { lines.append("nothing found by the plugins of this build (fieldhal plugins lists them)") }
            if let path = writeConfig { lines.append("wrote \(path): check it, then fieldhal status --config \(path)") }
            return lines.joined(separator: "\n")
        }
    }

    private func gpsdAddress() throws -> (String, Int) {
        guard let colon = gpsd.lastIndex(of: ":"), let port = Int(gpsd[gpsd.index(after: colon)...]), (1...65535).contains(port),
              colon != gpsd.startIndex else {
            throw FieldHALError(.invalidArgument, subject: "--gpsd", detail: "\"\(gpsd)\" is not host:port", advice: "such as localhost:2947")
        }
        return (String(gpsd[..<colon]), port)
    }

    /// Checked by the loader before it is written; written whole or not at all.
    private func write(_ devices: [DetectedDevice], to path: String, registry: PluginRegistry) throws {
        if !force, FileManager.default.fileExists(atPath: path) {
            throw FieldHALError(.invalidArgument, subject: path, detail: "exists already", advice: "choose another file, or pass --force to replace it")
        }
        let text = DetectedConfiguration.text(for: devices, header: """
            Written by `fieldhal detect` on \(ProcessInfo.processInfo.hostName) at \(ISO8601DateFormatter().string(from: Date())).
            Each section opens the first device found for it; check, then: fieldhal status --config \(path)
            """)
        let directory = (path as NSString).deletingLastPathComponent
        do {
            _ = try KitConfiguration.parse(text, file: path, directory: directory.isEmpty ? "." : directory, registry: registry)
        } catch {
            throw FieldHALError(.malformedData, subject: path, detail: "the configuration detect wrote is not accepted: \(error)",
                                advice: "report this with the output of fieldhal detect --json")
        }
        try path.writeAtomically(Array(text.utf8))
    }
}
