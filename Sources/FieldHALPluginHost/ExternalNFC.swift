import FieldHAL
import FieldHALPluginProtocol
import Foundation

/// An NFC reader in an external plugin: each read and write is a request (`nfc.read`,
/// `nfc.write`) whose answer the host checks as it checks a tag read in process.
final class ExternalNFCReader: NFCReader, ExternalRequestDevice {
    static let capability = Capability.nfcReader
    let deviceName: String
    let link: RequestLink.Hold

    init(deviceName: String, link: RequestLink.Hold) {
        self.deviceName = deviceName
        self.link = link
    }

    func readTag(timeout: Duration) async throws -> NFCTag {
        let answer = try await link.call(PluginProtocol.NFCMethod.read, try PluginProtocol.nfcParameters(timeout: timeout), timeout: timeout)
        return try PluginProtocol.tag(from: answer["tag"], plugin: link.manifest.name)
    }

    func write(_ message: NDEFMessage, timeout: Duration) async throws -> NFCTag {
        let parameters = try PluginProtocol.nfcParameters(timeout: timeout, message: message)
        let answer = try await link.call(PluginProtocol.NFCMethod.write, parameters, timeout: timeout)
        return try PluginProtocol.tag(from: answer["tag"], plugin: link.manifest.name)
    }
}

/// A tag emulator in an external plugin: each emulation is an `nfc.emulate` request.
final class ExternalTagEmulator: NFCTagEmulator, ExternalRequestDevice {
    static let capability = Capability.nfcEmulator
    let deviceName: String
    let link: RequestLink.Hold

    init(deviceName: String, link: RequestLink.Hold) {
        self.deviceName = deviceName
        self.link = link
    }

    func emulate(_ message: NDEFMessage, timeout: Duration) async throws -> EmulationOutcome {
        let parameters = try PluginProtocol.nfcParameters(timeout: timeout, message: message)
        let answer = try await link.call(PluginProtocol.NFCMethod.emulate, parameters, timeout: timeout)
        return try PluginProtocol.outcome(from: answer, plugin: link.manifest.name)
    }
}
