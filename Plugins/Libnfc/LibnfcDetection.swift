#if NFC
import CNFC
import FieldHAL
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// NFC readers for `fieldhal detect`, as libnfc lists them (nfc_list_devices): USB readers,
/// and readers named in libnfc's configuration or `LIBNFC_DEVICE`; with `--intrusive`,
/// libnfc's serial scan too (it writes to every serial port: off by default). Each is opened
/// for a moment for its chip's name with `--intrusive` only, and offered as the reader and
/// the tag emulator (one chip does both; the daemon shares it). Serial ports that may hold a PN532 board are
/// listed as candidates (the written configuration leaves them commented out).
enum LibnfcDetection {
    static func devices(_ options: DetectionOptions) -> [DetectedDevice] {
        LibnfcDevice.quietLibnfcLog
        if options.intrusive { setenv("LIBNFC_INTRUSIVE_SCAN", "true", 1) }
        var context: OpaquePointer?
        nfc_init(&context)
        guard let context else { return [] }
        defer { nfc_exit(context) }
        var connstrings: [String] = []
        var buffer = [CChar](repeating: 0, count: 1024)
        var index = 0
        while index < 16, fieldhal_nfc_device_at(context, index, &buffer, buffer.count) > index {
            connstrings.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
            index += 1
        }
        var found: [DetectedDevice] = []
        for connstring in connstrings {
            // Opening a reader wakes its chip and configures it, which would disturb a
            // program using it (the daemon offering the duress tag): only when asked.
            var chip = ""
            var details = ["driver": String(connstring.prefix { $0 != ":" })]
            if options.intrusive {
                if let device = nfc_open(context, connstring) {
                    chip = LibnfcDevice.chip(of: device)  // "PN532 v1.6"; the device's own name may be libnfc's label
                    if chip.isEmpty { chip = String(cString: nfc_device_get_name(device)) }
                    nfc_close(device)
                } else {
                    details["note"] = "could not be opened now (in use by another program?)"
                }
            }
            for capability in [Capability.nfcReader, .nfcEmulator] {
                found.append(DetectedDevice(capability: capability, plugin: "libnfc", name: chip.isEmpty ? connstring : chip,
                                            node: connstring, details: details, parameters: ["connstring": .string(connstring)]))
            }
        }
        let listed = Set(connstrings.compactMap { $0.split(separator: ":", maxSplits: 1).last.map(String.init) })
        for port in SerialPorts.all() where !port.looksLikeGNSS && !listed.contains(port.node) && !listed.contains(port.stableName ?? "") {
            let connstring = "pn532_uart:" + (port.stableName ?? port.node)
            found.append(DetectedDevice(capability: .nfcReader, plugin: "libnfc", name: port.product ?? "serial port", node: port.node,
                                        stableName: port.stableName, details: port.details, parameters: ["connstring": .string(connstring)],
                                        candidate: "a serial port; a PN532 board on it answers `nfc-list` (or fieldhal detect --intrusive)"))
        }
        return found
    }
}
#endif
