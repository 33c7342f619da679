/// A configuration file that FieldHAL refuses, with where and why.
/// Printed: `/etc/fieldhal/fieldhal.toml:12: gps.interval_ms: expected an integer, found string "1s"`.
public struct ConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file, or a label such as `built-in fake kit`.
    public var file: String
    /// The dotted key the error is about (`gps.interval_ms`), when there is one.
    public var key: String?
    /// The 1-based line, when the parser reports it or the key can be found in the text.
    public var line: Int?
    public var message: String

    public init(file: String, key: String? = nil, line: Int? = nil, message: String) {
        self.file = file
        self.key = key
        self.line = line
        self.message = message
    }

    public var description: String {
        var text = file
        if let line { text += ":\(line)" }
        text += ": "
        if let key { text += "\(key): " }
        return text + message
    }
}
