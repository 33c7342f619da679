import Logging
import Synchronization

/// A logger's lines as "level message", kept for a test to read (swift-log's handler).
public final class CapturedLines: Sendable {
    private let kept = Mutex<[String]>([])

    public init() {}

    public var lines: [String] { kept.withLock { $0 } }

    /// A logger that keeps its lines here, from `level` up.
    public func logger(label: String = "test", level: Logger.Level = .info) -> Logger {
        var logger = Logger(label: label) { [self] _ in Handler(owner: self) }
        logger.logLevel = level
        return logger
    }

    fileprivate func keep(_ line: String) { kept.withLock { $0.append(line) } }

    struct Handler: LogHandler {
        let owner: CapturedLines
        var logLevel: Logger.Level = .trace
        var metadata: Logger.Metadata = [:]
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) { owner.keep("\(event.level) \(event.message)") }
    }
}
