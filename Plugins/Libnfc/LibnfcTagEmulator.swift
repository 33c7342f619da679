#if NFC
import CNFC
import FieldHAL
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Tag emulation: the chip becomes an ISO-DEP card (a random 4-byte UID, SAK 0x20) and
/// answers a reader's SELECT and READ BINARY APDUs with the core's Type 4 application,
/// until a reader has read the whole NDEF message or the timeout passes.
final class LibnfcTagEmulator: NFCTagEmulator {
    let device: LibnfcDevice

    init(device: LibnfcDevice) { self.device = device }

    var deviceName: String { device.deviceName }
    var identity: DeviceIdentity? { device.identity }

    /// How long one exchange with an activated reader may take before it counts as gone.
    static let exchangeTimeout = Duration.seconds(1)

    func emulate(_ message: NDEFMessage, timeout: Duration) async throws -> EmulationOutcome {
        let card: Type4TagApplication
        do {
            card = try Type4TagApplication(message: message)
        } catch {
            throw FieldHALError(.invalidArgument, subject: "nfc_emulator \(deviceName)", detail: "\(error)")
        }
        return try await device.operation { [self] interrupt in
            device.leaveInitiator()
            defer {
                if device.isOpen { _ = try? device.call("idle", bound: .seconds(1)) { nfc_idle($0) } }
                device.leaveInitiator()
            }
            return try serve(card, until: ContinuousClock.now + timeout, interrupt)
        }
    }

    func close() async { await LibnfcDevices.shared.release(device) }

    // MARK: On the device thread

    /// Waits for readers one after another; a reader that leaves before the end of the
    /// message does not end the emulation, the timeout does.
    private func serve(_ initial: Type4TagApplication, until deadline: ContinuousClock.Instant, _ interrupt: OperationInterrupt) throws -> EmulationOutcome {
        var card = initial
        var buffer = [UInt8](repeating: 0, count: 264)
        while true {
            guard !interrupt.isCancelled else { throw FieldHALError.cancelled(device.subject) }
            let remaining = deadline - ContinuousClock.now
            guard remaining > .milliseconds(1) else { return EmulationOutcome(wasRead: false, commandCount: card.commandCount) }
            var uid: [UInt8] = [0, 0, 0]
            var generator = SystemRandomNumberGenerator()
            for index in uid.indices { uid[index] = generator.next() }
            let activated = try device.call("target mode", bound: remaining + LibnfcDevice.watchdogGrace, returning: [NFC_ETIMEOUT]) { device in
                fieldhal_nfc_target_init_type4(device, uid, &buffer, buffer.count, remaining.milliseconds)
            }
            guard activated >= 0 else { continue }  // no reader before the deadline: loop ends above
            // The PN532 answers RATS itself and hands it over; APDUs follow.
            var incoming = Array(buffer.prefix(Int(activated)))
            if incoming.first == 0xE0 { incoming = [] }
            while true {
                if !incoming.isEmpty {
                    let response = card.respond(to: incoming)
                    try device.call("send to reader", bound: Self.exchangeTimeout + LibnfcDevice.watchdogGrace) { device in
                        nfc_target_send_bytes(device, response, response.count, Self.exchangeTimeout.milliseconds)
                    }
                    if card.messageWasRead { return EmulationOutcome(wasRead: true, commandCount: card.commandCount) }
                }
                guard !interrupt.isCancelled else { throw FieldHALError.cancelled(device.subject) }
                let received = try device.call("receive from reader", bound: Self.exchangeTimeout + LibnfcDevice.watchdogGrace,
                                                returning: [NFC_ETGRELEASED, NFC_ETIMEOUT, NFC_ERFTRANS]) { device in
                    nfc_target_receive_bytes(device, &buffer, buffer.count, Self.exchangeTimeout.milliseconds)
                }
                guard received >= 0 else { break }  // the reader left: wait for the next one
                incoming = Array(buffer.prefix(Int(received)))
            }
        }
    }
}
#endif
