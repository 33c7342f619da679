import CSodium
import FieldHAL
import FieldHALAPI
import FieldHALLock
import FieldHALPluginProtocol
import FieldHALSystem
import FieldHALVault
import Foundation
import TransrifyWire

/// Every parser of outside input, as a function of arbitrary bytes (issue 18). Each must
/// return or throw its typed error — never crash, hang or grow without bound — and where an
/// input decodes, what it decodes to must survive the way back (the oracle beyond "no crash").
/// `fuzz/run` builds them with libFuzzer and AddressSanitizer; built normally,
/// `fieldhal-fuzz TARGET FILE…` replays a corpus (CI replays the committed one).
enum FuzzTargets {
    static let all: [String: @Sendable ([UInt8]) -> Void] = [
        "ndef": ndef, "type2": type2, "type4-reader": type4Reader, "type4-tag": type4Tag,
        "config": config, "api-request": apiRequest, "location": location,
        "transrify-answer": transrifyAnswer, "alert-channel": alertChannel, "vault": vaultEntry, "audit-log": auditLog,
        "plugin-message": pluginMessage, "fix-event": fixEvent, "request-head": requestHead,
    ]

    /// An NDEF message as a tag in the field hands it over.
    static func ndef(_ bytes: [UInt8]) {
        guard let message = try? NDEFMessage(decoding: bytes) else { return }
        for record in message.records { _ = try? record.content() }
        if let encoded = try? message.encoded() {
            guard let again = try? NDEFMessage(decoding: encoded), again == message else {
                fatalError("ndef: a decoded message does not survive encoding: \(bytes)")
            }
        }
    }

    /// A Type 2 tag's data area: its TLVs, and the NDEF message in them.
    static func type2(_ bytes: [UInt8]) {
        _ = try? Type2TLV.parse(bytes)
        if let message = (try? Type2TLV.ndefMessage(inDataArea: bytes)) ?? nil, let area = try? Type2TLV.encodeDataArea(message) {
            guard let again = (try? Type2TLV.ndefMessage(inDataArea: area)) ?? nil, again == message else {
                fatalError("type2: a message read from a data area does not survive writing: \(bytes)")
            }
        }
    }

    /// A Type 4 card's answers to the reader's APDUs: each answer is a length byte and that
    /// many bytes of the input, in turn; past the input, the card stays silent (an error).
    static func type4Reader(_ bytes: [UInt8]) {
        var rest = bytes[...]
        _ = try? Type4NDEFReader.readMessage { _ in
            guard let count = rest.first else { throw NDEFError.truncated("the card went silent") }
            let answer = Array(rest.dropFirst().prefix(Int(count)))
            rest = rest.dropFirst(1 + answer.count)
            return answer
        }
    }

    /// The APDUs an outside reader sends the kit's emulated Type 4 tag (length-prefixed).
    static func type4Tag(_ bytes: [UInt8]) {
        guard var tag = try? Type4TagApplication(message: .uri("trf:duress:fuzz")) else { fatalError("type4-tag: the emulated tag cannot be made") }
        var rest = bytes[...]
        while let count = rest.first {
            let apdu = Array(rest.dropFirst().prefix(Int(count)))
            rest = rest.dropFirst(1 + apdu.count)
            let answer = tag.respond(to: apdu)
            guard answer.count >= 2, answer.count <= Type4TagApplication.maxResponseLength + 2 else {
                fatalError("type4-tag: an answer of \(answer.count) bytes to \(apdu)")
            }
        }
    }

    /// A configuration file, with the core's schema (no plugins: an unknown plugin is one
    /// more error to report well).
    static func config(_ bytes: [UInt8]) {
        guard let text = String(validating: bytes, as: UTF8.self) else { return }
        _ = try? KitConfiguration.parse(text, file: "fuzz.toml", directory: "/", registry: PluginRegistry([]))
    }

    /// The bodies the daemon's API decodes from its callers.
    static func apiRequest(_ bytes: [UInt8]) {
        let data = Data(bytes), decoder = JSONDecoder()
        _ = try? decoder.decode(APIUnlock.self, from: data)
        _ = try? decoder.decode(APILockSetup.self, from: data)
        _ = try? decoder.decode(APILockSettings.self, from: data)
        _ = try? decoder.decode(APISignIn.self, from: data)
        _ = try? decoder.decode(APIEvidenceCapture.self, from: data)
        _ = try? decoder.decode(APIHapticsPlay.self, from: data)
        _ = try? decoder.decode(APISoundPlay.self, from: data)
        _ = try? decoder.decode(APIAudioRecord.self, from: data)
        _ = try? decoder.decode(APIVideoRecord.self, from: data)
        _ = try? decoder.decode(APIBiometricVerify.self, from: data)
    }

    /// What the API's caller gate reads of a refused caller's request head (issue 41): the
    /// head's end and its request line. Oracles: the end is where the first CRLFCRLF ends,
    /// and a request line read is a method of capitals, one space, a path with no space or
    /// query, as the input's first line gives them.
    static func requestHead(_ bytes: [UInt8]) {
        let end = RequestHead.end(in: bytes)
        let naive = bytes.count < 4 ? nil : (0...(bytes.count - 4)).first { Array(bytes[$0..<($0 + 4)]) == [0x0D, 0x0A, 0x0D, 0x0A] }.map { $0 + 4 }
        guard end == naive else { fatalError("request-head: end \(String(describing: end)), expected \(String(describing: naive)): \(bytes)") }
        guard let line = RequestHead.requestLine(in: bytes) else { return }
        let parts = line.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].allSatisfy({ $0.isASCII && $0.isUppercase }), !parts[1].contains("?"),
              bytes.starts(with: Array(parts[0].utf8) + [0x20]) else {
            fatalError("request-head: request line \(line.debugDescription) from \(bytes)")
        }
    }

    /// A sealed location whose sealed content is the input: sealed here to the device's own
    /// key, so what is fuzzed is what the kit parses after the box opens.
    static func location(_ bytes: [UInt8]) {
        var box = [UInt8](repeating: 0, count: bytes.count + Int(crypto_box_sealbytes()))
        guard crypto_box_seal(&box, bytes, UInt64(bytes.count), keys.publicKey) == 0 else { fatalError("location: cannot seal") }
        _ = try? LocationSeal.open(Base64.encode(box), with: keys)
        _ = try? LocationSeal.open(String(decoding: bytes, as: UTF8.self), with: keys)  // and the input as the payload itself
    }

    /// Every body the kit decodes from the Transrify API (and the lab server's state), with
    /// the client's decoder: a hostile server's answer is an error, never a crash. What
    /// decodes must survive the way back (it is what the kit keeps and shows).
    static func transrifyAnswer(_ bytes: [UInt8]) {
        let data = Data(bytes)
        func check<T: Codable & Equatable>(_ type: T.Type) {
            guard let value = try? JSONDecoder().decode(type, from: data) else { return }
            guard let encoded = try? JSONEncoder().encode(value), (try? JSONDecoder().decode(type, from: encoded)) == value else {
                fatalError("transrify-answer: a decoded \(type) does not survive encoding: \(bytes)")
            }
        }
        check(LoginResponse.self)
        check(VerifyResponse.self)
        check(DuressAlertResponse.self)
        check(NearbyAlertsResponse.self)
        check(AckResponse.self)
        check(PresignResponse.self)
        check(FinalizeResponse.self)
        check(TransrifyWire.APIErrorBody.self)
        _ = try? JSONDecoder().decode(LabState.self, from: data)
    }

    /// A fix event's data as a client reads it: by hand (`Fix(apiJSON:)`, FixEventJSON.swift)
    /// it must make of any bytes exactly what Foundation's decoder makes of them — the same
    /// fix, or a refusal — and a fix it reads must be written as Foundation writes it.
    static func fixEvent(_ bytes: [UInt8]) {
        let data = Data(bytes)
        let foundation = try? FieldHALAPI.decoder.decode(Fix.self, from: data)
        let mine = try? Fix(apiJSON: data)
        guard mine == foundation else {
            fatalError("fix-event: by hand \(String(describing: mine)), Foundation \(String(describing: foundation)): \(bytes)")
        }
        if let mine, let written = try? mine.apiJSON(), let expected = try? FieldHALAPI.encoder.encode(mine),
           Array(written.utf8) != Array(expected) {
            fatalError("fix-event: written by hand \(written), by Foundation \(String(decoding: expected, as: UTF8.self))")
        }
        // With the receiver's name beside the fix: the same agreement, both ways.
        let event = try? Fix.apiEvent(data)
        let foundationEvent = try? FieldHALAPI.decoder.decode(FixEventData.self, from: data)
        guard event?.fix == foundationEvent?.fix, event?.device == foundationEvent?.device else {
            fatalError("fix-event: the event by hand \(String(describing: event)), Foundation \(String(describing: foundationEvent)): \(bytes)")
        }
        if let event, let written = try? event.fix.apiJSON(device: event.device),
           let expected = try? FieldHALAPI.encoder.encode(FixEventData(fix: event.fix, device: event.device)),
           Array(written.utf8) != Array(expected) {
            fatalError("fix-event: the event written by hand \(written), by Foundation \(String(decoding: expected, as: UTF8.self))")
        }
    }

    /// A line from a plugin process (or, in the SDK, from the host), as the plugin protocol
    /// reads it, and every value a message carries checked as the host and the SDK check
    /// them: a misbehaving plugin's line is an error, never a crash. A line that parses must
    /// parse again once written back, to the same value (the channel's own JSON reader and
    /// writer, JSONText.swift).
    static func pluginMessage(_ bytes: [UInt8]) {
        guard let message = PluginProtocol.message(bytes) else { return }
        guard PluginProtocol.message(PluginProtocol.line(message).dropLast()) == message else {
            fatalError("plugin-message: a message does not survive being written: \(bytes)")
        }
        // Wherever a value may sit: the result, the parameters, a notification's inner value.
        let params = message["params"] ?? .null
        for value in [message["result"] ?? .null, params, params["fix"] ?? .null, params["value"] ?? .null, message] {
            _ = try? PluginProtocol.fix(from: value, plugin: "fuzz")
            _ = try? PluginProtocol.tag(from: value["tag"], plugin: "fuzz")
            _ = try? PluginProtocol.outcome(from: value, plugin: "fuzz")
            _ = try? PluginProtocol.availability(from: value, plugin: "fuzz")
            _ = try? PluginProtocol.result(from: value, plugin: "fuzz")
            _ = try? PluginProtocol.stage(from: value, plugin: "fuzz")
            _ = try? PluginProtocol.pattern(from: value, subject: "fuzz")
            _ = try? PluginProtocol.timeout(in: value, subject: "fuzz")
            _ = try? PluginProtocol.message(from: value["message"], subject: "fuzz")
            _ = try? PluginProtocol.finger(in: value, subject: "fuzz")
            // The camera, microphone and speaker (1.3); their descriptors are not in the input.
            _ = PluginProtocol.descriptorCount(of: value)
            _ = try? PluginProtocol.formats(from: value, plugin: "fuzz")
            _ = try? PluginProtocol.photoRequest(from: value, subject: "fuzz")
            _ = try? PluginProtocol.videoRequest(from: value, subject: "fuzz")
            _ = try? PluginProtocol.recordingRequest(from: value, subject: "fuzz")
            _ = try? PluginProtocol.videoRecording(from: value, path: "/fuzz", plugin: "fuzz")
            _ = try? PluginProtocol.audioRecording(from: value, path: "/fuzz", plugin: "fuzz")
            _ = try? PluginProtocol.photo(from: value, [], plugin: "fuzz")
            _ = try? PluginProtocol.clip(from: value, [], subject: "fuzz")
        }
    }

    /// A text frame of the alerts WebSocket channel, as the channel's client decodes it.
    static func alertChannel(_ bytes: [UInt8]) {
        guard let text = String(validating: bytes, as: UTF8.self) else { return }
        guard let message = try? JSONDecoder().decode(AlertChannelMessage.self, from: Data(text.utf8)) else { return }
        guard let encoded = try? JSONEncoder().encode(message), (try? JSONDecoder().decode(AlertChannelMessage.self, from: encoded)) == message else {
            fatalError("alert-channel: a decoded message does not survive encoding: \(bytes)")
        }
    }

    /// Vault entries: the input as an entry's file on disk must be refused as tampered (no
    /// input forges the MAC), and the input as an entry's sealed value (what the kit parses
    /// once the box opens) must load as the lock's padded state or fail with a typed error.
    static func vaultEntry(_ bytes: [UInt8]) {
        let raw = vault.entriesDirectory + "/fuzz-raw.sealed"
        guard FileManager.default.createFile(atPath: raw, contents: Data(bytes), attributes: [.posixPermissions: 0o600]) else {
            fatalError("vault: cannot write \(raw)")
        }
        if let opened = try? vault.load("fuzz-raw") { fatalError("vault: an entry nobody sealed opened to \(opened)") }
        guard (try? vault.store(bytes, as: VaultLockStore.entry)) != nil else { fatalError("vault: cannot store") }
        _ = try? VaultLockStore(vault: vault).load()
    }

    /// The lock's audit log as found on disk: verifying it must give a verdict, whatever is
    /// in the file.
    static func auditLog(_ bytes: [UInt8]) {
        let path = scratch + "/audit.log"
        guard FileManager.default.createFile(atPath: path, contents: Data(bytes)) else { fatalError("audit-log: cannot write \(path)") }
        let log = AuditLog(path: path)
        _ = log.verify(recordedCount: 3, recordedHead: String(repeating: "0", count: 64))
        _ = log.head()
    }

    /// In /dev/shm where there is one: the vault writes atomically with fsync, which on a
    /// disk holds a run to about a thousand inputs a second.
    static let scratch: String = {
        let base = access("/dev/shm", W_OK) == 0 ? "/dev/shm/" : NSTemporaryDirectory()
        let directory = base + "fieldhal-fuzz-\(getpid())"
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        return directory
    }()

    static let vault: Vault = {
        guard let vault = try? Vault(stateDirectory: StateDirectory(path: scratch)) else { fatalError("vault: cannot open one in \(scratch)") }
        return vault
    }()

    static let keys: DeviceKeyPair = {
        guard let keys = try? DeviceKeyPair.loadOrCreate(in: vault) else { fatalError("location: no device keys in \(scratch)") }
        return keys
    }()
}

#if FUZZING
/// libFuzzer's driver (in the runtime -sanitize=fuzzer links), started from our own entry
/// point: SwiftPM names an executable's entry `<module>_main` and points `main` at it.
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<CInt>,
                         _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> CInt

@_cdecl("fieldhal_fuzz_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc, arguments = argv
    return LLVMFuzzerRunDriver(&count, &arguments) { data, size in
        FuzzTargets.selected(Array(UnsafeBufferPointer(start: data, count: size)))
        return 0
    }
}

/// The entry libFuzzer's runtime refers to (the driver above is given the same function).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    FuzzTargets.selected(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

extension FuzzTargets {
    /// The target `FIELDHAL_FUZZ_TARGET` names.
    static let selected: @Sendable ([UInt8]) -> Void = {
        let name = ProcessInfo.processInfo.environment["FIELDHAL_FUZZ_TARGET"] ?? ""
        guard let target = all[name] else { fatalError("FIELDHAL_FUZZ_TARGET=\(name): one of \(all.keys.sorted())") }
        return target
    }()
}
#else
/// `fieldhal-fuzz TARGET FILE|DIRECTORY…`: runs the target on each input (a corpus replay).
@main
struct Replay {
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        guard let name = arguments.first, let target = FuzzTargets.all[name] else {
            FileHandle.standardError.write(Data("usage: fieldhal-fuzz TARGET FILE|DIRECTORY… (targets: \(FuzzTargets.all.keys.sorted().joined(separator: ", ")))\n".utf8))
            exit(64)
        }
        var inputs = 0
        for path in arguments.dropFirst() {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
                FileHandle.standardError.write(Data("fieldhal-fuzz: \(path): no such file\n".utf8))
                exit(66)
            }
            let files = isDirectory.boolValue
                ? ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted().map { path + "/" + $0 }
                : [path]
            for file in files {
                guard let data = FileManager.default.contents(atPath: file) else { continue }
                target([UInt8](data))
                inputs += 1
            }
        }
        print("fieldhal-fuzz \(name): \(inputs) inputs, no failure")
    }
}
#endif
