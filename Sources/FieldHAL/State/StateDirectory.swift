#if canImport(Glibc)
import Glibc
#endif

/// The directory where FieldHAL keeps state: the vault, queues, counters. Private to the
/// service user (mode 0700); every file in it is written with `AtomicFile`.
public struct StateDirectory: Sendable {
    public static let defaultPath = "/var/lib/fieldhal"
    public static let environmentVariable = "FIELDHAL_STATE_DIR"

    public let path: String

    public init(path: String) {
        self.path = path.count > 1 && path.hasSuffix("/") ? String(path.dropLast()) : path
    }

    /// The state directory by precedence: the command-line flag, then `FIELDHAL_STATE_DIR`,
    /// then the configuration's `kit.state_dir`, then `/var/lib/fieldhal`.
    public static func resolve(flag: String?, environment: [String: String], configured: String?) -> StateDirectory {
        StateDirectory(path: flag ?? environment[environmentVariable].flatMap { $0.isEmpty ? nil : $0 }
            ?? configured ?? defaultPath)
    }

    /// Creates the directory (and parents) if needed, mode 0700.
    public func prepare() throws {
        try Self.makeDirectories(path, mode: 0o700)
    }

    /// The absolute path of `name` inside the state directory.
    public func file(_ name: String) -> String { "\(path)/\(name)" }

    static func makeDirectories(_ path: String, mode: mode_t) throws {
        var current = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            current += "/\(component)"
            if mkdir(current, mode) != 0 && errno != EEXIST {
                throw AtomicFileWriter.ioError(current, "create directory")
            }
        }
        var info = stat()
        guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
            throw FieldHALError(.io, subject: path, detail: "exists but is not a directory")
        }
    }
}
