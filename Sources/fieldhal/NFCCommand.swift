import ArgumentParser
import FieldHAL
import FieldHALAPI

struct NFCCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "nfc", abstract: "Read, write and emulate NFC tags.",
                                                    subcommands: [Read.self, Write.self, Emulate.self])

    /// A tag as the CLI prints it: the API's form, so that a tag read through the daemon
    /// and one read here print the same.
    struct TagReport: Encodable {
        let type: String
        let uid: String
        let atqa: String?
        let sak: String?
        let records: [RecordReport]

        init(_ tag: APITag) {
            type = tag.type
            uid = tag.uid
            atqa = tag.atqa
            sak = tag.sak
            records = tag.records.map { RecordReport(kind: $0.kind, value: $0.value, language: $0.language) }
        }

        var text: String {
            var lines = ["\(type) tag \(uid)" + (atqa.map { " ATQA \($0)" } ?? "") + (sak.map { " SAK \($0)" } ?? "")]
            if records.isEmpty { lines.append("  no NDEF records") }
            lines += records.map { "  \($0.kind): \($0.value)" }
            return lines.joined(separator: "\n")
        }
    }

    struct RecordReport: Encodable {
        let kind: String
        let value: String
        let language: String?
    }

    struct MessageOptions: ParsableArguments {
        @Option(help: "A Text record to carry.") var text: String?
        @Option(help: "A URI record to carry.") var uri: String?
        @Option(help: "The Text record's language code.") var language = "en"

        /// The record as the API takes it; checked here first, so that a mistake reads the
        /// same with or without a daemon.
        func record() throws -> APIRecordInput {
            switch (text, uri) {
            case (let text?, nil):
                do { _ = try NDEFMessage.text(text, language: language) } catch {
                    throw FieldHALError(.invalidArgument, subject: "--language", detail: "\(error)")
                }
                return APIRecordInput(text: text, language: language)
            case (nil, let uri?):
                return APIRecordInput(uri: uri)
            default:
                throw FieldHALError(.invalidArgument, subject: "nfc", detail: "give exactly one of --text and --uri")
            }
        }
    }

    struct Read: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "read",
            abstract: "Wait for a tag and print its UID and NDEF records.",
            discussion: "With a daemon running (fieldhal run), the read goes through its API and takes its turn on the chip.")
        @OptionGroup var global: GlobalOptions
        @Option(help: "Seconds to wait for a tag.") var timeout: Double = 10

        func execute(_ environment: Environment) async throws {
            let wait = try duration(seconds: timeout, option: "--timeout")
            var tag = try await environment.throughDaemon { try await $0.readTag(timeout: wait) }
            if tag == nil {
                tag = APITag(try await environment.withKit(for: .nfcReader) { kit in try await kit.nfcReader().readTag(timeout: wait) })
            }
            guard let tag else { return }
            let report = TagReport(tag)
            try Output.emit(report, json: global.json) { report.text }
        }
    }

    struct Write: FieldHALSubcommand {
        static let configuration = CommandConfiguration(commandName: "write", abstract: "Wait for a tag and write an NDEF Text or URI record to it.")
        @OptionGroup var global: GlobalOptions
        @OptionGroup var content: MessageOptions
        @Option(help: "Seconds to wait for a tag.") var timeout: Double = 10

        func execute(_ environment: Environment) async throws {
            let record = try content.record()
            let wait = try duration(seconds: timeout, option: "--timeout")
            var tag = try await environment.throughDaemon { try await $0.writeTag([record], timeout: wait) }
            if tag == nil {
                tag = APITag(try await environment.withKit(for: .nfcReader) { kit in
                    try await kit.nfcReader().write(try APINFCMessage(records: [record]).message(), timeout: wait)
                })
            }
            guard let tag else { return }
            let report = TagReport(tag)
            try Output.emit(report, json: global.json) { "written:\n" + report.text }
        }
    }

    struct Emulate: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "emulate",
            abstract: "Present an NFC Forum Type 4 tag holding a Text or URI record until a reader reads it.",
            discussion: "Exits 0 when a reader read the whole message, 75 when the timeout passed first.")
        @OptionGroup var global: GlobalOptions
        @OptionGroup var content: MessageOptions
        @Option(help: "Seconds to wait for a reader.") var timeout: Double = 30

        func execute(_ environment: Environment) async throws {
            let record = try content.record()
            let wait = try duration(seconds: timeout, option: "--timeout")
            var outcome = try await environment.throughDaemon { try await $0.emulateTag([record], timeout: wait) }
            if outcome == nil {
                outcome = try await environment.withKit(for: .nfcEmulator) { kit in
                    try await kit.nfcEmulator().emulate(try APINFCMessage(records: [record]).message(), timeout: wait)
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
