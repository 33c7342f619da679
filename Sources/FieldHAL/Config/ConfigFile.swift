/// The configuration file's text, read with the bounds a file from outside needs: a regular
/// file of at most `limit` bytes, UTF-8. Every failure is a `ConfigError` naming the file
/// (exit 78), never a hang on a FIFO or a process grown by `/dev/zero`.
public enum ConfigFile {
    /// No kit needs more: the largest example is a few KiB, a long GPS track a few hundred.
    public static let limit = 1 << 20

    public static func read(_ path: String) throws(ConfigError) -> String {
        let bytes: [UInt8]?
        do {
            bytes = try RegularFile.read(path, limit: limit, what: "configuration file")
        } catch {
            throw ConfigError(file: path, message: error.detail + (error.advice.map { ": \($0)" } ?? ""))
        }
        guard let bytes else { throw ConfigError(file: path, message: "configuration file does not exist") }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw ConfigError(file: path, message: "configuration file is not UTF-8 text")
        }
        return text
    }
}
