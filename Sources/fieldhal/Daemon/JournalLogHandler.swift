import Foundation
import Logging
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
        // One write per entry, newlines inside a message kept on its line (journald splits on them).
        let text = "<\(Self.priority(level))>\(message)\(suffix)".replacingOccurrences(of: "\n", with: " ⏎ ") + "\n"
        FileHandle.standardOutput.write(Data(text.utf8))
    }
}
