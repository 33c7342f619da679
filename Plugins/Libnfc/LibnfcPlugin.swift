import FieldHAL
import FieldHALSystem

/// The libnfc backend: NFC readers (PN532 on UART/I2C/SPI, ACR122, PN533 …) as a reader of
/// NFC Forum Type 2 and Type 4 tags and as an emulated Type 4 tag. Built with the `NFC` trait.
public enum LibnfcPlugin {
    #if NFC
    public static let descriptor: PluginDescriptor? = PluginDescriptor(
        name: "libnfc",
        summary: "NFC readers through libnfc: read/write Type 2, read Type 4, emulate a Type 4 tag",
        capabilities: [.nfcReader: readerParameters, .nfcEmulator: commonParameters],
        open: { capability, parameters, _ in
            let settings = try readerSettings(from: parameters)
            let device = try await LibnfcDevices.shared.acquire(parameters.string("connstring"))
            return capability == .nfcEmulator
                ? .nfcEmulator(LibnfcTagEmulator(device: device))
                : .nfcReader(LibnfcReader(device: device, settings: settings))
        },
        detect: { options in (try? await DeviceThread.runOnce(name: "fieldhal-libnfc-detect") { LibnfcDetection.devices(options) }) ?? [] },
        locate: { _, parameters, _ in
            // A reader on a serial port (pn532_uart:/dev/ttyUSB0, perhaps a by-id link) is
            // followed by its tty; a USB reader or libnfc's own choice is not: the plugin
            // reopens the chip after an I/O error by itself.
            guard let port = serialPort(in: parameters.string("connstring")) else { return nil }
            return DevicePresence(subsystems: ["tty"], node: DevicePresence.node(at: port))
        }
    )
    #else
    public static let descriptor: PluginDescriptor? = nil
    #endif

    static let commonParameters: [ParameterSpec] = [
        ParameterSpec("connstring", .string,
                      help: "libnfc connection string, such as pn532_uart:/dev/ttyUSB0 or acr122_usb (default: the first reader libnfc finds)"),
    ]

    /// The serial port of a UART connection string (`pn532_uart:/dev/ttyUSB0:115200` →
    /// `/dev/ttyUSB0`), nil for any other.
    static func serialPort(in connstring: String?) -> String? {
        guard let connstring else { return nil }
        let fields = connstring.split(separator: ":", omittingEmptySubsequences: false)
        guard fields.count >= 2, fields[0].hasSuffix("_uart"), fields[1].hasPrefix("/") else { return nil }
        return String(fields[1])
    }

    static let readerParameters: [ParameterSpec] = commonParameters + [
        ParameterSpec("poll_interval_ms", .integer, help: "pause between polls for a tag (default 100)"),
        ParameterSpec("command_timeout_ms", .integer, help: "how long a tag may take to answer one command (default 500)"),
        ParameterSpec("exchanges", .boolean,
                      help: "give each tag read with the commands and answers that read it, for `fieldhal record` to keep (default false)"),
    ]

    #if NFC
    static func readerSettings(from parameters: PluginParameters) throws -> LibnfcReader.Settings {
        var settings = LibnfcReader.Settings()
        if let interval = parameters.integer("poll_interval_ms") {
            guard (10...5000).contains(interval) else { throw invalid("poll_interval_ms", "must be 10–5000") }
            settings.pollInterval = .milliseconds(interval)
        }
        if let timeout = parameters.integer("command_timeout_ms") {
            guard (50...10000).contains(timeout) else { throw invalid("command_timeout_ms", "must be 50–10000") }
            settings.commandTimeout = .milliseconds(timeout)
        }
        settings.keepsExchanges = parameters.boolean("exchanges") ?? false
        return settings
    }

    private static func invalid(_ key: String, _ detail: String) -> FieldHALError {
        FieldHALError(.invalidArgument, subject: "libnfc plugin", detail: "\(key): \(detail)")
    }
    #endif
}
