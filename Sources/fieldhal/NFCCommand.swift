import ArgumentParser
import FieldHAL
import FieldHALComposition
import FieldHALAPI
import FieldHALCommandLine
import FieldHALServer
import Foundation

struct NFCCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "nfc", abstract: "Read, write and emulate NFC tags.",
                                                    subcommands: [NFCReadCommand.self, NFCWriteCommand.self, Emulate.self, Watch.self])

    struct Watch: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "watch",
            abstract: "Print each tag as it comes into a reader's field and as it leaves, one line each.",
            discussion: """
            With a daemon answering on the configuration's [api] socket, its tag events: one look at each reader \
            a second, however many follow. Without one, this command looks the same way itself. With several \
            readers (--device more than once, or --all), each line starts with the reader's name; with --json, \
            each line is one event with its "device".
            """)
        @OptionGroup var global: GlobalOptions
        @OptionGroup var watched: WatchedDevices
        @Option(help: "Stop after this many tags found or lost (default: until interrupted).") var count: Int?

        func validate() throws {
            if let count, count < 1 { throw ValidationError("--count: give a whole number of at least 1") }
        }

        func execute(_ environment: Environment) async throws {
            var printed = 0
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            /// Prints one event; true when the count is reached.
            func show(_ event: APITagEvent, several: Bool) throws -> Bool {
                if global.json {
                    Output.streamLine(String(decoding: try encoder.encode(event), as: UTF8.self))
                } else {
                    let reader = several ? "\(event.device ?? "?"): " : ""
                    let records = event.tag.records.map { "\($0.kind) \"\($0.value)\"" }.joined(separator: "; ")
                    Output.streamLine("\(reader)\(event.state.rawValue) \(event.tag.type) tag \(event.tag.uid)" + (records.isEmpty ? "" : ": \(records)"))
                }
                printed += 1
                return count.map { printed >= $0 } ?? false
            }
            let served: Void? = try await environment.throughDaemon { daemon in
                let configured = watched.all ? try await daemon.devices().filter { $0.capability == .nfcReader }.compactMap(\.name) : []
                let names = watched.chosen(from: configured)
                for try await event in daemon.events([.tag], devices: names) {
                    if case .tag(let tag) = event, try show(tag, several: names.count > 1) { break }
                }
            }
            guard served == nil else { return }
            // No daemon: the same watch, on readers of this command's own.
            try await environment.withKit(for: .nfcReader) { kit in
                let chosen = watched.chosen(from: kit.names(of: .nfcReader))
                let names = chosen.isEmpty ? [nil] : chosen.map(Optional.some)
                let readers = try names.map { name in
                    (name: try kit.key(.nfcReader, named: name).name,
                     watch: TagPresence(NFCTurns(reader: try kit.nfcReader(named: name), emulator: nil)))
                }
                let followed = await Result { () async throws -> Void in
                    try await SeveralWatches.follow(readers.map { (name: $0.name, items: $0.watch.watch().changes) }) { change, name in
                        try show(APITagEvent(change, device: name), several: readers.count > 1)
                    }
                }
                for reader in readers { await reader.watch.close() }
                try followed.get()
            }
        }
    }

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
