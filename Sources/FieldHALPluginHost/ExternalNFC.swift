import FieldHAL
import FieldHALPluginProtocol
import Foundation
import Logging

/// An NFC reader in an external plugin: each read and write is a request (`nfc.read`,
/// `nfc.write`) whose answer the host checks as it checks a tag read in process.
final class ExternalNFCReader: NFCReader {
    let deviceName: String
    private let link: RequestLink.Hold

    private init(deviceName: String, link: RequestLink.Hold) {
        self.deviceName = deviceName
        self.link = link
    }

    static func open(_ manifest: PluginManifest, _ parameters: PluginParameters, in links: RequestLinks, logger: Logger) async throws -> ExternalNFCReader {
        let (link, device) = try await RequestLink.started(manifest, .nfcReader, parameters, in: links, logger: logger)
        return ExternalNFCReader(deviceName: device, link: link)
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

    func close() async { await link.release() }
}

/// A tag emulator in an external plugin: each emulation is an `nfc.emulate` request.
final class ExternalTagEmulator: NFCTagEmulator {
    let deviceName: String
    private let link: RequestLink.Hold

    private init(deviceName: String, link: RequestLink.Hold) {
        self.deviceName = deviceName
        self.link = link
    }

    static func open(_ manifest: PluginManifest, _ parameters: PluginParameters, in links: RequestLinks, logger: Logger) async throws -> ExternalTagEmulator {
        let (link, device) = try await RequestLink.started(manifest, .nfcEmulator, parameters, in: links, logger: logger)
        return ExternalTagEmulator(deviceName: device, link: link)
    }

    func emulate(_ message: NDEFMessage, timeout: Duration) async throws -> EmulationOutcome {
        let parameters = try PluginProtocol.nfcParameters(timeout: timeout, message: message)
        let answer = try await link.call(PluginProtocol.NFCMethod.emulate, parameters, timeout: timeout)
        return try PluginProtocol.outcome(from: answer, plugin: link.manifest.name)
    }

    func close() async { await link.release() }
}
