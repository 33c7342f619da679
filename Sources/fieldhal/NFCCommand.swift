import ArgumentParser
import FieldHAL

struct NFCCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "nfc", abstract: "Read, write and emulate NFC tags.",
                                                    subcommands: [Read.self, Write.self, Emulate.self])

    /// A tag as the CLI prints it.
    struct TagReport: Encodable {
        let type: String
        let uid: String
        let atqa: String?
        let sak: String?
        let records: [RecordReport]

        init(_ tag: NFCTag) {
            type = tag.type.rawValue
            uid = tag.uidString
            atqa = tag.atqa.map { String(format: "%04X", $0) }
            sak = tag.sak.map { String(format: "%02X", $0) }
            records = (tag.ndef?.records ?? []).map(RecordReport.init)
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

        init(_ record: NDEFRecord) {
            switch try? record.content() {
            case .text(let text, let language)?: (kind, value, self.language) = ("text", text, language)
            case .uri(let uri)?: (kind, value, language) = ("uri", uri, nil)
            case .absoluteURI(let uri)?: (kind, value, language) = ("absolute-uri", uri, nil)
            case .media(let type, let payload)?: (kind, value, language) = ("media", "\(type), \(payload.count) bytes", nil)
            case .external(let type, let payload)?: (kind, value, language) = ("external", "\(type), \(payload.count) bytes", nil)
            case .empty?: (kind, value, language) = ("empty", "", nil)
            case .other(let tnf, _, let payload)?: (kind, value, language) = ("tnf-\(tnf.rawValue)", "\(payload.count) bytes", nil)
            case nil: (kind, value, language) = ("malformed", "record payload does not decode", nil)
            }
        }
    }

    struct MessageOptions: ParsableArguments {
        @Option(help: "A Text record to carry.") var text: String?
        @Option(help: "A URI record to carry.") var uri: String?
        @Option(help: "The Text record's language code.") var language = "en"

        func message() throws -> NDEFMessage {
            switch (text, uri) {
            case (let text?, nil):
                do { return try .text(text, language: language) } catch {
                    throw FieldHALError(.invalidArgument, subject: "--language", detail: "\(error)")
                }
            case (nil, let uri?):
                return .uri(uri)
            default:
                throw FieldHALError(.invalidArgument, subject: "nfc", detail: "give exactly one of --text and --uri")
            }
        }
    }

    struct Read: FieldHALSubcommand {
        static let configuration = CommandConfiguration(abstract: "Wait for a tag and print its UID and NDEF records.")
        @OptionGroup var global: GlobalOptions
        @Option(help: "Seconds to wait for a tag.") var timeout: Double = 10

        func execute(_ environment: Environment) async throws {
            let wait = try duration(seconds: timeout, option: "--timeout")
            let tag = try await environment.withKit(for: .nfcReader) { kit in try await kit.nfcReader().readTag(timeout: wait) }
            let report = TagReport(tag)
            try Output.emit(report, json: global.json) { report.text }
        }
    }

    struct Write: FieldHALSubcommand {
        static let configuration = CommandConfiguration(abstract: "Wait for a tag and write an NDEF Text or URI record to it.")
        @OptionGroup var global: GlobalOptions
        @OptionGroup var content: MessageOptions
        @Option(help: "Seconds to wait for a tag.") var timeout: Double = 10

        func execute(_ environment: Environment) async throws {
            let message = try content.message()
            let wait = try duration(seconds: timeout, option: "--timeout")
            let tag = try await environment.withKit(for: .nfcReader) { kit in try await kit.nfcReader().write(message, timeout: wait) }
            let report = TagReport(tag)
            try Output.emit(report, json: global.json) { "written:\n" + report.text }
        }
    }

    struct Emulate: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            abstract: "Present an NFC Forum Type 4 tag holding a Text or URI record until a reader reads it.",
            discussion: "Exits 0 when a reader read the whole message, 75 when the timeout passed first.")
        @OptionGroup var global: GlobalOptions
        @OptionGroup var content: MessageOptions
        @Option(help: "Seconds to wait for a reader.") var timeout: Double = 30

        func execute(_ environment: Environment) async throws {
            let message = try content.message()
            let wait = try duration(seconds: timeout, option: "--timeout")
            let outcome = try await environment.withKit(for: .nfcEmulator) { kit in
                try await kit.nfcEmulator().emulate(message, timeout: wait)
            }
            try Output.emit(outcome, json: global.json) {
                outcome.wasRead ? "read by a reader (\(outcome.commandCount) commands)" : "not read within \(timeout) s"
            }
            if !outcome.wasRead { throw ExitCode(75) }
        }
    }
}
