import Foundation
import Logging
import FieldHAL
import FieldHALComposition
import FieldHALCommandLine

/// swift-log to the systemd journal through standard output: one line per message with the
/// syslog priority as a `<N>` prefix (sd-daemon(3)), which journald turns into the entry's
/// priority (`journalctl -p warning`), and no timestamp (the journal keeps its own).
/// Chosen when systemd connected standard output to the journal (`JOURNAL_STREAM`).
struct JournalLogHandler: LogHandler {
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Whether standard output is the journal stream systemd announced.
    static var standardOutputIsJournal: Bool {
        guard let stream = ProcessInfo.processInfo.environment["JOURNAL_STREAM"] else { return false }
        var info = stat()
        guard fstat(STDOUT_FILENO, &info) == 0 else { return false }
        return stream == "\(info.st_dev):\(info.st_ino)"
    }

    static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    func log(event: LogEvent) {
        let all = metadata.merging(event.metadata ?? [:]) { $1 }
        let (level, message) = (event.level, event.message)
        let suffix = all.isEmpty ? "" : " " + all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        // One write per entry: every control character in it shown as \u001b, a newline
        // included (journald splits on them; a value from outside must not forge a line).
        let text = "<\(Self.priority(level))>" + TerminalText.escaped("\(message)\(suffix)") + "\n"
        FileHandle.standardOutput.write(Data(text.utf8))
    }
}

/// Any log handler, with each message's control characters shown as `\u001b` (a newline
/// too): the daemon's log outside the journal gets the same safety as the journal.
struct EscapingLogHandler: LogHandler {
    var inner: any LogHandler

    var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue }
    }

    var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        var event = event
        event.message = "\(TerminalText.escaped(event.message.description))"
        inner.log(event: event)
    }
}
