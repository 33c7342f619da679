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

/// The fake kit: a scriptable simulator for every capability, shipped in the product (as
/// SANE ships its `test` backend) so flows and demos run on a laptop with no hardware.
/// Deterministic: the same configuration plays out the same way on every run.
public enum FakePlugin {
    public static let descriptor = PluginDescriptor(
        name: "fake",
        summary: "scriptable simulators for every capability (no hardware)",
        capabilities: [
            .location: locationParameters,
            .nfcReader: nfcReaderParameters,
            .nfcEmulator: nfcEmulatorParameters,
            .camera: [deviceParameter,
                      ParameterSpec("realtime", .boolean, help: "record video at its frame rate, as a camera does (default false: as fast as frames are made)"),
                      unplugParameter],
            .microphone: microphoneParameters,
            .speaker: outputParameters,
            .haptics: outputParameters,
            .biometrics: biometricsParameters,
        ],
        open: open
    )

    static let deviceParameter = ParameterSpec("device", .string, help: "a name for the simulated device")
    static let unplugParameter = ParameterSpec("unplug_after_ms", .integer,
                                               help: "a recording ends early after this much of it, as when the device is unplugged: what came before is kept (default: never)")

    static let locationParameters: [ParameterSpec] = [
        deviceParameter,
        ParameterSpec("track", .records([
            ParameterSpec("lat", .number, required: true, range: -90...90, help: "latitude, degrees"),
            ParameterSpec("lon", .number, required: true, range: -180...180, help: "longitude, degrees"),
            ParameterSpec("alt", .number, range: -12_000...100_000, help: "altitude, metres (makes a 3D fix)"),
            ParameterSpec("acc", .number, range: 0...1_000_000, help: "horizontal accuracy, metres"),
            ParameterSpec("vacc", .number, range: 0...1_000_000, help: "vertical accuracy, metres"),
            ParameterSpec("speed", .number, range: 0...10_000, help: "speed, m/s"),
            ParameterSpec("course", .number, range: 0...360, help: "course over ground, degrees"),
            ParameterSpec("sats", .integer, range: 0...255, help: "satellites used"),
            ParameterSpec("mode", .string, help: "\"no-fix\", \"2d\" or \"3d\" (default: 3d with alt, else 2d)"),
        ]), help: "the points to play, one per interval"),
        ParameterSpec("nmea_file", .string, help: "an NMEA 0183 log to play instead of `track` (GGA/RMC/GSA)"),
        ParameterSpec("no_fix", .boolean, help: "report no fix at all (a receiver indoors)"),
        ParameterSpec("interval_ms", .integer, range: 1...86_400_000, help: "time between points (default 1000)"),
        ParameterSpec("loop", .boolean, help: "replay the track when it ends (default true)"),
    ]

    static let nfcReaderParameters: [ParameterSpec] = [
        deviceParameter,
        ParameterSpec("tags", .records([
            ParameterSpec("type", .string, help: "\"ntag213\" (Type 2), \"type4\", \"mifare-classic\" or \"iso14443a\""),
            ParameterSpec("uid", .string, help: "UID in hex, such as \"04:A1:B2:C3:D4:E5:F6\""),
            ParameterSpec("text", .string, help: "an NDEF Text record to hold"),
            ParameterSpec("language", .string, help: "the Text record's language (default en)"),
            ParameterSpec("uri", .string, help: "an NDEF URI record to hold"),
            ParameterSpec("raw_data", .string, help: "hex bytes of the data area (Type 2: its TLVs) or of the NDEF message (Type 4), for corrupt or unusual tags"),
            ParameterSpec("arrive_ms", .integer, help: "when the tag enters the field, after opening (default 0)"),
            ParameterSpec("leave_ms", .integer, help: "when it leaves (default: it stays)"),
        ]), help: "the tags that pass the reader"),
    ]

    static let nfcEmulatorParameters: [ParameterSpec] = [
        deviceParameter,
        ParameterSpec("reader", .string, help: "\"reads\": a reader comes and reads the tag (default); \"absent\": none comes"),
        ParameterSpec("read_after_ms", .integer, help: "when the reader arrives (default 300)"),
    ]

    static let microphoneParameters: [ParameterSpec] = [
        deviceParameter,
        ParameterSpec("tone_hz", .number, help: "sine tone frequency (default 440)"),
        ParameterSpec("level_dbfs", .number, help: "tone level in dBFS (default -12)"),
        ParameterSpec("file", .string, help: "a PCM WAV file to loop instead of the tone"),
        ParameterSpec("realtime", .boolean, help: "take as long as the recording lasts (default true)"),
        unplugParameter,
    ]

    /// Haptics and speaker: output devices that record what they played.
    static let outputParameters: [ParameterSpec] = [
        deviceParameter,
        ParameterSpec("log_file", .string, help: "append everything played to this JSON-lines file"),
        ParameterSpec("realtime", .boolean, help: "take as long as what is played lasts (default true)"),
    ]

    static let biometricsParameters: [ParameterSpec] = [
        deviceParameter,
        ParameterSpec("has_sensor", .boolean, help: "whether a sensor is present (default true)"),
        ParameterSpec("enrolled", .strings, help: "enrolled fingers, fprintd names (default [\"right-index-finger\"])"),
        ParameterSpec("outcomes", .strings, help: "verify outcomes in order, the last repeating: match, no-match, retry, gone, no-finger"),
        ParameterSpec("scan_delay_ms", .integer, help: "time a scan takes (default 200)"),
    ]

    @Sendable static func open(_ capability: Capability, _ parameters: PluginParameters,
                               _ context: PluginContext) async throws -> CapabilityProvider {
        let device = parameters.string("device") ?? "fake-\(capability.rawValue.replacing("_", with: "-"))0"
        switch capability {
        case .location:
            return .location(try openLocation(device, parameters, context))
        case .nfcReader:
            return .nfcReader(FakeNFCReader(deviceName: device, tags: try scriptedTags(device, parameters)))
        case .nfcEmulator:
            guard let reader = FakeNFCTagEmulator.ScriptedReader(rawValue: parameters.string("reader") ?? "reads") else {
                throw FieldHALError(.invalidArgument, subject: "nfc_emulator \(device)", detail: "reader must be \"reads\" or \"absent\"")
            }
            return .nfcEmulator(FakeNFCTagEmulator(deviceName: device, reader: reader,
                                                   readAfterMilliseconds: parameters.integer("read_after_ms") ?? 300))
        case .camera:
            return .camera(FakeCamera(deviceName: device, realtime: parameters.boolean("realtime") ?? false,
                                      unplugAfter: try unplugAfter(parameters, subject: "camera \(device)")))
        case .microphone:
            return .microphone(try openMicrophone(device, parameters, context))
        case .speaker:
            return .speaker(FakeSpeaker(deviceName: device, logFile: parameters.string("log_file").map(context.resolve(path:)),
                                        realtime: parameters.boolean("realtime") ?? true))
        case .haptics:
            return .haptics(FakeHapticsEngine(deviceName: device, logFile: parameters.string("log_file").map(context.resolve(path:)),
                                              realtime: parameters.boolean("realtime") ?? true))
        case .biometrics:
            return .biometrics(try openBiometrics(device, parameters))
        }
    }

    static func openLocation(_ device: String, _ parameters: PluginParameters, _ context: PluginContext) throws -> FakeLocationProvider {
        let subject = "gps \(device)"
        var points: [FakeLocationProvider.Point]
        if let file = parameters.string("nmea_file") {
            let path = context.resolve(path: file)
            // A regular file of at most 16 MiB: `/dev/zero` once grew the process to 7.7 GB.
            guard let bytes = try RegularFile.read(path, limit: 16 << 20, what: "NMEA log") else {
                throw FieldHALError(.deviceNotFound, subject: subject, detail: "NMEA log \(path) does not exist")
            }
            points = NMEATrack.points(fromLog: String(decoding: bytes, as: UTF8.self))
            guard !points.isEmpty else {
                throw FieldHALError(.malformedData, subject: subject, detail: "NMEA log \(path) has no valid GGA sentence")
            }
        } else {
            points = try (parameters.records("track") ?? []).enumerated().map { index, record in
                let altitude = record.number("alt")
                let mode: FixMode
                switch record.string("mode") {
                case nil: mode = altitude == nil ? .twoD : .threeD
                case let name?:
                    guard let parsed = FixMode(rawValue: name) else {
                        throw FieldHALError(.invalidArgument, subject: subject, detail: "track point \(index + 1): mode must be no-fix, 2d or 3d")
                    }
                    mode = parsed
                }
                return .init(mode: mode, latitude: record.number("lat")!, longitude: record.number("lon")!, altitude: altitude,
                             horizontalAccuracy: record.number("acc"), verticalAccuracy: record.number("vacc"),
                             speed: record.number("speed"), course: record.number("course"), satellites: record.integer("sats"))
            }
        }
        if parameters.boolean("no_fix") == true || points.isEmpty {
            points = [.init(mode: .noFix, latitude: 0, longitude: 0, satellites: 0)]
        }
        return FakeLocationProvider(deviceName: device, points: points, intervalMilliseconds: parameters.integer("interval_ms") ?? 1000,
                                    loops: parameters.boolean("loop") ?? true)
    }

    static func scriptedTags(_ device: String, _ parameters: PluginParameters) throws -> [ScriptedTag] {
        try (parameters.records("tags") ?? []).enumerated().map { index, record in
            func fail(_ detail: String) -> FieldHALError {
                FieldHALError(.invalidArgument, subject: "nfc \(device)", detail: "tag \(index + 1): \(detail)")
            }
            let type: NFCTagType = switch record.string("type") ?? "ntag213" {
            case "ntag213", "ntag215", "ntag216", "ultralight", "type2": .type2
            case "type4": .type4
            case "mifare-classic": .mifareClassic
            case "iso14443a": .iso14443a
            case let other: throw fail("unknown type \"\(other)\"")
            }
            let uidText = record.string("uid") ?? (type == .type4 ? "08:12:34:56" : "04:A1:B2:C3:D4:E5:\(hexDigits(index))")
            guard let uid = [UInt8](hexString: uidText), [4, 7, 10].contains(uid.count) else {
                throw fail("uid \"\(uidText)\" is not 4, 7 or 10 hex bytes")
            }
            var message: NDEFMessage? = nil
            do {
                if let text = record.string("text") { message = try .text(text, language: record.string("language") ?? "en") }
                if let uri = record.string("uri") { message = NDEFMessage(records: (message?.records ?? []) + [.uri(uri)]) }
            } catch {
                throw fail("\(error)")
            }
            var content: [UInt8] = []
            if let raw = record.string("raw_data") {
                guard let bytes = [UInt8](hexString: raw) else { throw fail("raw_data is not hex") }
                content = bytes
            } else if let message {
                content = type == .type2 ? try Type2TLV.encodeDataArea(message) : try message.encoded()
            } else if type == .type2 {
                content = [0x03, 0x00, 0xFE]  // a blank, NDEF-formatted tag
            } else if type == .type4 {
                content = try NDEFMessage.empty.encoded()
            }
            return ScriptedTag(type: type, uid: uid, content: content, arriveMilliseconds: record.integer("arrive_ms") ?? 0,
                               leaveMilliseconds: record.integer("leave_ms"))
        }
    }

    private static func hexDigits(_ index: Int) -> String {
        (index & 0xFF).hex(width: 2, uppercase: true)
    }

    static func openMicrophone(_ device: String, _ parameters: PluginParameters, _ context: PluginContext) throws -> FakeMicrophone {
        let source: FakeMicrophone.Source
        if let file = parameters.string("file") {
            let path = context.resolve(path: file)
            guard let bytes = try AtomicFile.read(path) else {
                throw FieldHALError(.deviceNotFound, subject: "microphone \(device)", detail: "WAV file \(path) does not exist")
            }
            source = .samples(try WAVSampleReader.monoSamples(bytes, file: path))
        } else {
            let level = min(0, parameters.number("level_dbfs") ?? -12)
            source = .tone(frequency: parameters.number("tone_hz") ?? 440, amplitude: pow(10, level / 20))
        }
        return FakeMicrophone(deviceName: device, source: source, realtime: parameters.boolean("realtime") ?? true,
                              unplugAfter: try unplugAfter(parameters, subject: "microphone \(device)"))
    }

    static func unplugAfter(_ parameters: PluginParameters, subject: String) throws -> Duration? {
        guard let milliseconds = parameters.integer("unplug_after_ms") else { return nil }
        guard milliseconds > 0 else {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "unplug_after_ms must be above 0, got \(milliseconds)")
        }
        return .milliseconds(milliseconds)
    }

    /// What a fake device's recording ends early with (`unplug_after_ms`): the real
    /// backends' `disconnected`.
    static func unplugged(_ subject: String, after: Duration) -> FieldHALError {
        FieldHALError(.disconnected, subject: subject, detail: "unplugged after \(after.secondsDescription) of recording (the fake kit's unplug_after_ms)",
                      advice: "check the cable; the next capture opens it again")
    }

    static func openBiometrics(_ device: String, _ parameters: PluginParameters) throws -> FakeBiometricAuthenticator {
        let subject = "biometrics \(device)"
        let enrolled = try (parameters.strings("enrolled") ?? [Finger.rightIndex.rawValue]).map { name in
            guard let finger = Finger(rawValue: name) else {
                throw FieldHALError(.invalidArgument, subject: subject,
                                    detail: "unknown finger \"\(name)\"; fprintd names: \(Finger.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return finger
        }
        let outcomes = try (parameters.strings("outcomes") ?? ["match"]).map { name in
            guard let outcome = FakeBiometricAuthenticator.Outcome(rawValue: name) else {
                throw FieldHALError(.invalidArgument, subject: subject,
                                    detail: "unknown outcome \"\(name)\"; use \(FakeBiometricAuthenticator.Outcome.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return outcome
        }
        return FakeBiometricAuthenticator(deviceName: device, hasSensor: parameters.boolean("has_sensor") ?? true, enrolled: enrolled,
                                          outcomes: outcomes, scanDelay: .milliseconds(parameters.integer("scan_delay_ms") ?? 200))
    }
}
