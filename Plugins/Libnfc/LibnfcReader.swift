#if NFC
import CNFC
import FieldHAL
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The reader side: polls for an ISO 14443-A tag and reads or writes its NDEF message.
final class LibnfcReader: NFCReader {
    struct Settings: Sendable {
        /// The pause between two polls that found nothing.
        var pollInterval = Duration.milliseconds(100)
        /// How long one tag command may take before the tag counts as gone.
        var commandTimeout = Duration.milliseconds(500)
        /// Whether a tag read comes with the commands and answers that read it (`exchanges`).
        var keepsExchanges = false
    }

    let device: LibnfcDevice
    let settings: Settings

    init(device: LibnfcDevice, settings: Settings) {
        self.device = device
        self.settings = settings
    }

    var deviceName: String { device.deviceName }
    var identity: DeviceIdentity? { device.identity }

    func readTag(timeout: Duration) async throws -> NFCTag {
        try await device.operation { [self] interrupt in
            let found = try waitForTag(timeout: timeout, interrupt)
            defer { deselect() }
            return try read(found)
        }
    }

    func write(_ message: NDEFMessage, timeout: Duration) async throws -> NFCTag {
        try await device.operation { [self] interrupt in
            let found = try waitForTag(timeout: timeout, interrupt)
            defer { deselect() }
            guard found.type == .type2 else {
                throw FieldHALError(.unsupported, subject: device.subject,
                                    detail: "tag \(found.uidString) is \(found.type.rawValue); FieldHAL writes NFC Forum Type 2 tags (NTAG21x, Ultralight)")
            }
            try decoding(found) { try Type2NDEFAccess.writeMessage(message, transceive: transceive) }
            return try read(found)
        }
    }

    func close() async { await LibnfcDevices.shared.release(device) }

    // MARK: On the device thread

    /// Polls until a tag is in the field, the timeout passes or the task is cancelled.
    private func waitForTag(timeout: Duration, _ interrupt: OperationInterrupt) throws -> NFCTag {
        let deadline = ContinuousClock.now + timeout
        do {
            try device.ensureInitiator()
        } catch let failure as FieldHALError where failure.kind == .timeout {
            // Once more, on the chip opened again (the failed call dropped it): a PN532 woken
            // from power-down misses the first command it is sent, and a chip on a loaded
            // machine's pty can answer a set-up late. A chip that fails twice has failed; a
            // hung one fails the poll below at once rather than wait out the request.
            try device.ensureInitiator()
        }
        while true {
            guard !interrupt.isCancelled else { throw FieldHALError.cancelled(device.subject) }
            var target = fieldhal_nfc_iso14443a()
            let found = try device.call("tag poll", bound: .seconds(1)) { fieldhal_nfc_select_iso14443a($0, &target) }
            if found > 0 { return Self.tag(from: target) }
            let remaining = deadline - ContinuousClock.now
            guard remaining > .zero else { throw FieldHALError.timeout(device.subject, after: timeout, waitingFor: "tag") }
            guard interrupt.pause(min(settings.pollInterval, remaining)) else { throw FieldHALError.cancelled(device.subject) }
        }
    }

    /// The tag as selected, typed from its SAK.
    static func tag(from target: fieldhal_nfc_iso14443a) -> NFCTag {
        let uid = withUnsafeBytes(of: target.uid) { Array($0.prefix(target.uid_length)) }
        let atqa = UInt16(target.atqa.0) << 8 | UInt16(target.atqa.1)
        return NFCTag(type: NFCTagType(sak: target.sak), uid: uid, atqa: atqa, sak: target.sak)
    }

    /// The found tag's message, with the exchanges that read it when they are kept.
    private func read(_ found: NFCTag) throws -> NFCTag {
        guard settings.keepsExchanges else { return try decoding(found) { try TagReading.read(found, transceive: transceive) } }
        var exchanges: [TagExchange] = []
        func kept(_ command: [UInt8]) throws -> [UInt8] {
            do {
                let response = try transceive(command)
                exchanges.append(TagExchange(command: command, response: response))
                return response
            } catch {
                exchanges.append(TagExchange(command: command, response: nil))
                throw error
            }
        }
        var tag = try decoding(found) { try TagReading.read(found, transceive: kept) }
        tag.exchanges = exchanges
        return tag
    }

    /// Runs an NDEF procedure; a tag whose data does not decode is a typed error naming it.
    private func decoding<T>(_ tag: NFCTag, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as NDEFError {
            throw TagReading.error(error, reading: tag, subject: device.subject)
        }
    }

    /// Sends one command to the selected tag (CRC and ISO-DEP framing by the chip).
    private func transceive(_ command: [UInt8]) throws -> [UInt8] {
        var reply = [UInt8](repeating: 0, count: 264)
        let timeout = settings.commandTimeout
        let count = try device.call("tag command 0x\(String(command[0], radix: 16))", bound: timeout + LibnfcDevice.watchdogGrace) { device in
            nfc_initiator_transceive_bytes(device, command, command.count, &reply, reply.count, timeout.milliseconds)
        }
        return Array(reply.prefix(Int(count)))
    }

    private func deselect() {
        guard device.isOpen else { return }  // dropped after an error: nothing to release
        _ = try? device.call("deselect", bound: .seconds(1)) { nfc_initiator_deselect_target($0) }
    }
}
#endif
