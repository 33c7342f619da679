import ArgumentParser
import FieldHAL
import FieldHALComposition
import FieldHALAPI
import FieldHALCommandLine

struct NFCCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "nfc", abstract: "Read, write and emulate NFC tags.",
                                                    subcommands: [NFCReadCommand.self, NFCWriteCommand.self, Emulate.self])

    struct Emulate: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "emulate",
            abstract: "Present an NFC Forum Type 4 tag holding a Text or URI record until a reader reads it.",
            discussion: "Exits 0 when a reader read the whole message, 75 when the timeout passed first.")
        @OptionGroup var global: GlobalOptions
        @OptionGroup var target: DeviceOption
        @OptionGroup var content: NFCMessageOptions
        @Option(help: "Seconds to wait for a reader.") var timeout: Double = 30

        func execute(_ environment: Environment) async throws {
            let record = try content.record()
            let wait = try duration(seconds: timeout, option: "--timeout")
            var outcome = try await environment.throughDaemon { try await $0.emulateTag([record], timeout: wait, device: target.device) }
            if outcome == nil {
                outcome = try await environment.withKit(for: .nfcEmulator) { kit in
                    try await kit.nfcEmulator(named: target.device).emulate(try APINFCMessage(records: [record]).message(), timeout: wait)
                }
            }
            guard let outcome else { return }
            try Output.emit(outcome, json: global.json) {
                outcome.wasRead ? "read by a reader (\(outcome.commandCount) commands)" : "not read within \(timeout) s"
            }
            if !outcome.wasRead { throw ExitCode(75) }
        }
    }
}

extension NFCReadCommand: FieldHALSubcommand {
    public func run() async throws { try await runReportingFailures() }

    public func execute(_ environment: Environment) async throws {
        let wait = try wait()
        var tag = try await environment.throughDaemon { try await $0.readTag(timeout: wait, device: target.device) }
        if tag == nil {
            tag = APITag(try await environment.withKit(for: .nfcReader) { kit in try await kit.nfcReader(named: target.device).readTag(timeout: wait) })
        }
        guard let tag else { return }
        try emit(tag)
    }
}

extension NFCWriteCommand: FieldHALSubcommand {
    public func run() async throws { try await runReportingFailures() }

    public func execute(_ environment: Environment) async throws {
        let record = try content.record()
        let wait = try wait()
        var tag = try await environment.throughDaemon { try await $0.writeTag([record], timeout: wait, device: target.device) }
        if tag == nil {
            tag = APITag(try await environment.withKit(for: .nfcReader) { kit in
                try await kit.nfcReader(named: target.device).write(try APINFCMessage(records: [record]).message(), timeout: wait)
            })
        }
        guard let tag else { return }
        try emit(tag)
    }
}
